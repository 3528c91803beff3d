"""SSRF guard: resolve a host and refuse internal addresses unless allow-listed.

``settings.MAS_WEB_FETCH_ALLOW`` lists hosts or CIDRs that may be reached even
though they are loopback/private/link-local (tests allow 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

from django.conf import settings

METADATA_HOSTS = {"metadata.google.internal", "metadata"}


class BlockedAddress(Exception):
    """The URL's host resolves to an address the guard refuses."""


def _allowed(host: str, ip: ipaddress._BaseAddress) -> bool:
    for entry in getattr(settings, "MAS_WEB_FETCH_ALLOW", ()) or ():
        entry = str(entry).strip()
        if not entry:
            continue
        if entry.lower() == host.lower():
            return True
        try:
            if ip in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def _internal(ip: ipaddress._BaseAddress) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return (ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast
            or ip.is_reserved or ip.is_unspecified or str(ip) == "169.254.169.254")


async def resolve_checked(host: str, port: int) -> str:
    """Resolve ``host`` and return one address the guard accepts (to pin the connection to)."""
    if not host:
        raise BlockedAddress("the URL has no host")
    if host.lower() in METADATA_HOSTS:
        raise BlockedAddress(f"host {host} is a cloud metadata service and is refused")
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise BlockedAddress(f"cannot resolve host {host}: {exc.strerror or exc}") from None
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if _internal(ip) and not _allowed(host, ip):
            raise BlockedAddress(
                f"host {host} resolves to {ip}, a private/loopback/link-local address; refused "
                "(allow it in MAS_WEB_FETCH_ALLOW)")
    return addresses[0]
