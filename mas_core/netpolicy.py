"""Which addresses a URL chosen by a team (or a model) may reach: the policy web_fetch, MCP servers and
model providers share.

Loopback, private, link-local, shared, reserved and multicast addresses — the
server's own services, the operator's network, cloud metadata at
169.254.169.254 — are refused unless an allow-list names them. An entry of an
allow-list is a host name, an address or a CIDR, optionally with ``:port``
(``127.0.0.1:11434``, ``[::1]:8080``, ``ollama.lan:11434``, ``10.0.0.0/8``); a
host name entry allows every address that name resolves to. The cloud metadata
host names are refused whatever the list says.

Two checks: :func:`url_refusal` on save (literal addresses and names such as
``localhost``, no DNS), and :func:`resolve_checked` when connecting — it
resolves the name and checks every address, and :func:`guarded_transport`
then connects to the address it checked (the name stays in the Host header
and TLS), so a name that resolves elsewhere on a second lookup gains nothing.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata"})
METADATA_ADDRESS = ipaddress.ip_address("169.254.169.254")
LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
HOST_RE = re.compile(r"^[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?$")
LOOPBACK = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))
MAX_ADDRESSES = 32  # a name with more answers than this is refused rather than checked for ever

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class BlockedAddress(Exception):
    """The URL's host is, or resolves to, an address the policy refuses."""


@dataclass(frozen=True)
class AllowEntry:
    host: str | None = None
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None
    port: int | None = None

    def covers(self, host: str, ip: IPAddress | None, port: int | None) -> bool:
        if self.port is not None and port != self.port:
            return False
        if self.host is not None:
            return self.host == host.lower().rstrip(".")
        if ip is None or self.network is None:
            return False
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        return ip in self.network or (mapped is not None and mapped in self.network)


def _port(text: str, entry: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{entry!r}: the port must be a number from 1 to 65535")
    return int(text)


@lru_cache(maxsize=32)
def parse_allow(entries: tuple[str, ...]) -> tuple[AllowEntry, ...]:
    """Allow-list entries (ValueError naming a bad one)."""
    parsed = []
    for raw in entries:
        entry = str(raw).strip()
        if not entry:
            continue
        port = None
        body = entry
        if entry.startswith("["):  # [v6] or [v6]:port
            inside, _, rest = entry[1:].partition("]")
            body = inside
            if rest:
                if not rest.startswith(":"):
                    raise ValueError(f"{entry!r}: expected [address]:port")
                port = _port(rest[1:], entry)
        elif entry.count(":") == 1:  # host:port or v4:port (a v6 address has several colons)
            body, port_text = entry.split(":")
            port = _port(port_text, entry)
        try:
            parsed.append(AllowEntry(network=ipaddress.ip_network(body, strict=False), port=port))
            continue
        except ValueError:
            pass
        host = body.lower().rstrip(".")
        if "/" in host or not HOST_RE.match(host):
            raise ValueError(f"{entry!r} is neither a host name, an address nor a CIDR (with an optional :port)")
        parsed.append(AllowEntry(host=host, port=port))
    return tuple(parsed)


def internal(ip: IPAddress) -> bool:
    """Not an address of the public internet (loopback, private, link-local, shared, reserved, multicast…)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast or ip.is_unspecified or ip == METADATA_ADDRESS


def allowed(host: str, ip: IPAddress | None, port: int | None, allow) -> bool:
    return any(entry.covers(host, ip, port) for entry in parse_allow(tuple(allow or ())))


def literal_address(host: str) -> IPAddress | None:
    """The address a host written as one stands for, in every form a resolver accepts (``127.1``, ``0x7f.1``)."""
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        pass
    if re.fullmatch(r"[0-9a-fA-FxX.]+", host) and any(c.isdigit() for c in host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _refused(host: str, ip: IPAddress, setting: str, *, resolved: bool) -> str:
    what = f"host {host} resolves to {ip}," if resolved else f"host {host} is"
    return f"{what} a private/loopback/link-local address; refused (allow it in {setting})"


def url_refusal(url: str, *, allow, setting: str) -> str | None:
    """Why ``url`` may not be used (None when it may), without DNS: the scheme, literal addresses, local
    and metadata names. :func:`resolve_checked` decides again when connecting."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        return f"is not a valid URL ({error})"
    if parts.scheme not in ("http", "https"):
        return "must start with http:// or https://"
    host = (parts.hostname or "").rstrip(".")
    if not host:
        return "has no host"
    port = port or (443 if parts.scheme == "https" else 80)
    if host in METADATA_HOSTS:
        return f"host {host} is a cloud metadata service; refused"
    ip = literal_address(host)
    if ip is None and (host in LOCAL_NAMES or host.endswith(".localhost")):
        # Allowed by its name, or by the loopback address it stands for (the connect check resolves it).
        if any(allowed(host, loopback, port, allow) for loopback in LOOPBACK):
            return None
        return _refused(host, LOOPBACK[0], setting, resolved=True)
    if ip is not None and internal(ip) and not allowed(host, ip, port, allow):
        return _refused(host, ip, setting, resolved=False)
    return None


async def resolve_checked(host: str, port: int, *, allow, setting: str) -> str:
    """Resolve ``host`` and return an address the policy accepts, to connect to (BlockedAddress if any
    address it resolves to is refused: a client might have picked that one)."""
    name = (host or "").strip("[]").rstrip(".")
    if not name:
        raise BlockedAddress("the URL has no host")
    if name.lower() in METADATA_HOSTS:
        raise BlockedAddress(f"host {name} is a cloud metadata service and is refused")
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise BlockedAddress(f"cannot resolve host {name}: {exc.strerror or exc}") from None
    addresses = list(dict.fromkeys(info[4][0] for info in infos))[:MAX_ADDRESSES]
    if not addresses:
        raise BlockedAddress(f"cannot resolve host {name}: no address")
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if internal(ip) and not allowed(name, ip, port, allow):
            raise BlockedAddress(_refused(name, ip, setting, resolved=True))
    return addresses[0]


def guarded_transport(httpx_module: Any, *, allow, setting: str, **transport_options) -> Any:
    """An ``httpx`` (or ``httpx2``) async transport that checks every request's host when it connects, and
    connects to the address it checked. Redirects and retries come through here too. Its TLS context is the
    process's shared one (mas_core.tls) unless ``verify`` says otherwise."""
    from mas_core.tls import tls

    inner = httpx_module.AsyncHTTPTransport(**{"verify": tls(), **transport_options})

    class GuardedTransport(httpx_module.AsyncBaseTransport):
        async def handle_async_request(self, request):
            url = request.url
            host = url.host
            port = url.port or (443 if url.scheme == "https" else 80)
            address = await resolve_checked(host, port, allow=allow, setting=setting)
            if literal_address(host) is None:
                # A request of its own to the address: the caller's (which its response names, and redirects
                # and origin checks read) keeps the name. The Host header keeps it too, and TLS checks it.
                request = httpx_module.Request(request.method, url.copy_with(host=address), headers=request.headers,
                                               stream=request.stream,
                                               extensions={**request.extensions, "sni_hostname": host})
            return await inner.handle_async_request(request)

        async def aclose(self) -> None:
            await inner.aclose()

    return GuardedTransport()


def blocked_cause(error: BaseException | None) -> BlockedAddress | None:
    """The BlockedAddress an SDK wrapped (as cause or context, or in an exception group), if any."""
    seen = 0
    stack = [error]
    while stack and seen < 50:
        current = stack.pop()
        seen += 1
        if current is None:
            continue
        if isinstance(current, BlockedAddress):
            return current
        stack.extend([current.__cause__, current.__context__, *getattr(current, "exceptions", ())])
    return None


# -- URLs a model or a team's service reaches (web_fetch, webhooks, remote agents): MAS_WEB_FETCH_ALLOW ---------

WEB_URL_SETTING = "MAS_WEB_FETCH_ALLOW"


def web_url_allow() -> tuple[str, ...]:
    from django.conf import settings

    return tuple(getattr(settings, WEB_URL_SETTING, ()) or ())


def web_url_refusal(url: str) -> str | None:
    """:func:`url_refusal` for a URL under web_fetch's policy (MAS_WEB_FETCH_ALLOW)."""
    return url_refusal(url, allow=web_url_allow(), setting=WEB_URL_SETTING)


def web_url_transport(httpx_module: Any, **transport_options) -> Any:
    """:func:`guarded_transport` with MAS_WEB_FETCH_ALLOW as it is now."""
    return guarded_transport(httpx_module, allow=web_url_allow(), setting=WEB_URL_SETTING, **transport_options)


# -- MCP server URLs and provider base_urls: the operator's MAS_PRIVATE_URL_ALLOW ---------------------------

PRIVATE_URL_SETTING = "MAS_PRIVATE_URL_ALLOW"


def private_url_allow() -> tuple[str, ...]:
    from django.conf import settings

    return tuple(getattr(settings, PRIVATE_URL_SETTING, ()) or ())


def private_url_refusal(url: str) -> str | None:
    """:func:`url_refusal` for an MCP server's url or a provider's base_url."""
    return url_refusal(url, allow=private_url_allow(), setting=PRIVATE_URL_SETTING)


async def private_url_check(url: str) -> None:
    """Resolve the host of an MCP server's url or a provider's base_url and check it (BlockedAddress)."""
    refusal = private_url_refusal(url)
    if refusal:
        raise BlockedAddress(refusal)
    parts = urlsplit(url)
    await resolve_checked(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80),
                          allow=private_url_allow(), setting=PRIVATE_URL_SETTING)


def private_url_transport(httpx_module: Any, **transport_options) -> Any:
    """:func:`guarded_transport` with MAS_PRIVATE_URL_ALLOW (read when each request connects)."""
    return guarded_transport(httpx_module, allow=_LiveAllow(), setting=PRIVATE_URL_SETTING, **transport_options)


class _LiveAllow:
    """The setting as it is now, not as it was when a long-lived SDK client was built."""

    def __iter__(self):
        return iter(private_url_allow())
