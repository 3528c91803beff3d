"""The live monitor in a real browser: Debian's Chromium driven by Playwright, against daphne.

A run is started through the API (scripted provider, a real Celery worker);
the browser signs in, opens the run while it is still working and watches
its events, agent tree and final status arrive over the websocket. The test
saves a screenshot in ``var/artifacts/``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import json
from pathlib import Path

import pytest
from django.conf import settings

from agents_app.definitions.kinds import AGENT
from agents_app.definitions.services import definition_parse, definition_save

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(settings.VAR_DIR) / "artifacts"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """daphne serving the project (HTTP + websockets) against the test database; restartable."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(settings.VAR_DIR) / "log" / "test-daphne.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "mas_project.asgi:application"],
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "mas_project.settings_test", "DJANGO_DEBUG": "1",
                 "DJANGO_ALLOW_ASYNC_UNSAFE": "", "MAS_DATABASE_NAME": settings.DATABASES["default"]["NAME"],
                 "MAS_CELERY_QUEUE": settings.CELERY_TASK_DEFAULT_QUEUE},
            stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.process.kill()
                    raise RuntimeError(f"daphne did not start; see {self.log_path}")
                time.sleep(0.1)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


@pytest.fixture(scope="module")
def asgi_server(django_db_setup, django_db_blocker):
    server = Server()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def chromium():
    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls are
    # still synchronous (Django's documented escape hatch for this case).
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make install` installs Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield browser
        browser.close()
    os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


SCRIPT = {
    "lead": [
        {"latency_ms": 1500, "tool_calls": [
            {"name": "vfs_write", "arguments": {"path": "notes.md", "content": "plan"}},
            {"name": "delegate", "arguments": {"agent": "helper", "task": "Check the plan"}}]},
        {"latency_ms": 300, "text": "Plan written and handed over."},
    ],
    "helper": [{"latency_ms": 1200, "text": "The plan holds."}],
}


def start_run(server: str, token: str) -> str:
    """POST /api/runs over HTTP, to the same server the browser uses."""
    request = urllib.request.Request(
        f"{server}/api/runs", method="POST",
        data=json.dumps({"agent": "lead", "input": "Plan the trip", "script": SCRIPT}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
        return json.load(response)["id"]


def test_a_member_watches_a_run_happen_live(team_a, make_member, make_token, celery_worker_process, asgi_server,
                                            chromium):
    for name in ("Lead", "Helper"):
        definition_save(kind=AGENT, team=team_a, parsed=definition_parse(
            kind=AGENT, team=team_a, text=f"---\nname: {name}\n---\n\nYou work.\n"))
    olga = make_member(team_a, role="operator", username="olga")
    server = asgi_server.url
    run_id = start_run(server, make_token(team_a, olga))

    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{server}/runs/{run_id}/")
        assert page.url.startswith(f"{server}/accounts/login/")
        page.fill("input[name=username]", "olga")
        page.fill("input[name=password]", "pw-for-tests-1")
        page.click("button[type=submit]")
        page.wait_for_url(f"{server}/runs/{run_id}/")
        # Still working when the page opens: the run is seen live, not read afterwards.
        assert page.text_content("#status") in {"queued", "running"}
        page.wait_for_selector("#live:not(.off)", timeout=10_000)
        page.wait_for_selector("#events tr[data-type=llm_request]", timeout=10_000)
        # The server goes away mid-run and comes back: the page reconnects and resumes after its last event.
        asgi_server.stop()
        page.wait_for_selector("#live.off", timeout=10_000)
        asgi_server.start()
        page.wait_for_selector("#live:not(.off)", timeout=15_000)
        page.wait_for_selector("#status.succeeded", timeout=30_000)

        types = page.eval_on_selector_all("#events tr", "rows => rows.map(r => r.dataset.type)")
        assert types[0] == "run_start" and types[-1] == "run_complete"
        assert {"session_start", "llm_request", "tool_call", "file_change", "delegate", "session_end"} <= set(types)
        seqs = page.eval_on_selector_all("#events tr", "rows => rows.map(r => Number(r.dataset.seq))")
        assert seqs == list(range(1, len(seqs) + 1))  # nothing lost or repeated across the reconnect
        nodes = page.eval_on_selector_all(
            "#tree g.node", "gs => gs.map(g => [g.dataset.agent, g.dataset.status])")
        assert sorted(nodes) == [["helper", "done"], ["lead", "done"]]
        assert page.text_content("#result") == "Plan written and handed over."
        assert page.text_content("#streams") == "leadPlan written and handed over.helperThe plan holds."
        # The filter hides every other type.
        page.select_option("#f-type", "tool_call")
        visible = page.eval_on_selector_all("#events tr:not([hidden])", "rows => rows.map(r => r.dataset.type)")
        assert visible == ["tool_call", "tool_call"]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.select_option("#f-type", "")
        page.screenshot(path=str(ARTIFACTS / "monitor-run.png"), full_page=True)
    finally:
        page.close()
    assert (ARTIFACTS / "monitor-run.png").stat().st_size > 10_000
