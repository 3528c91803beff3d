"""web_fetch: fetch a URL through the SSRF guard; HTML becomes readable text."""

from __future__ import annotations

import json
import re
from json.decoder import scanstring
from urllib.parse import urljoin, urlsplit

import html2text
import httpx
from pydantic import Field

from mas_core.patterns import off_loop
from mas_core.tls import tls_off_loop
from tools_app.plugin import Params, Tool, ToolContext, ToolError
from tools_app.web.guard import BlockedAddress, resolve_checked

MAX_BYTES = 5 * 1024 * 1024
MAX_REDIRECTS = 5
TIMEOUT = httpx.Timeout(15.0, connect=5.0)
DEFAULT_LENGTH = 20_000


HTML_CHUNK_CHARS = 64 * 1024


class _BoundedText(html2text.HTML2Text):
    """html2text that counts what it has written, so the caller can stop feeding once it has enough."""

    written = 0

    def outtextf(self, s: str) -> None:
        self.written += len(s)
        super().outtextf(s)


def _html_to_text(html: str, *, max_chars: int) -> str:
    """Readable text of ``html``, fed in chunks and stopped once ``max_chars`` of text exist (CPU-bound: run it
    off the event loop, see ``_readable``)."""
    converter = _BoundedText()
    converter.ignore_images = True
    converter.body_width = 0
    for start in range(0, len(html), HTML_CHUNK_CHARS):
        converter.feed(html[start:start + HTML_CHUNK_CHARS])
        if converter.written > max_chars:
            break
    return converter.optwrap(converter.finish()).strip()


_SPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_WORDS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")


def _indented_json(text: str, *, max_chars: int) -> str | None:
    """``json.dumps(json.loads(text), ensure_ascii=False, indent=1)``, written as the text is read and stopped
    once more than ``max_chars`` are written (so 5 MB cost what their first ``max_chars`` cost, in small steps:
    ``json.loads`` of 5 MB would hold the GIL, and so every session's event loop, ~100 ms at once). A key given
    twice is shown twice, as written. None when what was read is not JSON."""
    out: list[str] = []
    size = 0
    closers: list[str] = []  # of the arrays and objects open
    key_next = False
    pos = _SPACE.match(text).end()
    try:
        while size <= max_chars:
            piece = ""
            if key_next:  # in an object: a key and its colon before the value
                if not text.startswith('"', pos):
                    return None
                key, pos = scanstring(text, pos + 1)
                colon = _SPACE.match(text, pos).end()
                if not text.startswith(":", colon):
                    return None
                pos = _SPACE.match(text, colon + 1).end()
                piece = json.dumps(key, ensure_ascii=False) + ": "
            opener = text[pos:pos + 1]
            if opener in ("[", "{"):
                closer = "]" if opener == "[" else "}"
                inside = _SPACE.match(text, pos + 1).end()
                if not text.startswith(closer, inside):
                    closers.append(closer)
                    key_next = closer == "}"
                    pos = inside
                    piece += opener + "\n" + " " * len(closers)
                    out.append(piece)
                    size += len(piece)
                    continue
                piece += opener + closer
                pos = inside + 1
            elif opener == '"':
                value, pos = scanstring(text, pos + 1)
                piece += json.dumps(value, ensure_ascii=False)
            elif number := _NUMBER.match(text, pos):
                piece += json.dumps(json.loads(number.group()))  # as json.loads reads it: 1E2 is 100.0
                pos = number.end()
            elif word := next((word for word in _WORDS if text.startswith(word, pos)), None):
                piece += word
                pos += len(word)
            else:
                return None
            # After a value: the closers of what it ends, then a comma or the end of the text.
            pos = _SPACE.match(text, pos).end()
            while closers and text.startswith(closers[-1], pos):
                piece += "\n" + " " * (len(closers) - 1) + closers.pop()
                pos = _SPACE.match(text, pos + 1).end()
            if not closers:
                return "".join(out) + piece if pos == len(text) else None
            if not text.startswith(",", pos):
                return None
            pos = _SPACE.match(text, pos + 1).end()
            key_next = closers[-1] == "}"
            piece += ",\n" + " " * len(closers)
            out.append(piece)
            size += len(piece)
    except ValueError:  # a string or number json cannot read
        return None
    return "".join(out)


def _readable(text: str, ctype: str, max_chars: int) -> str:
    """The body as the model reads it: HTML converted, JSON indented, other text as is."""
    if ctype in ("text/html", "application/xhtml+xml"):
        return _html_to_text(text, max_chars=max_chars)
    if ctype == "application/json" or ctype.endswith("+json"):
        indented = _indented_json(text, max_chars=max_chars)
        return text if indented is None else indented
    return text


async def _get(client: httpx.AsyncClient, url: str) -> httpx.Response:
    """One request pinned to the address the guard checked (Host header and SNI keep the name)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ToolError(f"web_fetch error: only http and https URLs are fetched, not {parts.scheme or 'none'!r}")
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        address = await resolve_checked(host, port)
    except BlockedAddress as exc:
        raise ToolError(f"web_fetch refused {url}: {exc}") from None
    literal = f"[{address}]" if ":" in address else address
    netloc = f"{literal}:{parts.port}" if parts.port else literal
    pinned = parts._replace(netloc=netloc).geturl()
    host_header = parts.netloc.rsplit("@", 1)[-1]
    request = client.build_request("GET", pinned, headers={"Host": host_header},
                                   extensions={"sni_hostname": host})
    response = await client.send(request, stream=True)
    return response


class WebFetch(Tool):
    name = "web_fetch"
    description = ("Fetch a web page or file by URL and return its text (HTML converted to readable text; "
                   "JSON and plain text as is). Long content is cut at max_length characters.")

    class Parameters(Params):
        url: str = Field(min_length=1, max_length=2000)
        max_length: int = Field(default=DEFAULT_LENGTH, ge=100, le=200_000)

    async def run(self, args: Parameters, ctx: ToolContext) -> str:
        url = args.url.strip()
        try:
            async with httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False, trust_env=False,
                                         verify=await tls_off_loop()) as client:
                for _ in range(MAX_REDIRECTS + 1):
                    response = await _get(client, url)
                    try:
                        if response.is_redirect and "location" in response.headers:
                            url = urljoin(url, response.headers["location"])
                            continue  # the next hop goes through the guard again
                        body = bytearray()
                        cut = False
                        async for chunk in response.aiter_bytes():
                            body.extend(chunk)
                            if len(body) > MAX_BYTES:
                                del body[MAX_BYTES:]
                                cut = True
                                break
                    finally:
                        await response.aclose()
                    break
                else:
                    raise ToolError(f"web_fetch error: more than {MAX_REDIRECTS} redirects")
        except httpx.TimeoutException:
            raise ToolError(f"web_fetch error: {url} timed out") from None
        except httpx.HTTPError as exc:
            raise ToolError(f"web_fetch error: {type(exc).__name__}: {exc}") from None
        if response.status_code >= 400:
            raise ToolError(f"web_fetch error: HTTP {response.status_code} from {url}")
        ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
        is_json = ctype == "application/json" or ctype.endswith("+json")
        if not (is_json or ctype.startswith("text/") or ctype in ("application/xhtml+xml", "application/xml", "")):
            raise ToolError(f"web_fetch error: {url} returned {ctype}, which is not text")
        # Up to 5 MB to decode, convert or indent: CPU work, done off the event loop the worker's sessions share.
        text = await off_loop(lambda: _readable(bytes(body).decode(response.encoding or "utf-8", errors="replace"),
                                                ctype, args.max_length))
        if len(text) > args.max_length or cut:
            text = text[: args.max_length] + f"\n[truncated: content longer than {args.max_length} characters]"
        return text
