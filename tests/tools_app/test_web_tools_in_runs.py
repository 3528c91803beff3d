"""web_search and web_fetch inside a real worker session, against local servers (the outside world)."""

import json
import os

import pytest

from agents_app.execution.runs import run_start
from tests.local_http import Quiet, serving
from tests.runs import agent, call, events, finish
from tests.workers import start_worker, stop_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

PAGE = "<html><body><h1>Tides</h1><p>The Moon pulls the <b>oceans</b>.</p><script>x()</script></body></html>"


class Web(Quiet):
    def do_GET(self):
        if self.path.startswith("/search"):
            port = self.server.server_address[1]
            body = json.dumps({"results": [{"title": "Tides explained", "url": f"http://127.0.0.1:{port}/tides",
                                            "content": "Why the sea rises"}]}).encode()
            kind = "application/json"
        else:
            body, kind = PAGE.encode(), "text/html; charset=utf-8"
        self.reply(kind, body)


def test_an_agent_searches_then_fetches_through_a_worker(team_a, monkeypatch):
    from mas_project.celery import app

    queue = f"web-{os.getpid()}"
    monkeypatch.setitem(app.conf, "task_default_queue", queue)
    with serving(Web) as base:
        # The local server stands for the internet: the worker may reach 127.0.0.1 only because it is allowed.
        worker = start_worker(queue, queue=queue, env={"MAS_WEB_FETCH_ALLOW": "127.0.0.1", "MAS_WEB_SEARCH_BACKEND":
                                                       "searxng", "MAS_SEARXNG_URL": base})
        try:
            agent(team_a, "Reader", "tools:\n- web_search\n- web_fetch\n")
            script = {"reader": [call("web_search", query="why tides"), call("web_fetch", url=f"{base}/tides"),
                                 call("web_fetch", url="http://169.254.169.254/latest/meta-data/"),
                                 {"text": "read"}]}
            run = finish(run_start(team=team_a, agent="reader", input="Tides", script=script))
        finally:
            stop_worker(worker)
    assert (run.status, run.result) == ("succeeded", "read")
    searched, fetched, refused = [(e.data["ok"], e.data["content"]) for e in events(run, "tool_result")]
    assert searched[0] is True and json.loads(searched[1]) == [
        {"title": "Tides explained", "url": f"{base}/tides", "snippet": "Why the sea rises"}]
    assert fetched[0] is True and "# Tides" in fetched[1] and "The Moon pulls the **oceans**." in fetched[1]
    assert "x()" not in fetched[1]
    assert refused[0] is False and refused[1].startswith("web_fetch refused http://169.254.169.254/")
