"""Forks of workflow runs on a real worker: the steps settled by the fork point are kept with their outputs
(not run again), the steps in progress then resume from their checkpoints (or start again from their input
when they had none), and the engine goes on."""

from __future__ import annotations

import json

import pytest
from django.db import transaction

from agents_app.execution.forks import ForkError, run_fork, sessions_restore
from agents_app.models import Activation, Event, Run, Session, SessionEntry, WorkspaceFile
from agents_app.execution.journal import session_messages
from tests.runs import agent, call, define, events, finish
from workflows_app.kinds import WORKFLOW
from workflows_app.models import WorkflowRun
from workflows_app.orchestrate import orchestrate_run_start
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
        "run_start", "workflow_start", "step_start", "step_complete", "activation_queued", "step_start",
        "session_start", "llm_request", "stream_chunk", "llm_response", "session_end", "step_complete",
        "workflow_complete",
        "run_complete"]
    start = events(fork, "workflow_start")[0].data
    assert (start["forked_from"], start["fork_seq"], start["kept"]) == (str(run.id), point.seq, ["research"])
    assert events(fork, "step_complete")[0].data == {
        "step": "research", "attempt": 1, "round": 1, "restored": True, "outputs": {"findings": FINDINGS[:2000]}}
    assert fork.script_cursor == {"researcher": 2, "writer": 1}

    assert recorded(run) == before  # the parent: not one row changed
    assert [(f["id"], f["seq"]) for f in client.get(f"/api/runs/{run.id}").json()["forks"]] == [
        (str(fork.id), point.seq)]

    # The fork forks again, from its own restored research step: kept again, not run; the writer runs once more.
    fork_before = recorded(fork)
    again_point = events(fork, "step_complete")[0]
    again = finish(run_fork(run=fork, seq=again_point.seq))
    assert (again.status, again.result, again.forked_from_id) == ("succeeded", "Report: bees dance.", fork.id)
    assert [e.agent for e in events(again, "llm_request")] == ["writer"]
    assert events(again, "workflow_start")[0].data["kept"] == ["research"]
    assert {step["id"]: (step["status"], step["attempts"], step["outputs"]) for step in workflow_steps(again)} == {
        "research": ("succeeded", 1, {"findings": FINDINGS}),
        "write": ("succeeded", 1, {"report": "Report: bees dance."})}
    assert recorded(fork) == fork_before


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
    # From that step's start (as docs/concepts/forks.md says), it runs again at the version pinned, and succeeds.
    point = events(run, "step_start")[1]
    assert point.data["step"] == "write"
    fork = finish(run_fork(run=run, seq=point.seq, versions={"agent:writer": 1}))
    assert (fork.status, fork.result) == ("succeeded", "Report: bees dance.")
    assert list(Session.objects.filter(run=fork).values_list("agent", "attempt")) == [("writer", 1)]
    assert [(step["status"], step["attempts"]) for step in workflow_steps(fork)] == [
        ("succeeded", 1), ("succeeded", 1)]


def tool_failed_run(team) -> Run:
    """The second step's agent reads a missing answer.txt, and fails on its next turn, which expects 42."""
    agent(team, "Researcher")
    agent(team, "Writer")
    define(team, WORKFLOW, TWO_STEPS)
    script = {**SCRIPT, "writer": [{**call("vfs_read", path="answer.txt"),
                                    "usage": {"prompt_tokens": 100, "completion_tokens": 5}},
                                   {"text": "Report: the answer is 42.", "expect": ["answer.txt: 42"],
                                    "usage": {"prompt_tokens": 200, "completion_tokens": 7}}]}
    run = finish(workflow_run_start(team=team, workflow="two-steps", inputs={"topic": "bees"}, script=script))
    assert run.status == "failed"
    assert run.error.startswith("step 'write' failed: provider_error: expectation: script for agent writer, turn 1")
    return run


@pytest.mark.worker
def test_a_fork_at_a_tool_event_of_a_step_in_progress_resumes_it_with_the_edited_result(
        team_a, api_for, celery_worker_process, runs_settled):
    run = tool_failed_run(team_a)
    before = recorded(run)
    point = [e for e in events(run, "tool_result") if e.data["name"] == "vfs_read"][0]
    assert point.data["ok"] is False
    response = api_for(team_a, "operator").post(
        f"/api/runs/{run.id}/fork", {"seq": point.seq, "tool_result": "answer.txt: 42"})
    assert response.status_code == 201, response.content
    fork = finish(Run.objects.get(pk=response.json()["id"]))
    assert (fork.status, fork.result, fork.error) == ("succeeded", "Report: the answer is 42.", "")

    # The first step is kept (not run again); the second resumes its session from its checkpoint: the same
    # attempt, its first turn (the tool call) not played again — one model turn, the script's second.
    [session] = Session.objects.filter(run=fork)
    assert (session.agent, session.attempt, session.status) == ("writer", 1, "ok")
    assert [e.agent for e in events(fork, "llm_request")] == ["writer"]
    assert events(fork, "session_start")[0].data["resumed"] is True
    assert fork.script_cursor == {"researcher": 2, "writer": 2}
    history = [(m.role, m.content, m.tool_call_id) for m in session_messages(session_id=session.id)]
    parent_writer = Session.objects.get(run=run, agent="writer")
    parent_history = [(m.role, m.content, m.tool_call_id)
                      for m in session_messages(session_id=parent_writer.id)]
    assert history[:3] == parent_history[:3] and len(parent_history) == 4
    assert history[3:] == [("tool", "answer.txt: 42", "tc-1"),
                           ("assistant", "Report: the answer is 42.", None)]
    assert [(step["id"], step["status"], step["attempts"], step["outputs"]) for step in workflow_steps(fork)] == [
        ("research", "succeeded", 1, {"findings": FINDINGS}),
        ("write", "succeeded", 1, {"report": "Report: the answer is 42."})]
    # Usage: the run's is the fork's own spend (the one turn); the resumed step's is its session's, the turn
    # before the fork point (restored with its checkpoint) and the turn after, counted once each.
    assert (fork.prompt_tokens, fork.completion_tokens) == (200, 7)
    assert {s["id"]: (s["prompt_tokens"], s["completion_tokens"]) for s in workflow_steps(fork)} == {
        "research": (39, 851), "write": (300, 12)}
    [writer] = Activation.objects.filter(run=fork, context__step="write")
    assert writer.input == f"Write up: {FINDINGS}"
    assert [e.type for e in events(fork)] == [
        "run_start", "workflow_start", "step_start", "step_complete", "activation_queued", "step_start",
        "session_start", "llm_request", "stream_chunk", "llm_response", "session_end", "step_complete",
        "workflow_complete",
        "run_complete"]
    kept, resumed = (e.data for e in events(fork, "step_start"))
    assert (kept["step"], kept["attempt"], kept["restored"]) == ("research", 1, True)
    assert (resumed["step"], resumed["attempt"], resumed["restored"], resumed["activation"]) == (
        "write", 1, True, str(writer.id))
    assert resumed["checkpoints"] == SessionEntry.objects.filter(
        session=parent_writer, event_seq__lte=point.seq).count() > 0

    assert recorded(run) == before  # the parent: not one row changed


@pytest.mark.worker
def test_a_step_resumed_keeps_the_outputs_it_had_set_by_the_fork_point(team_a, celery_worker_process,
                                                                       runs_settled):
    run = tool_failed_run(team_a)
    before = recorded(run)
    point = [e for e in events(run, "tool_result") if e.data["name"] == "set_output"][0]  # findings set
    fork = finish(run_fork(run=run, seq=point.seq))
    # The researcher resumes after its set_output (one turn: "done"), its output as it had set it; the writer
    # then runs its step from its input and fails as in the parent.
    assert [e.agent for e in events(fork, "llm_request")] == ["researcher", "writer", "writer"]
    assert sorted(Session.objects.filter(run=fork).values_list("agent", "attempt", "status")) == [
        ("researcher", 1, "ok"), ("writer", 1, "failed")]
    assert events(fork, "session_start")[0].data["resumed"] is True
    assert [(step["id"], step["status"], step["outputs"]) for step in workflow_steps(fork)] == [
        ("research", "succeeded", {"findings": FINDINGS}), ("write", "failed", {})]
    assert (fork.status, fork.error) == ("failed", run.error)
    assert events(fork, "workflow_start")[0].data["kept"] == []
    assert recorded(run) == before

    # Restored at the set_output call, before its result: the output was not set yet (the parent's step ended
    # with it set); at its result, it was.
    call_event = [e for e in events(run, "tool_call") if e.data["name"] == "set_output"][0]
    for at, outputs in ((call_event.seq, {}), (point.seq, {"findings": FINDINGS})):
        with transaction.atomic():
            copy = Run.objects.create(team=team_a, workflow=run.workflow, input=run.input, status="failed")
            [item] = sessions_restore(parent=run, fork=copy, seq=at, base=1, roots={
                events(run, "step_start")[0].data["activation"]})
            assert (item.activation.context["step"], item.activation.context["outputs"]) == ("research", outputs)
            assert item.session.status == "suspended" and item.entries
            transaction.set_rollback(True)
    assert recorded(run) == before


@pytest.mark.worker
def test_a_running_workflow_run_forks_from_its_committed_history(team_a, celery_worker_process, runs_settled):
    from tests.runs import wait_until

    agent(team_a, "Researcher")
    agent(team_a, "Writer")
    define(team_a, WORKFLOW, TWO_STEPS)
    # The researcher sets its output, then thinks for 4 s: the fork is taken meanwhile.
    script = {"researcher": [{"tool_calls": [{"name": "set_output", "arguments": {"name": "findings",
                                                                                  "value": "bees dance"}}]},
                             {"text": "done", "latency_ms": 4000}],
              "writer": [{"text": "Report: bees dance.", "expect": ["Write up: bees dance"]}]}
    run = workflow_run_start(team=team_a, workflow="two-steps", inputs={"topic": "bees"}, script=script)
    wait_until(lambda: len(events(run, "llm_request")) == 2, 30, "the researcher's second model call")
    point = [e for e in events(run, "tool_result") if e.data["name"] == "set_output"][0]
    fork = run_fork(run=run, seq=point.seq)
    assert Run.objects.get(pk=run.pk).status == "running"
    fork, run = finish(fork), finish(run)
    assert (fork.status, run.status) == ("succeeded", "succeeded")
    # The step in progress resumed with the output it had set; the next step got it.
    assert [(step["id"], step["status"], step["outputs"]) for step in workflow_steps(fork)] == [
        ("research", "succeeded", {"findings": "bees dance"}), ("write", "succeeded",
                                                               {"report": "Report: bees dance."})]
    assert [(e.agent, e.data.get("restored", False)) for e in events(fork, "step_start")] == [
        ("researcher", True), ("writer", False)]
    assert [e.type for e in events(run) if e.type.startswith("step_")] == [
        "step_start", "step_complete", "step_start", "step_complete"]


def test_a_workflow_run_without_its_state_is_refused(team_a):
    run = Run.objects.create(team=team_a, workflow="pipeline", input="x", status="failed")
    from mas_core.eventlog import event_append
    event_append(run_id=run.id, type="run_start", agent="", data={})
    with pytest.raises(ForkError) as refused:
        run_fork(run=run, seq=1)
    assert str(refused.value) == f"run {run.id} of workflow pipeline has no workflow state to fork from"
    assert Run.objects.count() == 1


@pytest.mark.worker
def test_a_planners_run_forks_from_its_recorded_plan(team_a, api_for, celery_worker_process, runs_settled):
    for name in ("Planner", "Scout"):
        agent(team_a, name)
    plan = {"subtasks": [{"id": "north", "agent": "scout", "task": "Survey the north", "depends_on": []}]}
    script = {"planner": [{"text": json.dumps(plan)}, {"text": "Final: the north is 42."}],
              "scout": [call("vfs_read", path="answer.txt"), {"text": "north: 42", "expect": ["answer.txt: 42"]}]}
    run = finish(orchestrate_run_start(team=team_a, planner="planner", task="Survey", script=script,
                                       max_adaptations=0, subtask_retries=0))
    assert (run.status, run.result, [step["status"] for step in workflow_steps(run)]) == (
        "succeeded", "Final: the north is 42.", ["failed", "succeeded"])  # went on without it: a partial run
    assert run.error == "step(s) north failed; the workflow went on without them (on_failure: continue)"
    before = recorded(run)
    point = [e for e in events(run, "tool_result") if e.data["name"] == "vfs_read"][0]
    response = api_for(team_a, "operator").post(
        f"/api/runs/{run.id}/fork", {"seq": point.seq, "tool_result": "answer.txt: 42"})
    assert response.status_code == 201, response.content
    fork = finish(Run.objects.get(pk=response.json()["id"]))
    assert (fork.status, fork.result, fork.error) == ("succeeded", "Final: the north is 42.", "")
    # The plan is the parent's (the planner not asked again); the subtask resumed; then the synthesis.
    assert [e.agent for e in events(fork, "llm_request")] == ["scout", "planner"]
    assert not events(fork, "plan_created")
    assert sorted(Session.objects.filter(run=fork).values_list("agent", "attempt", "status")) == [
        ("planner", 1, "ok"), ("scout", 1, "ok")]
    assert [(step["id"], step["status"], step["outputs"]) for step in workflow_steps(fork)] == [
        ("north", "succeeded", {"result": "north: 42"}), ("synthesis", "succeeded",
                                                          {"result": "Final: the north is 42."})]
    assert fork.script_cursor == {"planner": 2, "scout": 2}
    assert WorkflowRun.objects.get(run=fork).planner == "planner"
    assert recorded(run) == before

    # Forked before the plan was written: the planner plans again (its script's first turn), then all runs.
    point = events(run, "llm_request")[0]
    fork = finish(run_fork(run=run, seq=point.seq))
    assert [e.agent for e in events(fork, "llm_request")] == ["planner", "scout", "scout", "planner"]
    assert [e.data["subtasks"] for e in events(fork, "plan_created")] == [plan["subtasks"]]
    assert (fork.status, fork.result, fork.error) == (run.status, run.result, run.error)
    # Before the planner was asked (at run_start): the fork asks it with the parent's prompt.
    fork = finish(run_fork(run=run, seq=1))
    assert [e.agent for e in events(fork, "llm_request")] == ["planner", "scout", "scout", "planner"]
    assert (list(Activation.objects.filter(run=fork, kind="plan").values_list("input", flat=True))
            == list(Activation.objects.filter(run=run, kind="plan").values_list("input", flat=True)))
    assert (fork.status, fork.result, fork.error) == (run.status, run.result, run.error)
    # The planner had answered (its session ended), its plan not taken yet: the fork takes it, no new turn.
    point = [e for e in events(run, "session_end") if e.agent == "planner"][0]
    assert events(run, "plan_created")[0].seq > point.seq
    fork = finish(run_fork(run=run, seq=point.seq))
    assert [e.agent for e in events(fork, "llm_request")] == ["scout", "scout", "planner"]
    assert [e.data["subtasks"] for e in events(fork, "plan_created")] == [plan["subtasks"]]
    assert (fork.status, fork.result, fork.error) == (run.status, run.result, run.error)
    assert recorded(run) == before


@pytest.mark.worker
def test_a_planners_run_whose_plan_was_adapted_forks_from_the_plan_in_effect_at_its_event(
        team_a, celery_worker_process, runs_settled):
    from tests.workflows_app.test_orchestrate import agents, plan, subtask

    agents(team_a, "Planner", "Walker", "Scout", "Pilot")
    # The walker fails, the planner adapts the plan (air, by the pilot, on map's result); the pilot's answer
    # needs 42 in the file it reads, which is missing: the adapted subtask fails, and the run with it.
    script = {
        "planner": [plan(subtask("land", "walker", "Walk in"), subtask("map", "scout", "Map it")),
                    plan(subtask("air", "pilot", "Fly over instead", "map")), {"text": "Mapped from the air."}],
        "walker": [{"error": "auth"}],
        "scout": [{"text": "mapped", "latency_ms": 300}],
        "pilot": [call("vfs_read", path="answer.txt"), {"text": "seen from above", "expect": ["answer.txt: 42"]}],
    }
    run = finish(orchestrate_run_start(team=team_a, planner="planner", task="Map the valley", script=script,
                                       subtask_retries=0))
    parent_steps = [(step["id"], step["status"]) for step in workflow_steps(run)]
    assert parent_steps == [("land", "failed"), ("map", "succeeded"), ("air", "failed"), ("synthesis", "succeeded")]
    flow = WorkflowRun.objects.get(run=run)
    [created, adapted] = events(run, "plan_created") + events(run, "plan_adapted")
    assert [(plan_["seq"], [step["id"] for step in plan_["steps"]]) for plan_ in flow.spec["plans"]] == [
        (created.seq, ["land", "map", "synthesis"]), (adapted.seq, ["land", "map", "air", "synthesis"])]
    before = recorded(run)

    # At the pilot's tool result, with the result it needed: the adapted plan goes on from there.
    point = [e for e in events(run, "tool_result") if e.data["name"] == "vfs_read"][0]
    fork = finish(run_fork(run=run, seq=point.seq, tool_result="answer.txt: 42"))
    assert (fork.status, fork.result) == ("succeeded", "Mapped from the air.")
    assert [e.agent for e in events(fork, "llm_request")] == ["pilot", "planner"]  # nobody planned again
    assert not events(fork, "plan_created") and not events(fork, "plan_adapted")
    assert [(step["id"], step["status"]) for step in workflow_steps(fork)] == [
        ("land", "failed"), ("map", "succeeded"), ("air", "succeeded"), ("synthesis", "succeeded")]
    assert WorkflowRun.objects.get(run=fork).adaptations == 1  # none left: as many as the parent had then
    # Forked again (at its air step, resumed): the same plan, and still no adaptation left.
    with transaction.atomic():
        resumed = [e for e in events(fork, "step_start") if e.data["step"] == "air"][0]
        again = run_fork(run=fork, seq=resumed.seq)
        flow_again = WorkflowRun.objects.get(run=again)
        assert [step["id"] for step in flow_again.spec["steps"]] == ["land", "map", "air", "synthesis"]
        assert flow_again.adaptations == 1
        assert events(again, "workflow_start")[0].data["kept"] == ["land", "map"]
        transaction.set_rollback(True)

    # While the planner was adapting: the engine stopped as it was, the planner asked again (afresh: it had
    # no checkpoint yet), its adapted plan taken in the fork; then the fork ends as its parent did.
    [adapting] = events(run, "plan_adapting")
    fork = finish(run_fork(run=run, seq=adapting.seq))
    assert [e.data["subtasks"] for e in events(fork, "plan_adapted")] == [adapted.data["subtasks"]]
    assert [(e.data["kept"], e.data["dropped"]) for e in events(fork, "plan_adapted")] == [(["map"], ["land"])]
    assert [(step["id"], step["status"]) for step in workflow_steps(fork)] == parent_steps
    # Nothing of the old plan was queued while the planner adapted it: synthesis started once, after air.
    assert [(e.data["step"], bool(e.data.get("restored"))) for e in events(fork, "step_start")] == [
        ("land", True), ("map", True), ("air", False), ("synthesis", False)]
    assert (fork.status, fork.error) == (run.status, run.error)
    assert [e.agent for e in events(fork, "llm_request")].count("walker") == 0  # the failed subtask: not again

    # Before the adaptation (the walker at work): the first plan, and the fork adapts it as its parent did.
    point = [e for e in events(run, "step_start") if e.data["step"] == "land"][0]
    fork = finish(run_fork(run=run, seq=point.seq))
    assert [e.data["subtasks"] for e in events(fork, "plan_adapted")] == [adapted.data["subtasks"]]
    assert [(step["id"], step["status"]) for step in workflow_steps(fork)] == parent_steps
    assert (fork.status, fork.error, WorkflowRun.objects.get(run=fork).adaptations) == (run.status, run.error, 1)
    assert recorded(run) == before


def test_a_planners_run_whose_plan_was_adapted_before_plans_were_kept_is_refused(team_a):
    run = Run.objects.create(team=team_a, agent="planner", input="x", status="failed")
    WorkflowRun.objects.create(run=run, mode="orchestrate", planner="planner", spec={"steps": []}, state={})
    from mas_core.eventlog import event_append
    event_append(run_id=run.id, type="run_start", agent="planner", data={})
    event_append(run_id=run.id, type="plan_adapting", agent="planner", data={})
    agent(team_a, "Planner")
    with pytest.raises(ForkError) as refused:
        run_fork(run=run, seq=1)
    assert str(refused.value) == (f"run {run.id} runs a planner's plan that was adapted after a subtask failed, and "
                                  "was recorded before MAS kept each plan: only its last plan is known, so it "
                                  "cannot be forked")
    assert Run.objects.count() == 1
