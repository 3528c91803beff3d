"""delegate and spawn_agent on a real worker: the caller waits for the child's outcome, holding nothing.

No test here replaces the delegation service: the orchestrator's scripted turns
``expect`` the children's answers, so a run only succeeds when they reached it.
"""

from __future__ import annotations

import json

import pytest

from agents_app.execution.runs import run_cancel, run_start
from agents_app.models import Activation, Event, Session, WorkspaceFile
from tests.runs import agent, call, events, finish, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def delegate(agent_slug: str, task: str, **more) -> dict:
    return {"name": "delegate", "arguments": {"agent": agent_slug, "task": task, **more}}


def outcomes(run, agent_slug: str, tool: str = "delegate") -> list[dict]:
    return [json.loads(e.data["content"]) for e in events(run, "tool_result")
            if e.agent == agent_slug and e.data["name"] == tool]


ORCHESTRATION = {
    "orchestrator": [
        {"tool_calls": [
            delegate("researcher", "Find how tides work", context={"topic": "ocean tides", "depth": "short"}),
            delegate("writer", "Draft an intro on tides", context="Audience: children"),
        ]},
        # Succeeds only when both answers (and the writer's file) reached it.
        {"expect": ["The moon's gravity pulls the oceans.", "Intro drafted in intro.md",
                    '"path": "intro.md"'],
         "tool_calls": [call("vfs_write", path="synthesis.md",
                             content="Tides: the moon's gravity pulls the oceans.")["tool_calls"][0]]},
        {"text": "Synthesis written to synthesis.md."},
    ],
    # Each child's prompt carries its task and the context the orchestrator passed along.
    "researcher": [{"expect": ["Find how tides work", "## Context from orchestrator", '"topic": "ocean tides"'],
                    "latency_ms": 600, "text": "The moon's gravity pulls the oceans."}],
    "writer": [{"expect": ["Draft an intro on tides", "Audience: children"], "latency_ms": 600,
                "tool_calls": [{"name": "vfs_write", "arguments": {"path": "intro.md", "content": "Tides rise."}}]},
               {"text": "Intro drafted in intro.md"}],
}


def test_an_orchestrator_delegates_to_two_agents_in_parallel_and_synthesises_both_answers(
        team_a, celery_worker_process):
    for name in ("Orchestrator", "Researcher", "Writer"):
        agent(team_a, name)
    run = finish(run_start(team=team_a, agent="orchestrator", input="Explain tides", script=ORCHESTRATION))

    assert (run.status, run.result, run.error) == ("succeeded", "Synthesis written to synthesis.md.", "")
    assert outcomes(run, "orchestrator") == [
        {"agent": "researcher", "status": "ok", "result": "The moon's gravity pulls the oceans.", "outputs": {},
         "files": [], "failure": None},
        {"agent": "writer", "status": "ok", "result": "Intro drafted in intro.md", "outputs": {},
         "files": [{"path": "intro.md", "bytes": 11}], "failure": None},
    ]
    # Each child ran once, at the same time as the other; the orchestrator's one session waited between.
    sessions = {s.agent: s for s in Session.objects.filter(run=run)}
    assert {agent: (s.attempt, s.status) for agent, s in sessions.items()} == {
        "orchestrator": (1, "ok"), "researcher": (1, "ok"), "writer": (1, "ok")}
    researcher, writer = sessions["researcher"], sessions["writer"]
    assert researcher.started_at < writer.finished_at and writer.started_at < researcher.finished_at
    [suspended] = events(run, "session_suspended")
    children = {a.agent: str(a.id) for a in Activation.objects.filter(run=run, kind="delegate")}
    assert (suspended.agent, sorted(suspended.data["waiting_for"])) == ("orchestrator", sorted(children.values()))
    # What it waits for, counted by kind (the monitor says "waits for its 2 children").
    assert {key: suspended.data[key] for key in ("reason", "children", "approvals", "questions")} == {
        "reason": "children", "children": 2, "approvals": 0, "questions": 0}
    assert [e.data["resumed"] for e in events(run, "session_start") if e.agent == "orchestrator"] == [False, True]
    delegated = [(e.data["to"], e.data["wait"], e.data["priority"]) for e in events(run, "delegate")]
    assert delegated == [("researcher", True, 100), ("writer", True, 100)]
    assert dict(WorkspaceFile.objects.filter(run=run).values_list("path", "content")) == {
        "intro.md": "Tides rise.", "synthesis.md": "Tides: the moon's gravity pulls the oceans."}
    seqs = [e.seq for e in events(run)]
    assert seqs == list(range(1, len(seqs) + 1))


def test_an_expectation_that_is_not_met_fails_the_session_naming_the_turn(team_a, celery_worker_process):
    agent(team_a, "Lead")
    agent(team_a, "Helper")
    script = {"lead": [{"tool_calls": [delegate("helper", "Say hello")]},
                       {"expect": "Goodbye", "text": "never"}],
              "helper": [{"text": "Hello."}]}
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script))
    assert run.status == "failed"
    lead = Session.objects.get(run=run, agent="lead")
    received = json.dumps({"agent": "helper", "status": "ok", "result": "Hello.", "outputs": {}, "files": [],
                           "failure": None})
    assert lead.failure["kind"] == "provider_error"
    assert lead.failure["message"] == (f"expectation: script for agent lead, turn 1 expected 'Goodbye' in what it "
                                       f"was sent, which was: {received!r}")
    assert lead.failure["suggested_retry"] is False


def test_a_failed_child_hands_back_its_failure_report_and_partial_result(team_a, celery_worker_process):
    agent(team_a, "Lead")
    agent(team_a, "Helper", "limits:\n  max_steps: 1\n")
    script = {"lead": [{"tool_calls": [delegate("helper", "Work")]},
                       {"expect": ['"status": "failed"', "no final answer after 1 steps"], "text": "Noted."}],
              "helper": [{"text": "Half way", **call("vfs_list", prefix="")}]}
    run = finish(run_start(team=team_a, agent="lead", input="x", limits={"max_retries": 0}, script=script))
    assert (run.status, run.result) == ("succeeded", "Noted.")
    [outcome] = outcomes(run, "lead")
    assert outcome == {"agent": "helper", "status": "failed", "result": "Half way", "outputs": {}, "files": [],
                       "failure": {"kind": "stuck", "message": "no final answer after 1 steps",
                                   "suggested_retry": False,
                                   "last_tool_calls": [{"id": "tc-1", "provider_id": "call_helper_0_0",
                                                        "name": "vfs_list",
                                                        "arguments": {"prefix": ""}}]}}


def test_without_wait_the_call_returns_at_once_and_the_outcome_arrives_as_a_signal(team_a, celery_worker_process):
    agent(team_a, "Lead")
    agent(team_a, "Helper")
    script = {"lead": [{"tool_calls": [delegate("helper", "Check the logs", wait=False)]},
                       {"text": "Started the check.", "expect": "its outcome will reach you as a message"},
                       {"expect": ["has ended", '"result": "Logs are clean."', "(Your original task: Audit)"],
                        "text": "Audit done: logs are clean."}],
              "helper": [{"text": "Logs are clean."}]}
    # One session at a time: the lead's first session ends before the helper starts.
    run = finish(run_start(team=team_a, agent="lead", input="Audit", limits={"max_concurrency": 1}, script=script))
    assert (run.status, run.result) == ("succeeded", "Audit done: logs are clean.")
    [started] = [e.data["content"] for e in events(run, "tool_result") if e.agent == "lead"]
    helper = Activation.objects.get(run=run, agent="helper")
    assert started == (f"Delegated to helper (activation {helper.id}). It works on its own; its outcome will reach "
                       f"you as a message when it ends.")
    assert events(run, "session_suspended") == []
    assert [(a.agent, a.kind, a.status) for a in Activation.objects.filter(run=run).order_by("created_at")] == [
        ("lead", "root", "done"), ("helper", "delegate", "done"), ("lead", "signal", "done")]
    assert [(e.data["from"], e.data["to"]) for e in events(run, "signal")] == [("helper", "lead")]


def test_priority_lower_numbers_are_started_first(team_a, celery_worker_process):
    for name in ("Lead", "A", "B", "C"):
        agent(team_a, name)
    script = {"lead": [{"tool_calls": [delegate("a", "a", priority=50), delegate("b", "b", priority=10),
                                       delegate("c", "c")]},
                       {"text": "done"}],
              "a": [{"text": "a"}], "b": [{"text": "b"}], "c": [{"text": "c"}]}
    run = finish(run_start(team=team_a, agent="lead", input="x", limits={"max_concurrency": 1}, script=script))
    assert run.status == "succeeded"
    # The waiting lead holds no concurrency slot: its children ran one at a time, lowest number first.
    started = [e.agent for e in events(run, "session_start") if e.agent != "lead"]
    assert started == ["b", "a", "c"]
    assert [e.data["priority"] for e in events(run, "delegate")] == [50, 10, 100]


def test_cancelling_a_run_cancels_the_waiting_parent_and_its_children(team_a, celery_worker_process):
    agent(team_a, "Lead")
    agent(team_a, "Slow")
    script = {"lead": [{"tool_calls": [delegate("slow", "Take your time")]}, {"text": "never"}],
              "slow": [{"latency_ms": 20_000, "text": "too late"}]}
    run = run_start(team=team_a, agent="lead", input="x", script=script)
    wait_until(lambda: Session.objects.filter(run=run, agent="lead", status="suspended").exists()
               and Event.objects.filter(run=run, type="llm_request", agent="slow").exists(), 30,
               "the lead waiting and the child calling its model")
    run_cancel(run=run)
    run = finish(run, timeout=15)
    wait_until(lambda: not Session.objects.filter(run=run, status__in=["running", "suspended"]).exists(), 15,
               "every session to stop")
    assert run.status == "cancelled"
    assert dict(Session.objects.filter(run=run).values_list("agent", "status")) == {
        "lead": "cancelled", "slow": "cancelled"}
    assert dict(Activation.objects.filter(run=run).values_list("agent", "status")) == {
        "lead": "cancelled", "slow": "cancelled"}
    assert sorted(e.agent for e in events(run, "session_end")) == ["lead", "slow"]
    assert events(run, "tool_result") == []


def _manual_json_under(heading: str) -> list:
    """The JSON blocks of docs/concepts/runs.md under ``heading``."""
    from tests.manual import examples, section

    name = "docs/concepts/runs.md"
    return [json.loads(block.text) for block in examples(name, section(name, heading)) if block.language == "json"]


def test_the_manuals_expect_example_runs_as_it_says(team_a, celery_worker_process):
    [script] = _manual_json_under("Scripts that check what they are sent")
    agent(team_a, "Lead")
    agent(team_a, "Helper")
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script))
    assert (run.status, run.result) == ("succeeded", "The helper said hello.")
    # And it fails when the helper says something else.
    script["helper"] = [{"text": "Goodbye."}]
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script))
    assert run.status == "failed" and "turn 1 expected 'Hello'" in run.error


def test_the_manuals_outcome_example_has_the_keys_the_model_gets():
    from agents_app.execution.children import OUTCOME_KEYS

    [outcome] = _manual_json_under("Working together")
    assert tuple(outcome) == OUTCOME_KEYS == ("agent", "status", "result", "outputs", "files", "failure")
