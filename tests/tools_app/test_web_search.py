"""web_search against local servers speaking SearXNG's and Brave's JSON wire formats."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from urllib.parse import parse_qs, urlsplit

import pytest

from tools_app.plugin import ToolContext
from tools_app.registry import ToolOutcome, registry_for_agent
from tools_app.workspace_memory import InMemoryWorkspace


class Handler(http.server.BaseHTTPRequestHandler):
    requests: list[tuple[str, dict, str | None]] = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        Handler.requests.append((parts.path, query, self.headers.get("X-Subscription-Token")))
        if parts.path == "/search":  # SearXNG
            body = {"query": query["q"][0], "results": [
                {"title": f"S{i}", "url": f"https://s/{i}", "content": f"snip {i}", "engine": "x"} for i in range(4)]}
        elif parts.path == "/res/v1/web/search" and self.headers.get("X-Subscription-Token") == "k-123":  # Brave
            body = {"type": "search", "web": {"results": [
                {"title": f"B{i}", "url": f"https://b/{i}", "description": f"desc {i}"} for i in range(int(query["count"][0]))]}}
        else:
            self.send_response(401)
            self.end_headers()
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server():
    Handler.requests = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def search(**arguments) -> ToolOutcome:
    ctx = ToolContext(run_id="r", agent="a", session_id="s", workspace=InMemoryWorkspace({}))
    return asyncio.run(registry_for_agent(["web_search"]).call("web_search", arguments, ctx))


def test_searxng_backend(server, settings):
    settings.MAS_WEB_SEARCH_BACKEND = "searxng"
    settings.MAS_SEARXNG_URL = server
    outcome = search(query="hello world", max_results=2)
    assert outcome.ok is True
    assert outcome.data == [
        {"title": "S0", "url": "https://s/0", "snippet": "snip 0"},
        {"title": "S1", "url": "https://s/1", "snippet": "snip 1"},
    ]
    assert Handler.requests == [("/search", {"q": ["hello world"], "format": ["json"]}, None)]


def test_a_search_builds_no_tls_context(server, settings, tls_contexts):
    settings.MAS_WEB_SEARCH_BACKEND, settings.MAS_SEARXNG_URL = "searxng", server
    assert (search(query="tides", max_results=1).ok, tls_contexts) == (True, [])


def test_brave_backend_sends_the_key(server, settings):
    settings.MAS_WEB_SEARCH_BACKEND = "brave"
    settings.MAS_BRAVE_API_KEY = "k-123"
    settings.MAS_BRAVE_URL = f"{server}/res/v1/web/search"
    outcome = search(query="q", max_results=3)
    assert outcome.data == [{"title": f"B{i}", "url": f"https://b/{i}", "snippet": f"desc {i}"} for i in range(3)]
    assert Handler.requests == [("/res/v1/web/search", {"q": ["q"], "count": ["3"]}, "k-123")]


def test_backend_error_is_text_and_key_is_not_shown(server, settings):
    settings.MAS_WEB_SEARCH_BACKEND = "brave"
    settings.MAS_BRAVE_API_KEY = "wrong-key"
    settings.MAS_BRAVE_URL = f"{server}/res/v1/web/search"
    outcome = search(query="q")
    assert (outcome.ok, outcome.content) == (False, "web_search error: the brave backend answered HTTP 401")
    assert "wrong-key" not in outcome.content


def test_not_configured_is_a_clear_error(settings):
    settings.MAS_WEB_SEARCH_BACKEND = ""
    outcome = search(query="q")
    assert (outcome.ok, outcome.content) == (
        False, "web_search is not configured: set MAS_WEB_SEARCH_BACKEND to one of brave, searxng")
    settings.MAS_WEB_SEARCH_BACKEND = "searxng"
    settings.MAS_SEARXNG_URL = ""
    assert search(query="q").content == "web_search backend searxng needs MAS_SEARXNG_URL"
    settings.MAS_WEB_SEARCH_BACKEND = "bing"
    assert search(query="q").content == "web_search backend 'bing' is unknown; use one of brave, searxng"
