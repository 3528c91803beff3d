"""A worker SIGKILLed in the middle of a session: another resumes it and the run finishes."""

import os

import pytest

from agents_app.kinds import AGENT
from mas_core.definitions.services import definition_parse, definition_save
from agents_app.execution.runs import run_start
from agents_app.models import Event, Session, WorkspaceFile
from tests.workers import kill_mid_run_and_resume

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

STALE_S = 3

SCRIPT = {
    "lead": [
        {"tool_calls": [{"name": "vfs_write", "arguments": {"path": "one.md", "content": "first"}}]},
        # The worker dies while this call is in flight.
        {"latency_ms": 5000, "tool_calls": [{"name": "vfs_write", "arguments": {"path": "two.md", "content": "second"}}]},
        {"text": "Both written."},
    ]
}


def test_sigkill_mid_session_resumes_without_rerunning_tools(team_a, monkeypatch):
    from mas_project.celery import app

    queue = f"crash-{os.getpid()}"
    # Tasks of this test go to a queue only its own workers listen on.
    monkeypatch.setitem(app.conf, "task_default_queue", queue)
    parsed = definition_parse(kind=AGENT, team=team_a, text="---\nname: Lead\n---\n\nYou write files.\n")
    definition_save(kind=AGENT, team=team_a, parsed=parsed)

    run = kill_mid_run_and_resume(
        "crash", queue=queue, stale_s=STALE_S,
        start=lambda: run_start(team=team_a, agent="lead", input="Write two files", script=SCRIPT),
        reached=lambda run: Event.objects.filter(run=run, type="llm_request").count() == 2,
        what="the second model call")

    assert (run.status, run.result) == ("succeeded", "Both written.")
    events = list(Event.objects.filter(run=run).order_by("seq"))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    # Each tool ran exactly once: one call, one file change per file.
    writes = [e.data["arguments"]["path"] for e in events if e.type == "tool_call"]
    assert writes == ["one.md", "two.md"]
    assert [e.data["path"] for e in events if e.type == "file_change"] == ["one.md", "two.md"]
    assert dict(WorkspaceFile.objects.filter(run=run).values_list("path", "version")) == {"one.md": 1, "two.md": 1}
    # One session, resumed from its checkpoint by the second worker.
    [session] = Session.objects.filter(run=run)
    assert (session.attempt, session.status) == (1, "ok")
    starts = [e.data["resumed"] for e in events if e.type == "session_start"]
    assert starts == [False, True]
    resume = [e.data for e in events if e.type == "retry"]
    assert len(resume) == 1 and resume[0]["what"] == "session_resume"
    assert resume[0]["reason"].startswith("worker ") and resume[0]["reason"].endswith(" died")
    assert types_without_duplicates(events)


def types_without_duplicates(events):
    """No event row is recorded twice (same type, session and payload) except the re-issued model call."""
    seen = set()
    for event in events:
        key = (event.type, event.session_id, repr(sorted(event.data.items())))
        if key in seen and event.type not in {"llm_request", "session_start"}:
            raise AssertionError(f"duplicate event {event.type} #{event.seq}")
        seen.add(key)
    return True
