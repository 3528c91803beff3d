"""Who opens a websocket: the origin rule for session cookies, and the address the rate limits count.

A browser sends its cookies with a websocket opened by any page, and no
preflight or CORS check stands in the way: without an origin check, a page
from anywhere could read a signed-in user's runs. The rule is exactly the one
Django's CSRF check applies to an unsafe HTTP request, applied by Django's own
code to the handshake seen as an HTTP request: the ``Origin`` must equal the
socket's own origin — ``http`` for ``ws``, ``https`` for ``wss`` (or as
``SECURE_PROXY_SSL_HEADER`` says), and the ``Host`` header with its port, itself
one of ``ALLOWED_HOSTS`` — or be listed in ``CSRF_TRUSTED_ORIGINS`` (exactly, or
as ``https://*.example.com`` for the subdomains). ``http://localhost:3000``
does not pass for ``http://localhost:8000``, nor ``https://host`` for
``http://host``.

Bearer tokens need no origin: a page cannot give a browser's websocket an
``Authorization`` header.
"""

from __future__ import annotations

import io

from django.core.handlers.asgi import ASGIRequest
from django.middleware.csrf import CsrfViewMiddleware


def handshake_request(scope) -> ASGIRequest:
    """The websocket handshake as Django sees an HTTP GET: its headers, client and server, ws as http."""
    scheme = "https" if scope.get("scheme") == "wss" else "http"
    return ASGIRequest({**scope, "type": "http", "method": "GET", "scheme": scheme}, io.BytesIO())


def origin_allowed(scope) -> bool:
    """Whether the handshake's ``Origin`` passes Django's CSRF origin check (none sent: no)."""
    request = handshake_request(scope)
    if "HTTP_ORIGIN" not in request.META:
        return False
    # Django has no public function for this check; its CSRF middleware's own is used so that HTTP and
    # websockets can never disagree (tests/mas_project/test_ws_security.py pins the behaviour). A fresh
    # instance: the middleware caches CSRF_TRUSTED_ORIGINS.
    return CsrfViewMiddleware(lambda request: None)._origin_verified(request)


def client_address(scope) -> str:
    """The socket's client address, as ``REMOTE_ADDR`` is for HTTP (both come from the ASGI scope)."""
    client = scope.get("client")
    return (client[0] if client else "") or "unknown"
