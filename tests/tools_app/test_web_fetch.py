"""web_fetch against a real local HTTP server (a socket in a thread), and its SSRF guard."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tools_app.plugin import ToolContext
from tools_app.registry import ToolOutcome, registry_for_agent
from tools_app.workspace_memory import InMemoryWorkspace

PAGE = b"<html><head><title>T</title><script>var x=1;</script></head><body><h1>Hello</h1><p>World <b>bold</b></p></body></html>"


BIG_PAGE = b"<html><body>" + b"<div><p>tide <i>and</i> moon</p><ul><li>a</li></ul></div>" * 80_000 + b"</body></html>"
BIG_JSON = json.dumps([{"n": n, "text": "tide and moon"} for n in range(120_000)]).encode()


class Handler(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def log_message(self, *args):  # keep test output quiet
        pass

    def _send(self, status: int, ctype: str, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        Handler.hits.append(f"{self.path} host={self.headers['Host']}")
        if self.path == "/page":
            self._send(200, "text/html; charset=utf-8", PAGE)
        elif self.path == "/json":
            self._send(200, "application/json", b'{"a": [1, 2]}')
        elif self.path == "/long":
            self._send(200, "text/plain", b"x" * 500)
        elif self.path == "/hop":
            self._send(302, "text/plain", b"", {"Location": "/page"})
        elif self.path == "/to-private":
            self._send(302, "text/plain", b"", {"Location": "http://10.0.0.1/secret"})
        elif self.path == "/to-metadata":
            self._send(302, "text/plain", b"", {"Location": "http://169.254.169.254/latest/meta-data/"})
        elif self.path == "/big":
            self._send(200, "text/html", BIG_PAGE)
        elif self.path == "/big.json":
            self._send(200, "application/json", BIG_JSON)
        elif self.path == "/binary":
            self._send(200, "image/png", b"\x89PNG....")
        else:
            self._send(404, "text/plain", b"no")


@pytest.fixture
def server():
    Handler.hits = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def fetch(**arguments) -> ToolOutcome:
    ctx = ToolContext(run_id="r", agent="a", session_id="s", workspace=InMemoryWorkspace({}))
    return asyncio.run(registry_for_agent(["web_fetch"]).call("web_fetch", arguments, ctx))


@pytest.fixture
def allow_local(settings):
    settings.MAS_WEB_FETCH_ALLOW = ["127.0.0.1"]


def test_html_becomes_readable_text(server, allow_local):
    outcome = fetch(url=f"{server}/page")
    assert outcome.ok is True
    assert outcome.content == "# Hello\n\nWorld **bold**"
    assert Handler.hits == [f"/page host={server.removeprefix('http://')}"]


def test_a_fetch_builds_no_tls_context(server, allow_local, tls_contexts):
    """Its client shares the process's TLS context: building one per call held the event loop ~20 ms."""
    assert (fetch(url=f"{server}/page").content, tls_contexts) == ("# Hello\n\nWorld **bold**", [])


def test_json_passes_through_and_truncation_is_marked(server, allow_local):
    assert json.loads(fetch(url=f"{server}/json").content) == {"a": [1, 2]}
    outcome = fetch(url=f"{server}/long", max_length=100)
    assert outcome.content == "x" * 100 + "\n[truncated: content longer than 100 characters]"


def test_redirect_is_followed_and_errors_are_text(server, allow_local):
    assert fetch(url=f"{server}/hop").content == "# Hello\n\nWorld **bold**"
    assert [h.split(" ")[0] for h in Handler.hits] == ["/hop", "/page"]
    missing = fetch(url=f"{server}/nothing")
    assert (missing.ok, missing.content) == (False, f"web_fetch error: HTTP 404 from {server}/nothing")
    binary = fetch(url=f"{server}/binary")
    assert (binary.ok, binary.content) == (False, f"web_fetch error: {server}/binary returned image/png, which is not text")
    scheme = fetch(url="file:///etc/passwd")
    assert (scheme.ok, scheme.content) == (False, "web_fetch error: only http and https URLs are fetched, not 'file'")


@pytest.mark.parametrize("url, address", [
    ("http://127.0.0.1:9/", "127.0.0.1"),
    ("http://10.1.2.3/", "10.1.2.3"),
    ("http://169.254.169.254/latest/meta-data/", "169.254.169.254"),
    ("http://[::1]:9/", "::1"),
    ("http://localhost:9/", None),
])
def test_private_addresses_are_refused_without_allow_list(settings, url, address):
    settings.MAS_WEB_FETCH_ALLOW = []
    outcome = fetch(url=url)
    assert outcome.ok is False
    assert outcome.content.startswith(f"web_fetch refused {url}: host ")
    assert "private/loopback/link-local address; refused" in outcome.content
    if address:
        assert f"resolves to {address}," in outcome.content


def test_refused_without_allow_list_never_reaches_the_server(server, settings):
    settings.MAS_WEB_FETCH_ALLOW = []
    assert fetch(url=f"{server}/page").ok is False
    assert Handler.hits == []


@pytest.mark.parametrize("path, target", [
    ("/to-private", "http://10.0.0.1/secret"),
    ("/to-metadata", "http://169.254.169.254/latest/meta-data/"),
])
def test_redirect_to_private_address_is_refused(server, allow_local, path, target):
    outcome = fetch(url=f"{server}{path}")
    assert outcome.ok is False
    assert outcome.content.startswith(f"web_fetch refused {target}: host ")
    assert [h.split(" ")[0] for h in Handler.hits] == [path]


def test_allow_list_accepts_cidrs(server, settings):
    settings.MAS_WEB_FETCH_ALLOW = ["127.0.0.0/8"]
    assert fetch(url=f"{server}/page").ok is True


def test_html_is_converted_in_chunks_and_stops_once_it_has_enough():
    from tools_app.builtin.web_fetch import HTML_CHUNK_CHARS, _html_to_text

    page = "<html><body>" + "<p>tide and moon</p>" * 200_000 + "</body></html>"  # 4 MB of HTML
    text = _html_to_text(page, max_chars=1_000)
    # The conversion ends within a chunk of the limit: about 64 KB of HTML read, not the 4 MB.
    assert 1_000 < len(text) < HTML_CHUNK_CHARS
    assert text.startswith("tide and moon\n\ntide and moon")
    assert _html_to_text(PAGE.decode(), max_chars=1_000) == "# Hello\n\nWorld **bold**"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=25)
_LAYOUTS = st.sampled_from([{}, {"indent": 3}, {"separators": (",", ":")}, {"ensure_ascii": False, "indent": "\t"}])


@settings(max_examples=300)
@given(value=_JSON, layout=_LAYOUTS, cut=st.integers(0, 400))
def test_json_is_indented_as_json_dumps_would_and_cut_after_max_chars(value, layout, cut):
    from tools_app.builtin.web_fetch import _indented_json

    text = json.dumps(value, **layout)
    whole = json.dumps(value, ensure_ascii=False, indent=1)
    assert _indented_json(text, max_chars=len(whole)) == whole
    part = _indented_json(text, max_chars=cut)
    # A prefix of the whole, stopped at the first step past the limit: at most one value (a short one here) more.
    assert whole.startswith(part) and (part == whole or cut < len(part) <= cut + len(whole))


@settings(max_examples=300)
@given(value=_JSON, where=st.integers(0, 10_000), junk=st.sampled_from(["", ",", "]", "}", ":", "x", '"', "0", "[{"]))
def test_a_json_body_that_json_cannot_read_is_returned_as_is(value, where, junk):
    """Not JSON ⇔ the text as is (a cut and spliced document: read whole, as max_chars covers it)."""
    from tools_app.builtin.web_fetch import _readable

    text = json.dumps(value)
    where %= len(text) + 1
    broken = text[:where] + junk + text[where + 1:]
    twice = []  # keys given twice in one object: json.loads keeps the last, web_fetch shows both
    try:
        parsed = json.loads(broken, object_pairs_hook=lambda pairs: twice.extend(
            key for n, (key, _) in enumerate(pairs) if key in dict(pairs[:n])) or dict(pairs))
    except ValueError:
        assert _readable(broken, "application/json", 10**6) == broken
    else:
        assume(not twice)
        assert _readable(broken, "application/json", 10**6) == json.dumps(parsed, ensure_ascii=False, indent=1)


def test_json_of_megabytes_is_indented_up_to_max_chars_only():
    from tools_app.builtin.web_fetch import _indented_json

    text = BIG_JSON.decode()
    part = _indented_json(text, max_chars=1_000)
    assert part == json.dumps(json.loads(text), indent=1)[:len(part)] and 1_000 < len(part) < 1_100
    assert _indented_json(text[:-1], max_chars=10**7) is None  # the closing bracket missing: read to the end
    assert _indented_json('[1, 2] [3]', max_chars=100) is None
    assert _indented_json('{"a": 1, "a": 2}', max_chars=100) == '{\n "a": 1,\n "a": 2\n}'  # as written


@pytest.mark.alone  # it times its own process's event loop: waits for the disk or for the GIL still count
def test_big_pages_are_converted_off_the_event_loop(server, allow_local, caplog):
    """4 MB of HTML and 4 MB of JSON: converted on a thread, so the loop-lag watchdog sees no slice over 100 ms."""
    import logging

    assert len(BIG_PAGE) > 4_000_000 and len(BIG_JSON) > 4_000_000
    with caplog.at_level(logging.WARNING, logger="mas_core.looplag"):
        page = fetch(url=f"{server}/big", max_length=50_000)
        data = fetch(url=f"{server}/big.json", max_length=50_000)
    assert page.ok and page.content.startswith("tide _and_ moon\n\n  * a\n\n")
    assert page.content.endswith("\n[truncated: content longer than 50000 characters]")
    assert data.ok and data.content.startswith('[\n {\n  "n": 0,\n  "text": "tide and moon"\n },')
    assert [record.tool for record in caplog.records if record.name == "mas_core.looplag"] == []
