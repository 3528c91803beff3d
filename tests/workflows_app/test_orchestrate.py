"""Orchestrate mode on a real worker: the planner's plan runs as a workflow, then synthesis; one adaptation."""

import json

import pytest

from agents_app.execution.errors import RunError
from agents_app.models import Activation, Run
from tests.runs import agent, events, finish
from workflows_app.models import WorkflowRun
from workflows_app.orchestrate import PlanError, orchestrate_run_start, plan_parse
from workflows_app.services import workflow_steps

pytestmark = [pytest.mark.django_db(transaction=True)]


def agents(team, *names):
    for name in names:
        agent(team, name, f"description: The {name.lower()}.\n")


def plan(*subtasks):
    return {"text": "```json\n" + json.dumps({"subtasks": list(subtasks)}) + "\n```"}


def subtask(id, agent, task, *depends_on):
    return {"id": id, "agent": agent, "task": task, "depends_on": list(depends_on)}


@pytest.mark.worker
def test_the_planners_plan_runs_in_parallel_then_synthesis_gets_every_result(team_a, make_member,
                                                                           celery_worker_process):
    agents(team_a, "Planner", "Scout", "Ranger", "Analyst")
    script = {
        "planner": [
            plan(subtask("north", "scout", "Survey the north"), subtask("south", "ranger", "Survey the south"),
                 subtask("compare", "analyst", "Compare both", "north", "south")),
            {"text": "Final: both regions are dry."},
        ],
        "scout": [{"text": "dry up north", "latency_ms": 500}],
        "ranger": [{"text": "dry down south", "latency_ms": 500}],
        "analyst": [{"text": "equally dry"}],
    }
    run = finish(orchestrate_run_start(team=team_a, planner="planner", task="Survey the land", script=script))
    assert (run.status, run.result, run.agent, run.error) == ("succeeded", "Final: both regions are dry.",
                                                              "planner", "")
    [created] = events(run, "plan_created")
    assert [s["id"] for s in created.data["subtasks"]] == ["north", "south", "compare"]
    steps = {s["id"]: s for s in workflow_steps(run)}
    assert list(steps) == ["north", "south", "compare", "synthesis"]
    assert {sid: s["status"] for sid, s in steps.items()} == dict.fromkeys(steps, "succeeded")
    assert steps["synthesis"]["depends_on"] == ["north", "south", "compare"]
    inputs = dict(Activation.objects.filter(run=run, kind="step").values_list("context__step", "input"))
    assert inputs["compare"] == ("Compare both\n\nResults of the subtasks this one builds on:\n"
                                 "\n### north\ndry up north\n\n### south\ndry down south")
    # The two surveys ran at the same time.
    north, south = (events(run, "step_complete")[i].seq for i in range(2))
    assert max(e.seq for e in events(run, "step_start")[:2]) < min(north, south)
    assert inputs["synthesis"].startswith("Synthesize the final answer to this task from the subtasks' results."
                                          "\n\nTask:\nSurvey the land\n\nResults:\n")
    assert "### compare (analyst)\nequally dry" in inputs["synthesis"]
    plan_prompt = Activation.objects.get(run=run, kind="plan").input
    assert "- analyst: The analyst.\n- planner: The planner.\n- ranger: The ranger.\n- scout: The scout." in plan_prompt
    types = [e.type for e in events(run)]
    assert types.index("plan_created") < types.index("step_start") and types[-2:] == ["workflow_complete",
                                                                                       "run_complete"]

    # The monitor page draws the plan the run executed.
    import re

    from django.test import Client

    client = Client()
    client.force_login(make_member(team_a, role="viewer"))
    page = client.get(f"/runs/{run.id}/").content.decode()
    [graph] = re.findall(r'<script id="workflow" type="application/json">(.*?)</script>', page, re.S)
    assert json.loads(graph) == {"name": "plan by planner", "steps": [
        {"id": "north", "agent": "scout", "depends_on": []},
        {"id": "south", "agent": "ranger", "depends_on": []},
        {"id": "compare", "agent": "analyst", "depends_on": ["north", "south"]},
        {"id": "synthesis", "agent": "planner", "depends_on": ["north", "south", "compare"]},
    ], "loops": []}


@pytest.mark.worker
def test_a_failed_subtask_gets_one_adapted_plan(team_a, celery_worker_process):
    agents(team_a, "Planner", "Walker", "Scout", "Pilot")
    script = {
        "planner": [
            plan(subtask("land", "walker", "Walk in"), subtask("map", "scout", "Map it")),
            plan(subtask("air", "pilot", "Fly over instead", "map")),
            {"text": "Mapped from the air."},
        ],
        "walker": [{"error": "auth"}],
        "scout": [{"text": "mapped", "latency_ms": 300}],
        "pilot": [{"text": "seen from above"}],
    }
    run = finish(orchestrate_run_start(team=team_a, planner="planner", task="Map the valley", script=script,
                                       subtask_retries=0))
    assert run.status == "succeeded", run.error
    assert run.result == "Mapped from the air."
    [adapting] = events(run, "plan_adapting")
    assert adapting.data["failed_step"] == "land"
    assert adapting.data["error"].startswith("provider_error: auth: scripted authentication failure")
    adapt_prompt = Activation.objects.get(run=run, kind="plan", context__adapt=True).input
    assert "Subtask 'land' failed after its retries: provider_error: auth" in adapt_prompt
    [adapted] = events(run, "plan_adapted")
    # "map" was still running when the planner was asked: it is kept, and the new subtask builds on it.
    assert (adapted.data["adaptation"], adapted.data["dropped"], adapted.data["kept"]) == (1, ["land"], ["map"])
    assert WorkflowRun.objects.get(run=run).adaptations == 1
    steps = {s["id"]: s for s in workflow_steps(run)}
    assert {sid: s["status"] for sid, s in steps.items()} == {
        "land": "failed", "map": "succeeded", "air": "succeeded", "synthesis": "succeeded"}
    assert steps["synthesis"]["depends_on"] == ["map", "air"]
    assert steps["map"]["attempts"] == 1  # kept, not run again
    assert Activation.objects.get(run=run, context__step="air").input == (
        "Fly over instead\n\nResults of the subtasks this one builds on:\n\n### map\nmapped")
    assert run.error == "step(s) land failed; the workflow went on without them (on_failure: continue)"


@pytest.mark.worker
def test_an_unusable_plan_fails_the_run_with_the_reason(team_a, celery_worker_process):
    agents(team_a, "Planner")
    script = {"planner": [plan(subtask("a", "ghost", "Haunt"))]}
    run = finish(orchestrate_run_start(team=team_a, planner="planner", task="x", script=script))
    assert run.status == "failed"
    assert run.error == ("the planner's plan was refused: the plan is not valid: "
                         "subtasks[0].agent: agent 'ghost' does not exist in this team")
    assert [e.data["error"] for e in events(run, "plan_invalid")] == [run.error.removeprefix(
        "the planner's plan was refused: ")]
    assert not Activation.objects.filter(run=run, kind="step").exists()
    assert events(run, "workflow_complete")[0].data["status"] == "failed"


def test_plans_are_checked_against_their_schema(team_a):
    known = {"scout", "analyst"}
    good = plan_parse('[{"id": "a", "agent": "scout", "task": "t"}]', agents=known)
    assert [s.id for s in good.subtasks] == ["a"]
    cases = [
        ("not json", r"^the plan is not JSON \(Expecting value at line 1 column 1\)$"),
        ('{"subtasks": []}', r"^the plan does not match its schema: subtasks: List should have at least 1 item"),
        ('{"subtasks": [{"id": "a", "agent": "scout"}]}', r"schema: subtasks.0.task: Field required$"),
        ('{"subtasks": [{"id": "a", "agent": "scout", "task": "t", "x": 1}]}',
         r"schema: subtasks.0.x: Extra inputs are not permitted$"),
        ('[{"id": "a", "agent": "scout", "task": "t", "depends_on": ["b"]},'
         ' {"id": "b", "agent": "scout", "task": "t", "depends_on": ["a"]}]', r"cycle: a → b → a$"),
        ('[{"id": "a", "agent": "scout", "task": "t", "depends_on": ["zzz"]}]',
         r"subtasks\[0\].depends_on: unknown step 'zzz'$"),
        ('[{"id": "synthesis", "agent": "scout", "task": "t"}]', r"may not name a subtask 'synthesis'"),
    ]
    for text, message in cases:
        with pytest.raises(PlanError, match=message):
            plan_parse(text, agents=known)
    with pytest.raises(PlanError, match=r"^subtask id\(s\) a were used by the earlier plan"):
        plan_parse('[{"id": "a", "agent": "scout", "task": "t"}]', agents=known, done={"a"})
    after = plan_parse('[{"id": "b", "agent": "scout", "task": "t", "depends_on": ["a"]}]', agents=known, done={"a"})
    assert after.subtasks[0].depends_on == ["a"]


def test_orchestrate_refuses_unknown_planner_or_synthesizer(team_a):
    agents(team_a, "Planner")
    with pytest.raises(RunError, match=r"^planner agent 'boss' does not exist in this team$"):
        orchestrate_run_start(team=team_a, planner="boss", task="x")
    with pytest.raises(RunError, match=r"^synthesizer agent 'writer' does not exist in this team$"):
        orchestrate_run_start(team=team_a, planner="planner", synthesizer="writer", task="x")
    assert Run.objects.count() == 0
