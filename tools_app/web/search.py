"""Search backends for web_search, chosen by ``settings.MAS_WEB_SEARCH_BACKEND``.

Each backend turns a query into ``[{title, url, snippet}]``. The backends'
URLs come from settings (admin-controlled), so they are not SSRF-guarded.
"""

from __future__ import annotations

from typing import Any, Callable, Awaitable

import httpx
from django.conf import settings

from mas_core.tls import tls_off_loop

TIMEOUT = httpx.Timeout(15.0, connect=5.0)


class SearchError(Exception):
    """A search that could not be done; the message is shown to the model."""


def _hit(title: Any, url: Any, snippet: Any) -> dict[str, str]:
    return {"title": str(title or ""), "url": str(url or ""), "snippet": str(snippet or "")}


async def _searxng(query: str, max_results: int) -> list[dict[str, str]]:
    base = getattr(settings, "MAS_SEARXNG_URL", "")
    if not base:
        raise SearchError("web_search backend searxng needs MAS_SEARXNG_URL")
    async with httpx.AsyncClient(timeout=TIMEOUT, trust_env=False, verify=await tls_off_loop()) as client:
        response = await client.get(f"{base.rstrip('/')}/search", params={"q": query, "format": "json"})
    response.raise_for_status()
    results = response.json().get("results") or []
    return [_hit(r.get("title"), r.get("url"), r.get("content")) for r in results[:max_results]]


async def _brave(query: str, max_results: int) -> list[dict[str, str]]:
    key = getattr(settings, "MAS_BRAVE_API_KEY", "")
    if not key:
        raise SearchError("web_search backend brave needs MAS_BRAVE_API_KEY")
    url = getattr(settings, "MAS_BRAVE_URL", "") or "https://api.search.brave.com/res/v1/web/search"
    async with httpx.AsyncClient(timeout=TIMEOUT, trust_env=False, verify=await tls_off_loop()) as client:
        response = await client.get(
            url, params={"q": query, "count": max_results},
            headers={"Accept": "application/json", "X-Subscription-Token": key})
    response.raise_for_status()
    results = (response.json().get("web") or {}).get("results") or []
    return [_hit(r.get("title"), r.get("url"), r.get("description")) for r in results[:max_results]]


BACKENDS: dict[str, Callable[[str, int], Awaitable[list[dict[str, str]]]]] = {
    "searxng": _searxng,
    "brave": _brave,
}


async def web_search(*, query: str, max_results: int) -> list[dict[str, str]]:
    """Search with the configured backend; SearchError says what is missing or what failed."""
    name = (getattr(settings, "MAS_WEB_SEARCH_BACKEND", "") or "").strip().lower()
    if not name:
        raise SearchError("web_search is not configured: set MAS_WEB_SEARCH_BACKEND to one of "
                          + ", ".join(sorted(BACKENDS)))
    backend = BACKENDS.get(name)
    if backend is None:
        raise SearchError(f"web_search backend {name!r} is unknown; use one of {', '.join(sorted(BACKENDS))}")
    try:
        return await backend(query, max_results)
    except httpx.TimeoutException:
        raise SearchError(f"web_search error: the {name} backend timed out") from None
    except httpx.HTTPStatusError as exc:
        raise SearchError(f"web_search error: the {name} backend answered HTTP {exc.response.status_code}") from None
    except (httpx.HTTPError, ValueError) as exc:
        raise SearchError(f"web_search error: the {name} backend failed: {type(exc).__name__}") from None
