"""Forks of workflow runs on a real worker: the steps settled by the fork point are kept with their outputs
(not run again), the steps in progress then start again from their input, and the engine goes on."""

from __future__ import annotations

import pytest

from agents_app.execution.forks import ForkError, run_fork
from agents_app.models import Activation, Event, Run, Session, SessionEntry, WorkspaceFile
from tests.runs import agent, define, events, finish
from workflows_app.kinds import WORKFLOW
from workflows_app.models import WorkflowRun
from workflows_app.services import workflow_run_start, workflow_steps

pytestmark = [pytest.mark.django_db(transaction=True)]

TWO_STEPS = """---
name: Two steps
inputs: [topic]
steps:
- id: research
  agent: researcher
  prompt: "Research {topic}"
  outputs: [findings]
- id: write
  agent: writer
  depends_on: [research]
  prompt: "Write up: {research.findings}"
  outputs: [report]
---

A workflow.
"""

FINDINGS = "bees dance " * 300  # longer than the 2,000 characters an event keeps: the fork reuses the whole output
SCRIPT = {
    "researcher": [{"tool_calls": [{"name": "set_output", "arguments": {"name": "findings", "value": FINDINGS}}]},
                   {"text": "done"}],
    # The writer's turn expects version one's prompt: the run (at version two) fails at the second step.
    "writer": [{"text": "Report: bees dance.", "expect": ["You are version one.", "Write up: bees dance"]}],
}


def recorded(run: Run) -> dict[str, list]:
    """Everything a workflow run recorded, row by row: what a fork must leave exactly as it was."""
    return {
        "run": list(Run.objects.filter(pk=run.pk).values()),
        "workflow_run": list(WorkflowRun.objects.filter(run=run).values()),
        "events": list(Event.objects.filter(run=run).order_by("seq").values()),
        "activations": list(Activation.objects.filter(run=run).order_by("created_at").values()),
        "sessions": list(Session.objects.filter(run=run).order_by("started_at").values()),
        "entries": list(SessionEntry.objects.filter(session__run=run).order_by("session_id", "seq").values()),
        "files": list(WorkspaceFile.objects.filter(run=run).order_by("path").values()),
    }


def failed_run(team) -> Run:
    agent(team, "Researcher")
    agent(team, "Writer", body="You are version one.")
    agent(team, "Writer", body="You are version two.")
    define(team, WORKFLOW, TWO_STEPS)
    run = finish(workflow_run_start(team=team, workflow="two-steps", inputs={"topic": "bees"}, script=SCRIPT))
    assert (run.status, run.versions["agent:writer"]) == ("failed", 2)
    assert run.error.startswith("step 'write' failed: provider_error: expectation: script for agent writer")
    assert [e.type for e in events(run) if e.type.startswith("step_")] == [
        "step_start", "step_complete", "step_start", "step_failed"]
    return run


@pytest.mark.worker
def test_a_fork_after_the_first_step_keeps_it_and_runs_the_second_at_another_version(
        team_a, api_for, celery_worker_process, runs_settled):
    run = failed_run(team_a)
    before = recorded(run)
    point = events(run, "step_complete")[0]  # research done, write not yet started
    client = api_for(team_a, "operator")
    response = client.post(f"/api/runs/{run.id}/fork", {"seq": point.seq, "versions": {"agent:writer": 1}})
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["forked_from"], body["fork_seq"], body["workflow"]) == (str(run.id), point.seq, "two-steps")
    fork = finish(Run.objects.get(pk=body["id"]))
    assert (fork.status, fork.result, fork.error) == ("succeeded", "Report: bees dance.", "")
    assert fork.versions == {**run.versions, "agent:writer": 1}

    # The first step was not run again: no session, no model turn of the researcher; its output reused whole.
    assert list(Session.objects.filter(run=fork).values_list("agent", "status")) == [("writer", "ok")]
    assert [e.agent for e in events(fork, "llm_request")] == ["writer"]
    steps = {step["id"]: step for step in workflow_steps(fork)}
    assert steps["research"]["outputs"] == {"findings": FINDINGS}
    assert (steps["research"]["status"], steps["research"]["attempts"]) == ("succeeded", 1)
    assert (steps["write"]["status"], steps["write"]["attempts"], steps["write"]["outputs"]) == (
        "succeeded", 1, {"report": "Report: bees dance."})
    prompts = dict(Activation.objects.filter(run=fork).values_list("context__step", "input"))
    assert prompts == {"research": "Research bees", "write": f"Write up: {FINDINGS}"}
    assert [e.type for e in events(fork)] == [
        "run_start", "workflow_start", "step_complete", "activation_queued", "step_start", "session_start",
        "llm_request", "stream_chunk", "llm_response", "session_end", "step_complete", "workflow_complete",
        "run_complete"]
    start = events(fork, "workflow_start")[0].data
    assert (start["forked_from"], start["fork_seq"], start["kept"]) == (str(run.id), point.seq, ["research"])
    assert events(fork, "step_complete")[0].data == {
        "step": "research", "attempt": 1, "round": 1, "restored": True, "outputs": {"findings": FINDINGS[:2000]}}
    assert fork.script_cursor == {"researcher": 2, "writer": 1}

    assert recorded(run) == before  # the parent: not one row changed
    assert [(f["id"], f["seq"]) for f in client.get(f"/api/runs/{run.id}").json()["forks"]] == [
        (str(fork.id), point.seq)]


@pytest.mark.worker
def test_a_fork_before_any_step_finished_runs_every_step_again(team_a, celery_worker_process, runs_settled):
    run = failed_run(team_a)
    before = recorded(run)
    point = events(run, "llm_request")[0]  # the researcher's first turn: nothing settled yet
    fork = finish(run_fork(run=run, seq=point.seq, versions={"agent:writer": 1}))
    assert (fork.status, fork.result) == ("succeeded", "Report: bees dance.")
    assert sorted(Session.objects.filter(run=fork).values_list("agent", "attempt", "status")) == [
        ("researcher", 1, "ok"), ("writer", 1, "ok")]
    assert [e.agent for e in events(fork, "llm_request")] == ["researcher", "researcher", "writer"]
    assert events(fork, "workflow_start")[0].data["kept"] == []
    assert [step["attempts"] for step in workflow_steps(fork)] == [1, 1]
    assert recorded(run) == before


@pytest.mark.worker
def test_a_fork_after_the_workflow_stopped_ends_as_it_did(team_a, celery_worker_process, runs_settled):
    run = failed_run(team_a)
    point = events(run, "step_failed")[0]
    fork = finish(run_fork(run=run, seq=point.seq, versions={"agent:writer": 1}))
    # The second step had failed by then, stopping the workflow: nothing runs, the fork fails as its parent did.
    assert (fork.status, fork.error) == ("failed", run.error)
    assert not Session.objects.filter(run=fork).exists()
    assert [step["status"] for step in workflow_steps(fork)] == ["succeeded", "failed"]
    # From that step's start (as the README says), it runs again at the version pinned, and succeeds.
    point = events(run, "step_start")[1]
    assert point.data["step"] == "write"
    fork = finish(run_fork(run=run, seq=point.seq, versions={"agent:writer": 1}))
    assert (fork.status, fork.result) == ("succeeded", "Report: bees dance.")
    assert list(Session.objects.filter(run=fork).values_list("agent", "attempt")) == [("writer", 1)]
    assert [(step["status"], step["attempts"]) for step in workflow_steps(fork)] == [
        ("succeeded", 1), ("succeeded", 1)]


@pytest.mark.worker
def test_a_workflow_forks_tool_result_is_refused(team_a, api_for, celery_worker_process, runs_settled):
    run = failed_run(team_a)
    point = events(run, "tool_call")[0]
    response = api_for(team_a, "operator").post(f"/api/runs/{run.id}/fork", {"seq": point.seq, "tool_result": "x"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "tool_result"]
    assert response.json()["detail"][0]["msg"] == (
        f"run {run.id} is a run of workflow two-steps: its fork starts the steps in progress at that event again "
        "from their input, so it cannot give a tool call another result (fork an agent run for that)")
    assert Run.objects.count() == 1


def test_a_workflow_run_without_its_state_is_refused(team_a):
    run = Run.objects.create(team=team_a, workflow="pipeline", input="x", status="failed")
    from mas_core.eventlog import event_append
    event_append(run_id=run.id, type="run_start", agent="", data={})
    with pytest.raises(ForkError) as refused:
        run_fork(run=run, seq=1)
    assert str(refused.value) == f"run {run.id} of workflow pipeline has no workflow state to fork from"
    assert Run.objects.count() == 1


def test_a_planners_run_is_refused(team_a):
    run = Run.objects.create(team=team_a, agent="planner", input="x", status="failed")
    WorkflowRun.objects.create(run=run, mode="orchestrate", planner="planner", spec={"steps": []}, state={})
    from mas_core.eventlog import event_append
    event_append(run_id=run.id, type="run_start", agent="planner", data={})
    agent(team_a, "Planner")
    with pytest.raises(ForkError) as refused:
        run_fork(run=run, seq=1)
    assert str(refused.value) == (f"run {run.id} runs a planner's plan (orchestrate): only runs of a workflow "
                                  "definition can be forked")
    assert Run.objects.count() == 1
