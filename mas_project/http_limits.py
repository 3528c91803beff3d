"""How long a URL may be, answered in HTTP rather than by a dropped connection; and a request's body, left to the
application whole.

Two layers, one answer for a URL too long (a 414 with a JSON ``detail``):

- :class:`UrlLengthLimit`, an ASGI middleware around the whole application,
  refuses a path plus query string longer than ``MAS_MAX_URL_CHARS`` before
  Django (or a websocket consumer) sees it.
- :func:`answer_overlong_lines` covers what never reaches the application:
  daphne reads requests with Twisted's ``HTTPChannel``, a line receiver that
  buffers at most ``MAX_LENGTH`` (16 KB) per line and, past it, closes the
  connection without a word. The client of a 100,000-character query string
  saw "connection closed"; it now gets a 414 (a header line that long: a 431).

And :func:`bodies_left_to_the_application`: Twisted parses a POST's form body (URL-encoded or multipart) into
``request.args`` before daphne hands the body on, which daphne never reads: Django parses the body itself. That
parse cost every POST with a body the Content-Type's parse through ``email.message`` (some 7 % of daphne's CPU per
``POST /api/runs``), and a multipart upload a second copy of itself in memory, or a 400 from Twisted for a body
Django would have refused with its own answer.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from django.conf import settings

# Seconds an answered overlong request may go on sending before its connection is aborted.
LINGER_S = 5.0


def _json(detail: str) -> bytes:
    return json.dumps({"detail": detail}).encode()


class UrlLengthLimit:
    """ASGI middleware: 414 for a path + query string longer than ``MAS_MAX_URL_CHARS``."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive, send) -> None:
        if scope["type"] in {"http", "websocket"}:
            limit = settings.MAS_MAX_URL_CHARS
            path = scope.get("raw_path") or scope.get("path", "").encode()
            query = scope.get("query_string") or b""
            length = len(path) + (len(query) + 1 if query else 0)
            if length > limit:
                if scope["type"] == "websocket":
                    # Closing before accepting is how ASGI refuses a handshake (403).
                    await send({"type": "websocket.close", "code": 1008})
                    return
                body = _json(f"the URL is {length} characters long; the limit is {limit} (MAS_MAX_URL_CHARS)")
                await send({"type": "http.response.start", "status": 414, "headers": [
                    (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def _answer_line_too_long(channel, line: bytes) -> None:
    """``HTTPChannel.lineLengthExceeded``: answer, then drain, then close."""
    request_line = getattr(channel, "_HTTPChannel__first_line", not channel.requests)
    if request_line:
        status = b"414 URI Too Long"
        detail = (f"the request line is longer than {channel.MAX_LENGTH} bytes; URLs are limited to "
                  f"{settings.MAS_MAX_URL_CHARS} characters (MAS_MAX_URL_CHARS)")
    else:
        status = b"431 Request Header Fields Too Large"
        detail = f"a header line is longer than {channel.MAX_LENGTH} bytes"
    body = _json(detail)
    channel.transport.write(
        b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
    )
    # The client is likely still sending the rest of its line. Closing with
    # unread data would reset the connection, and a reset can discard the
    # answer before the client reads it: so read and drop the rest, send our
    # FIN, and let the client close (or abort after LINGER_S).
    channel.dataReceived = lambda data: None
    channel.setTimeout(None)
    channel.transport.loseWriteConnection()
    channel.callLater(LINGER_S, channel.transport.abortConnection)


def answer_overlong_lines() -> None:
    """Make daphne's HTTP parser answer an overlong request or header line instead of hanging up."""
    from twisted.web import http

    http.HTTPChannel.lineLengthExceeded = _answer_line_too_long


def bodies_left_to_the_application() -> None:
    """Make daphne's requests leave their bodies to the ASGI application: daphne makes its requests without
    Twisted's ``parsePOSTFormSubmission`` argument, which is given here (daphne's ``__init__`` passes it on)."""
    from daphne.http_protocol import WebRequest

    WebRequest.__init__ = functools.partialmethod(WebRequest.__init__, parsePOSTFormSubmission=False)
