"""The live monitor in a real browser: Debian's Chromium driven by Playwright, against daphne.

Runs are started through the API (scripted provider, a real Celery worker);
the browser signs in, opens a run while it is still working and watches its
events, agent tree (spawn, delegate and signal edges) and final status arrive
over the websocket, across a server restart; an operator watches the run
list update live and cancels a run with the page's button; a workflow run's
DAG colours its steps as their events are committed. Screenshots are saved
in ``var/artifacts/``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from agents_app.kinds import AGENT
from mas_core.definitions.services import definition_parse, definition_save
from tests.runs import wait_until

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
        # Importing the project can take daphne 30 s and more on a busy shared machine.
        deadline = time.monotonic() + 180
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


SCOUT = "---\nname: Scout\n---\n\nYou scout and report.\n"
SCRIPT = {
    "lead": [
        {"latency_ms": 1500, "tool_calls": [
            {"name": "vfs_write", "arguments": {"path": "notes.md", "content": "plan"}},
            {"name": "delegate", "arguments": {"agent": "helper", "task": "Check the plan"}},
            {"name": "spawn_agent", "arguments": {"filename": "scout.md", "content": SCOUT,
                                                  "task": "Scout the route", "wait": False}}]},
        # Resumed with the helper's outcome (the scout works on without being waited for).
        {"latency_ms": 300, "text": "Plan written and handed over.", "expect": "The plan holds."},
        # Woken again when the scout ends: its outcome arrives as a signal.
        {"latency_ms": 300, "text": "Noted: the route is clear.", "expect": "the route is clear"},
    ],
    "helper": [{"latency_ms": 1200, "text": "The plan holds."}],
    "scout": [{"latency_ms": 3500, "text": "Route scouted: the route is clear."}],
}


def start_run(server: str, token: str, script: dict = SCRIPT) -> str:
    """POST /api/runs over HTTP, to the same server the browser uses."""
    request = urllib.request.Request(
        f"{server}/api/runs", method="POST",
        data=json.dumps({"agent": "lead", "input": "Plan the trip", "script": script}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
        return json.load(response)["id"]


def sign_in(page, server: str, username: str, path: str) -> None:
    page.goto(f"{server}{path}")
    assert page.url.startswith(f"{server}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", "pw-for-tests-1")
    page.click("button[type=submit]")
    page.wait_for_url(f"{server}{path}")


def in_thread(function, *args, **kwargs):
    """Run ORM work that pushes to the channel layer off Playwright's thread (it has a running loop)."""
    outcome: dict = {}

    def target():
        try:
            outcome["value"] = function(*args, **kwargs)
        except BaseException as error:  # re-raised in the test's thread
            outcome["error"] = error
        finally:
            from django.db import connection

            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(30)
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def define_agents(team, *names) -> None:
    for name in names:
        definition_save(kind=AGENT, team=team, parsed=definition_parse(
            kind=AGENT, team=team, text=f"---\nname: {name}\n---\n\nYou work.\n"))


def test_a_member_watches_a_run_happen_live(team_a, make_member, make_token, celery_worker_process, asgi_server,
                                            chromium):
    define_agents(team_a, "Lead", "Helper")
    olga = make_member(team_a, role="operator", username="olga")
    server = asgi_server.url
    run_id = start_run(server, make_token(team_a, olga))

    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    try:
        sign_in(page, server, "olga", f"/runs/{run_id}/")
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
        assert {"session_start", "llm_request", "tool_call", "file_change", "delegate", "spawn", "signal",
                "session_end"} <= set(types)
        seqs = page.eval_on_selector_all("#events tr", "rows => rows.map(r => Number(r.dataset.seq))")
        assert seqs == list(range(1, len(seqs) + 1))  # nothing lost or repeated across the reconnect
        from agents_app.models import Event

        assert seqs[-1] == Event.objects.filter(run_id=run_id).count()
        nodes = page.eval_on_selector_all(
            "#tree g.node", "gs => gs.map(g => [g.dataset.agent, g.dataset.kind, g.dataset.status])")
        assert sorted(nodes) == [["helper", "delegate", "done"], ["lead", "root", "done"],
                                 ["lead", "signal", "done"], ["scout", "spawn", "done"]]
        agents = dict(page.eval_on_selector_all(
            "#tree g.node", "gs => gs.map(g => [g.dataset.activation, g.dataset.agent])"))
        edges = page.eval_on_selector_all(
            "#tree path.edge", "ps => ps.map(p => [p.classList[1], p.dataset.from, p.dataset.to])")
        # The signal is drawn from the scout that sent it to the lead it woke.
        assert sorted((kind, agents[a], agents[b]) for kind, a, b in edges) == [
            ("delegate", "lead", "helper"), ("signal", "scout", "lead"), ("spawn", "lead", "scout")]
        assert page.text_content("#result") == "Noted: the route is clear."
        streams = page.eval_on_selector_all(
            "#streams .stream", "ds => ds.map(d => [d.querySelector('b').textContent, d.lastChild.textContent])")
        assert sorted(streams) == [["helper", "The plan holds."], ["lead", "Noted: the route is clear."],
                                   ["lead", "Plan written and handed over."],
                                   ["scout", "Route scouted: the route is clear."]]
        # The filter hides every other type.
        page.select_option("#f-type", "tool_call")
        visible = page.eval_on_selector_all("#events tr:not([hidden])", "rows => rows.map(r => r.dataset.type)")
        assert visible == ["tool_call"] * 3
        page.select_option("#f-type", "")
        page.select_option("#f-agent", "scout")
        visible = page.eval_on_selector_all("#events tr:not([hidden])", "rows => [...new Set(rows.map(r => r.dataset.agent))]")
        assert visible == ["scout"]
        page.select_option("#f-agent", "")
        # A payload opens on click, pretty-printed.
        page.click("#events tr[data-type=signal] summary")
        assert json.loads(page.text_content("#events tr[data-type=signal] pre"))["message"] == "spawn ended: ok"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "monitor-run.png"), full_page=True)
    finally:
        page.close()
    assert (ARTIFACTS / "monitor-run.png").stat().st_size > 10_000


def test_an_operator_sees_the_run_list_change_live_and_cancels_a_run(team_a, team_b, make_member, make_token,
                                                                     celery_worker_process, asgi_server, chromium):
    from mas_core.events import event_emit
    from agents_app.models import Event, Run, Session

    define_agents(team_a, "Lead")
    otto = make_member(team_a, role="operator", username="otto")
    server = asgi_server.url
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    try:
        runs_page = context.new_page()
        sign_in(runs_page, server, "otto", "/runs/")
        runs_page.wait_for_selector("#live:not(.off)", timeout=10_000)
        assert runs_page.is_visible("#start-run")
        # Another team's run never shows; ours appears without a reload, then starts.
        theirs = Run.objects.create(team=team_b, agent="lead", input="not yours")
        in_thread(event_emit, run_id=theirs.id, type="run_start")  # heard by team_b's list only
        run_id = start_run(server, make_token(team_a, otto), script={"lead": [{"latency_ms": 60_000, "text": "late"}]})
        row = f'#runs tr[data-run="{run_id}"]'
        runs_page.wait_for_selector(f"{row} .status.running", timeout=15_000)
        assert runs_page.query_selector(f'#runs tr[data-run="{theirs.id}"]') is None

        run_page = context.new_page()
        run_page.goto(f"{server}/runs/{run_id}/")
        run_page.wait_for_selector("#tree g.node[data-agent=lead][data-status=running]", timeout=15_000)
        run_page.once("dialog", lambda dialog: dialog.accept())  # "Cancel this run? …"
        run_page.click("#cancel-form button")
        run_page.wait_for_load_state()
        run_page.wait_for_selector("#status.cancelled", timeout=10_000)
        # The worker stops the session; the page hears it end, and the list hears the run's new status.
        run_page.wait_for_selector("#tree g.node[data-agent=lead][data-status=cancelled]", timeout=15_000)
        assert run_page.query_selector("#cancel-form") is None
        runs_page.wait_for_selector(f"{row} .status.cancelled", timeout=10_000)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        runs_page.screenshot(path=str(ARTIFACTS / "monitor-runs.png"), full_page=True)
    finally:
        context.close()
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.error, run.result) == ("cancelled", "cancelled by otto", "")
    # The session's own row is written as it stops, a moment after the events the page heard.
    wait_until(lambda: list(Session.objects.filter(run=run).values_list("status", flat=True)) == ["cancelled"], 15,
               "the session row to say cancelled")
    assert not Event.objects.filter(run=run, type="llm_response").exists()  # the 60 s answer never came
    assert Run.objects.get(pk=theirs.pk).status == "queued"
    # Never executed: settled here, since the teardown's run_cancel would push from Playwright's loop thread.
    Run.objects.filter(pk=theirs.pk).update(status="failed")


WORKFLOW = """---
name: Research chain
steps:
  - id: research
    agent: lead
  - id: review
    agent: lead
    depends_on: [research]
  - id: summary
    agent: lead
    depends_on: [research, review]
---
"""


def test_a_workflow_runs_dag_colours_its_steps_as_their_events_commit(team_a, make_member, asgi_server, chromium):
    from workflows_app.kinds import WORKFLOW as WORKFLOW_KIND
    from mas_core.events import event_emit
    from agents_app.models import Run

    define_agents(team_a, "Lead")
    definition_save(kind=WORKFLOW_KIND, team=team_a,
                    parsed=definition_parse(kind=WORKFLOW_KIND, team=team_a, text=WORKFLOW))
    make_member(team_a, role="viewer", username="vic")
    run = Run.objects.create(team=team_a, workflow="research-chain", input="tides", status="running")

    def emit(*events):
        from django.db import transaction

        with transaction.atomic():
            for type_, step in events:
                event_emit(run_id=run.id, type=type_, agent="lead", data={"step": step} if step else {})

    page = chromium.new_page(viewport={"width": 1200, "height": 900})
    try:
        sign_in(page, asgi_server.url, "vic", f"/runs/{run.id}/")
        page.wait_for_selector("#live:not(.off)", timeout=10_000)
        assert page.query_selector("#cancel-form") is None  # a viewer cannot cancel
        states = "gs => gs.map(g => [g.dataset.step, g.dataset.status])"
        assert page.eval_on_selector_all("#dag g.node", states) == [
            ["research", "pending"], ["review", "pending"], ["summary", "pending"]]
        edges = page.eval_on_selector_all("#dag path.edge", "ps => ps.map(p => [p.dataset.from, p.dataset.to])")
        assert sorted(edges) == [["research", "review"], ["research", "summary"], ["review", "summary"]]
        in_thread(emit, ("workflow_start", None), ("step_start", "research"))
        page.wait_for_selector("#dag g.node[data-step=research][data-status=running]", timeout=10_000)
        in_thread(emit, ("step_complete", "research"), ("step_start", "review"))
        in_thread(emit, ("step_failed", "review"), ("step_skipped", "summary"))
        page.wait_for_selector("#dag g.node[data-step=summary][data-status=skipped]", timeout=10_000)
        assert page.eval_on_selector_all("#dag g.node", states) == [
            ["research", "succeeded"], ["review", "failed"], ["summary", "skipped"]]
        assert page.eval_on_selector_all("#events tr", "rows => rows.map(r => Number(r.dataset.seq))") == list(
            range(1, 7))
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "monitor-workflow.png"), full_page=True)
    finally:
        page.close()


LOOPING = """---
name: Draft and review
steps:
  - id: draft
    agent: lead
    outputs: [text]
  - id: review
    agent: lead
    depends_on: [draft]
    outputs: [verdict]
  - id: publish
    agent: lead
    depends_on: [review]
loops:
  - steps: [draft, review]
    until: review.verdict == "approve"
    max_rounds: 3
---
"""


def test_a_looping_workflows_dag_shows_each_steps_round_as_it_goes(team_a, make_member, asgi_server, chromium):
    from workflows_app.kinds import WORKFLOW as WORKFLOW_KIND
    from mas_core.events import event_emit
    from agents_app.models import Run

    define_agents(team_a, "Lead")
    definition_save(kind=WORKFLOW_KIND, team=team_a,
                    parsed=definition_parse(kind=WORKFLOW_KIND, team=team_a, text=LOOPING))
    make_member(team_a, role="viewer", username="vic")
    run = Run.objects.create(team=team_a, workflow="draft-and-review", input="tides", status="running")

    def emit(*events):
        from django.db import transaction

        with transaction.atomic():
            for type_, data in events:
                event_emit(run_id=run.id, type=type_, agent="lead", data=data)

    def step(kind, step_id, round_):
        return kind, {"step": step_id, "round": round_}

    labels = "gs => gs.map(g => [g.dataset.step, g.dataset.status, g.dataset.round || null, " \
             "g.querySelector('text').textContent])"
    page = chromium.new_page(viewport={"width": 1200, "height": 900})
    try:
        sign_in(page, asgi_server.url, "vic", f"/runs/{run.id}/")
        page.wait_for_selector("#live:not(.off)", timeout=10_000)
        assert page.eval_on_selector_all("#dag g.node", labels) == [
            ["draft", "pending", "1", "draft · round 1"], ["review", "pending", "1", "review · round 1"],
            ["publish", "pending", None, "publish"]]
        loop_edges = page.eval_on_selector_all("#dag path.loop-edge", "ps => ps.map(p => [p.dataset.from, "
                                                                      "p.dataset.to])")
        assert loop_edges == [["review", "draft"]]
        assert page.text_content("#dag text.loop-label") == '↻ review.verdict == "approve" · ≤ 3 rounds'
        in_thread(emit, step("step_start", "draft", 1), step("step_complete", "draft", 1),
                  step("step_start", "review", 1), step("step_complete", "review", 1),
                  ("loop_round", {"loop": 0, "round": 2, "steps": ["draft", "review"]}))
        page.wait_for_selector("#dag g.node[data-step=draft][data-round='2']", timeout=10_000)
        assert page.eval_on_selector_all("#dag g.node", labels)[:2] == [
            ["draft", "pending", "2", "draft · round 2"], ["review", "pending", "2", "review · round 2"]]
        in_thread(emit, step("step_start", "draft", 2))
        page.wait_for_selector("#dag g.node[data-step=draft][data-status=running]", timeout=10_000)
        assert page.eval_on_selector_all("#dag g.node", labels) == [
            ["draft", "running", "2", "draft · round 2"], ["review", "pending", "2", "review · round 2"],
            ["publish", "pending", None, "publish"]]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "monitor-workflow-loop.png"), full_page=True)
    finally:
        page.close()
