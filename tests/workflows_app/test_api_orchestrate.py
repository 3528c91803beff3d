"""POST /api/orchestrate: a planner's run over REST, refusals as 4xx that change nothing."""

import json
import time

import pytest

from agents_app.kinds import AGENT
from mas_core.definitions.services import definition_parse, definition_save
from agents_app.models import Run
from workflows_app.models import WorkflowRun

pytestmark = [pytest.mark.django_db(transaction=True)]


def agents(team, *names):
    for name in names:
        text = f"---\nname: {name}\n---\n\nYou work.\n"
        definition_save(kind=AGENT, team=team, parsed=definition_parse(kind=AGENT, team=team, text=text))


PLAN = {"subtasks": [{"id": "look", "agent": "scout", "task": "Look around"}]}


@pytest.mark.worker
def test_an_operator_starts_an_orchestrated_run_and_reads_its_steps(team_a, api_for, celery_worker_process):
    agents(team_a, "Planner", "Scout")
    client = api_for(team_a, "operator")
    script = {"planner": [{"text": json.dumps(PLAN)}, {"text": "All seen."}], "scout": [{"text": "trees"}]}
    response = client.post("/api/orchestrate", {"planner": "planner", "task": "Survey", "script": script,
                                                "budget": {"max_cost_usd": "5"}})
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["agent"], body["workflow"], body["input"], body["budget"]) == ("planner", "", "Survey",
                                                                                {"max_cost_usd": "5"})
    deadline = time.monotonic() + 60
    while Run.objects.get(pk=body["id"]).status not in {"succeeded", "failed"} and time.monotonic() < deadline:
        time.sleep(0.1)
    run = Run.objects.get(pk=body["id"])
    assert (run.status, run.result) == ("succeeded", "All seen.")
    flow = WorkflowRun.objects.get(run=run)
    assert (flow.mode, flow.planner, flow.trigger) == ("orchestrate", "planner", "manual")
    assert [step["id"] for step in flow.spec["steps"]] == ["look", "synthesis"]


def test_refusals_name_the_field_and_start_nothing(team_a, team_b, api_for):
    agents(team_a, "Planner")
    agents(team_b, "Boss")
    operator, viewer = api_for(team_a, "operator"), api_for(team_a, "viewer")
    cases = [
        ({"planner": "boss", "task": "x"}, "planner", "planner agent 'boss' does not exist in this team"),
        ({"planner": "planner", "task": "x", "synthesizer": "nobody"}, "synthesizer",
         "synthesizer agent 'nobody' does not exist in this team"),
    ]
    for payload, field, message in cases:
        response = operator.post("/api/orchestrate", payload)
        assert response.status_code == 422
        assert [(e["loc"], e["msg"]) for e in response.json()["detail"]] == [(["body", field], message)]
    for payload in [{"planner": "planner"}, {"planner": "planner", "task": ""},
                    {"planner": "planner", "task": "x", "max_adaptations": 9},
                    {"planner": "planner", "task": "x", "extra": 1},
                    {"planner": "planner", "task": "x", "script": {"planner": [{"bogus": 1}]}}]:
        assert operator.post("/api/orchestrate", payload).status_code == 422, payload
    assert viewer.post("/api/orchestrate", {"planner": "planner", "task": "x"}).status_code == 403
    assert api_for(team_a).__class__(None).post("/api/orchestrate", {"planner": "planner", "task": "x"}).status_code == 401
    assert Run.objects.count() == 0 and WorkflowRun.objects.count() == 0
