"""The quickstart stack has no beat: a worker SIGKILLed mid-run and restarted at once still finishes the run.

The new worker starts before the dead session looks stale, so its start-up
sweep leaves it alone; only the periodic sweep every worker runs (no beat
process anywhere) can resume it. The run completes, each tool call ran once,
and the events stay gap-free.
"""

import os
import signal
import socket
from collections import Counter

import pytest
from django.utils import timezone

from agents_app.kinds import AGENT
from mas_core.definitions.services import definition_parse, definition_save
from agents_app.execution.runs import run_start
from agents_app.models import Event, Run, Session, WorkspaceFile
from tests.runs import wait_until
from tests.workers import start_worker, stop_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

# Long enough that the replacement worker boots before the dead session is stale even on a busy machine
# (a worker took 14.5 s to start at load average 8; it heartbeats every
# STALE_S / 3 s), short enough for a quick test; the replacement sweeps every second.
STALE_S = 30
ENV = {"MAS_SESSION_STALE_S": str(STALE_S), "MAS_REAP_INTERVAL_S": "1"}
STEPS = 10

SCRIPT = {
    "lead": [
        {"latency_ms": 600, "tool_calls": [{"name": "vfs_write", "arguments": {"path": f"step-{n:02}.md",
                                                                               "content": f"step {n}"}}]}
        for n in range(1, STEPS + 1)
    ] + [{"text": "Ten files written."}]
}


def test_a_killed_worker_replaced_at_once_is_recovered_without_beat(team_a, monkeypatch):
    from mas_project.celery import app

    queue = f"no-beat-{os.getpid()}"
    monkeypatch.setitem(app.conf, "task_default_queue", queue)
    parsed = definition_parse(kind=AGENT, team=team_a, text="---\nname: Lead\n---\n\nYou write files.\n")
    definition_save(kind=AGENT, team=team_a, parsed=parsed)

    first = start_worker(f"no-beat-a-{os.getpid()}", queue=queue, env=ENV)
    try:
        run = run_start(team=team_a, agent="lead", input="Write ten files", script=SCRIPT)
        wait_until(lambda: Event.objects.filter(run=run, type="tool_result").count() >= 4, 60, "four steps done")
        os.killpg(first.process.pid, signal.SIGKILL)
        first.process.wait(10)
    finally:
        stop_worker(first)
    done_at_kill = Event.objects.filter(run=run, type="tool_result").count()
    assert 4 <= done_at_kill < STEPS

    second = start_worker(f"no-beat-b-{os.getpid()}", queue=queue, env=ENV)
    try:
        [session] = Session.objects.filter(run=run)
        # The scenario of the issue: the new worker is up before the dead session is stale, so its
        # start-up sweep (already done) could not resume it for its silence. (The dead worker's own beat, stopped
        # MAS_WORKER_DEAD_S ago by then on a loaded machine, may have handed its sessions back already: the
        # session's heartbeat is then cleared until the new worker resumes it.)
        silent_s = None if session.heartbeat_at is None else (timezone.now() - session.heartbeat_at).total_seconds()
        assert silent_s is None or silent_s < STALE_S - 2, (
            f"the worker took too long to start ({silent_s:.0f} s since the heartbeat)")
        assert Run.objects.get(pk=run.pk).status == "running"
        run = wait_until(lambda: Run.objects.filter(pk=run.pk, status__in=["succeeded", "failed"]).first(),
                         STALE_S + 40, "the run to finish")
    finally:
        stop_worker(second)

    assert (run.status, run.result) == ("succeeded", "Ten files written.")
    events = list(Event.objects.filter(run=run).order_by("seq"))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    # Each tool call ran exactly once: one result per call id, one version per file.
    results = Counter(e.data["id"] for e in events if e.type == "tool_result")
    assert (len(results), set(results.values())) == (STEPS, {1})
    assert [e.data["arguments"]["path"] for e in events if e.type == "tool_call"] == [
        f"step-{n:02}.md" for n in range(1, STEPS + 1)]
    assert dict(WorkspaceFile.objects.filter(run=run).values_list("path", "version")) == {
        f"step-{n:02}.md": 1 for n in range(1, STEPS + 1)}
    # One session, resumed once from its checkpoint: the second worker saw the first stop beating (long before
    # the session's own heartbeat was stale).
    [session] = Session.objects.filter(run=run)
    assert (session.attempt, session.status) == (1, "ok")
    assert [e.data["resumed"] for e in events if e.type == "session_start"] == [False, True]
    [resume] = [e for e in events if e.type == "retry"]
    assert (resume.data["what"], resume.data["resume"]) == ("session_resume", 1)
    assert resume.data["reason"] == f"worker {socket.gethostname()}:{first.process.pid} died"
    assert sum(e.type == "tool_result" and e.seq < resume.seq for e in events) == done_at_kill
