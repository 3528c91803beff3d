"""One TLS context for every HTTP client of a process (provider SDKs, MCP servers, web tools, webhooks).

httpx builds a context per client by default, and building one reads the CA bundle: ~20 ms here, and ~70 ms for
a process's first. A tool building a client per call held its event loop that long; a provider's or an MCP
server's first connection paid it inside its timeout. Contexts are safe to share between threads; every client
here speaks HTTP/1.1 (httpcore sets the ALPN list to that on each connect).
"""

import ssl

import certifi

TLS = ssl.create_default_context(cafile=certifi.where())
