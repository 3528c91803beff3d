"""A worker SIGKILLed in the middle of a workflow with parallel steps.

The workflow completes on another worker; finished steps are not run again, no tool call runs twice, and
the run's events stay contiguous.
"""

import os

import pytest

from agents_app.kinds import AGENT

from workflows_app.kinds import WORKFLOW
from mas_core.definitions.services import definition_parse, definition_save
from agents_app.models import Event, Session, WorkspaceFile
from tests.workers import kill_mid_run_and_resume
from workflows_app.services import workflow_run_start, workflow_steps

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

STALE_S = 3

FLOW = """---
name: Crashy
inputs: [topic]
steps:
- id: first
  agent: first
  prompt: "Start {topic}"
  outputs: [notes]
- id: left
  agent: left
  depends_on: [first]
  prompt: "Left of {first.notes}"
  outputs: [text]
- id: right
  agent: right
  depends_on: [first]
  prompt: "Right of {first.notes}"
  outputs: [text]
- id: last
  agent: last
  depends_on: [left, right]
  prompt: "Join {left.text} and {right.text}"
  outputs: [text]
---
"""

SCRIPT = {
    "first": [{"tool_calls": [{"name": "vfs_write", "arguments": {"path": "first.md", "content": "one"}}]},
              {"text": "first notes"}],
    # Both parallel steps have written their file and wait for the model when the worker dies.
    "left": [{"tool_calls": [{"name": "vfs_write", "arguments": {"path": "left.md", "content": "L"}}]},
             {"latency_ms": 5000, "text": "left done"}],
    "right": [{"tool_calls": [{"name": "vfs_write", "arguments": {"path": "right.md", "content": "R"}}]},
              {"latency_ms": 5000, "text": "right done"}],
    "last": [{"text": "joined"}],
}


def test_sigkill_mid_workflow_keeps_finished_steps_and_completes(team_a, monkeypatch):
    from mas_project.celery import app

    queue = f"wf-crash-{os.getpid()}"
    monkeypatch.setitem(app.conf, "task_default_queue", queue)
    for name in ("First", "Left", "Right", "Last"):
        parsed = definition_parse(kind=AGENT, team=team_a, text=f"---\nname: {name}\n---\n\nYou work.\n")
        definition_save(kind=AGENT, team=team_a, parsed=parsed)
    definition_save(kind=WORKFLOW, team=team_a, parsed=definition_parse(kind=WORKFLOW, team=team_a, text=FLOW))

    run = kill_mid_run_and_resume(
        "wf-crash", queue=queue, stale_s=STALE_S,
        start=lambda: workflow_run_start(team=team_a, workflow="crashy", inputs={"topic": "x"}, script=SCRIPT),
        reached=lambda run: Event.objects.filter(run=run, type="llm_request", agent__in=["left", "right"]).count() == 4,
        what="both parallel steps in their second model call")

    assert (run.status, run.result) == ("succeeded", "joined")
    events = list(Event.objects.filter(run=run).order_by("seq"))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    # Every step ran once; only the interrupted one was resumed, from its checkpoint.
    starts = [e.data["step"] for e in events if e.type == "step_start"]
    assert sorted(starts) == ["first", "last", "left", "right"]
    assert sorted(e.data["step"] for e in events if e.type == "step_complete") == ["first", "last", "left", "right"]
    sessions = {s.agent: s for s in Session.objects.filter(run=run)}
    assert {agent: (s.attempt, s.status) for agent, s in sessions.items()} == {
        "first": (1, "ok"), "left": (1, "ok"), "right": (1, "ok"), "last": (1, "ok")}
    for agent in ("left", "right"):
        assert [e.data["resumed"] for e in events if e.type == "session_start" and e.agent == agent] == [False, True]
    assert [e.data["resumed"] for e in events if e.type == "session_start" and e.agent == "first"] == [False]
    # Each tool call ran once.
    assert sorted(e.data["arguments"]["path"] for e in events if e.type == "tool_call") == [
        "first.md", "left.md", "right.md"]
    assert sorted(e.data["path"] for e in events if e.type == "file_change") == ["first.md", "left.md", "right.md"]
    assert dict(WorkspaceFile.objects.filter(run=run).values_list("path", "version")) == {
        "first.md": 1, "left.md": 1, "right.md": 1}
    assert {s["id"]: (s["status"], s["attempts"]) for s in workflow_steps(run)} == {
        "first": ("succeeded", 1), "left": ("succeeded", 1), "right": ("succeeded", 1), "last": ("succeeded", 1)}
    assert [e.data["status"] for e in events if e.type == "workflow_complete"] == ["succeeded"]
