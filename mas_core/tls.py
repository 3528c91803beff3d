"""One TLS context for every HTTP client of a process (provider SDKs, MCP servers, web tools, webhooks).

httpx builds a context per client by default, and building one reads the CA bundle (~45 ms here). A tool building
a client per call held its event loop that long; a provider's or an MCP server's first connection paid it inside
its timeout. Built at its first use, not when a process starts (~50 ms in every Django process, most never making
an HTTP request). Contexts are safe to share between threads; every client here speaks HTTP/1.1 (httpcore sets the
ALPN list to that on each connect).
"""

import functools
import ssl


@functools.cache
def tls() -> ssl.SSLContext:
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


async def tls_off_loop() -> ssl.SSLContext:
    """:func:`tls` for code on an event loop: its first build reads the CA bundle (~45 ms, several times that on a
    loaded machine or a cold disk), so that one is made on a thread, not on the loop the worker's sessions share."""
    if tls.cache_info().currsize:
        return tls()
    import asyncio

    return await asyncio.to_thread(tls)
