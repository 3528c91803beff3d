"""A worker SIGKILLed while an orchestrator waits for the two agents it delegated to, mid-work.

The parent holds no worker while it waits, so nothing of it is lost; the children resume from their
checkpoints on another worker; the parent resumes with both outcomes; no tool call runs twice.
"""

import json
import os

import pytest

from agents_app.execution.runs import run_start
from agents_app.models import Event, Session, WorkspaceFile
from tests.agents_app.test_delegation import ORCHESTRATION
from tests.runs import agent
from tests.workers import kill_mid_run_and_resume

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

STALE_S = 3

SCRIPT = {
    **ORCHESTRATION,
    # Both children have written a file and wait for their model when the worker dies.
    "researcher": [
        {"tool_calls": [{"name": "vfs_write", "arguments": {"path": "research.md", "content": "gravity"}}]},
        {"latency_ms": 5000, "text": "The moon's gravity pulls the oceans."}],
    "writer": [
        {"tool_calls": [{"name": "vfs_write", "arguments": {"path": "intro.md", "content": "Tides rise."}}]},
        {"latency_ms": 5000, "text": "Intro drafted in intro.md"}],
}


def test_sigkill_while_the_parent_waits_loses_nothing_and_runs_each_child_once(team_a, monkeypatch):
    from mas_project.celery import app

    queue = f"deleg-crash-{os.getpid()}"
    monkeypatch.setitem(app.conf, "task_default_queue", queue)
    for name in ("Orchestrator", "Researcher", "Writer"):
        agent(team_a, name)

    def children_in_second_call(run):
        if Event.objects.filter(run=run, type="llm_request", agent__in=["researcher", "writer"]).count() < 4:
            return False
        assert Session.objects.get(run=run, agent="orchestrator").status == "suspended"
        return True

    run = kill_mid_run_and_resume(
        "deleg-crash", queue=queue, stale_s=STALE_S,
        start=lambda: run_start(team=team_a, agent="orchestrator", input="Explain tides", script=SCRIPT),
        reached=children_in_second_call, what="both children in their second model call")

    assert (run.status, run.result) == ("succeeded", "Synthesis written to synthesis.md.")
    events = list(Event.objects.filter(run=run).order_by("seq"))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    # One session each: the children resumed from their checkpoints, the orchestrator from its suspension.
    sessions = {s.agent: (s.attempt, s.status) for s in Session.objects.filter(run=run)}
    assert sessions == {"orchestrator": (1, "ok"), "researcher": (1, "ok"), "writer": (1, "ok")}
    for child in ("researcher", "writer"):
        assert [e.data["resumed"] for e in events if e.type == "session_start" and e.agent == child] == [False, True]
    assert [e.data["resumed"] for e in events if e.type == "session_start" and e.agent == "orchestrator"] == [
        False, True]
    # Each child was started once and each tool ran once.
    assert sorted(e.data["to"] for e in events if e.type == "delegate") == ["researcher", "writer"]
    assert sorted(e.data["path"] for e in events if e.type == "file_change") == [
        "intro.md", "research.md", "synthesis.md"]
    assert dict(WorkspaceFile.objects.filter(run=run).values_list("path", "version")) == {
        "intro.md": 1, "research.md": 1, "synthesis.md": 1}
    results = [json.loads(e.data["content"])["result"] for e in events
               if e.type == "tool_result" and e.agent == "orchestrator" and e.data["name"] == "delegate"]
    assert results == ["The moon's gravity pulls the oceans.", "Intro drafted in intro.md"]
