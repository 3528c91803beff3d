"""web_fetch's SSRF guard: the shared address policy (mas_core.netpolicy) with web_fetch's allow-list.

``settings.MAS_WEB_FETCH_ALLOW`` lists hosts, addresses or CIDRs (optionally
``:port``) that web_fetch may reach although they are loopback/private/
link-local. It is not MAS_PRIVATE_URL_ALLOW: a model chooses web_fetch's URLs,
so a local model server allowed for providers is not thereby open to agents.
"""

from __future__ import annotations


from mas_core import netpolicy
from mas_core.netpolicy import BlockedAddress

__all__ = ["BlockedAddress", "resolve_checked"]


async def resolve_checked(host: str, port: int) -> str:
    """Resolve ``host`` and return one address the guard accepts (to pin the connection to)."""
    return await netpolicy.resolve_checked(host, port, allow=netpolicy.web_url_allow(),
                                           setting=netpolicy.WEB_URL_SETTING)
