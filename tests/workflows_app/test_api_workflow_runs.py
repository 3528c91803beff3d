"""POST /api/workflows/{slug}/runs and the steps in GET /api/runs/{id}."""

import pytest

from workflows_app.kinds import WORKFLOW
from agents_app.models import Run
from tests.runs import agent, define, finish
from workflows_app.models import WorkflowRun

pytestmark = [pytest.mark.django_db(transaction=True)]

FLOW = """---
name: Review
inputs: [topic]
steps:
- id: draft
  agent: writer
  prompt: "Draft {topic}"
  outputs: [text]
- id: review
  agent: reviewer
  depends_on: [draft]
  prompt: "Review {draft.text}"
  outputs: [verdict]
---
"""


def setup(team):
    agent(team, "Writer")
    agent(team, "Reviewer")
    define(team, WORKFLOW, FLOW)


@pytest.mark.worker
def test_an_operator_starts_a_workflow_and_reads_its_steps(team_a, api_for, celery_worker_process):
    setup(team_a)
    operator = api_for(team_a, "operator")
    script = {"writer": [{"text": "a draft", "usage": {"prompt_tokens": 7, "completion_tokens": 2}}],
              "reviewer": [{"text": "approve"}]}
    response = operator.post("/api/workflows/review/runs", {"inputs": {"topic": "tides"}, "script": script,
                                                            "limits": {"max_concurrency": 4}})
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["workflow"], body["agent"], body["input"], body["limits"]["max_concurrency"]) == (
        "review", "", "topic: tides", 4)
    assert [(s["id"], s["status"], s["attempts"]) for s in body["steps"]] == [
        ("draft", "running", 1), ("review", "pending", 0)]
    finish(Run.objects.get(pk=body["id"]))

    detail = api_for(team_a, "viewer").get(f"/api/runs/{body['id']}").json()
    assert (detail["status"], detail["result"]) == ("succeeded", "approve")
    steps = {s["id"]: s for s in detail["steps"]}
    assert {sid: (s["status"], s["attempts"], s["outputs"], s["depends_on"]) for sid, s in steps.items()} == {
        "draft": ("succeeded", 1, {"text": "a draft"}, []), "review": ("succeeded", 1, {"verdict": "approve"},
                                                                       ["draft"])}
    assert (steps["draft"]["prompt_tokens"], steps["draft"]["completion_tokens"]) == (7, 2)
    assert steps["review"]["started_at"] >= steps["draft"]["finished_at"]
    assert WorkflowRun.objects.get(run_id=body["id"]).trigger == "manual"


def test_refusals_are_4xx_and_start_nothing(team_a, team_b, api_for):
    setup(team_a)
    setup(team_b)
    operator, viewer = api_for(team_a, "operator"), api_for(team_a, "viewer")
    response = operator.post("/api/workflows/review/runs", {"inputs": {}})
    assert response.status_code == 422
    assert [(e["loc"], e["msg"]) for e in response.json()["detail"]] == [
        (["body", "inputs"], "missing input(s): topic")]
    response = operator.post("/api/workflows/review/runs", {"inputs": {"topic": "x", "colour": "red"}})
    assert response.json()["detail"][0]["msg"] == ("unknown input(s): colour (the workflow declares: topic)")
    response = operator.post("/api/workflows/review/runs", {"inputs": {"topic": "x"}, "provider": "elsewhere"})
    assert response.json()["detail"][0]["msg"] == "no model provider 'elsewhere' in team alpha"
    for payload in [{"inputs": {"topic": 3}}, {"inputs": {"topic": "x"}, "extra": 1},
                    {"inputs": {"topic": "x"}, "limits": {"max_depth": -1}},
                    {"inputs": {"topic": "x" * 200_001}}]:
        assert operator.post("/api/workflows/review/runs", payload).status_code == 422, payload
    assert operator.post("/api/workflows/nope/runs", {"inputs": {}}).status_code == 404
    assert viewer.post("/api/workflows/review/runs", {"inputs": {"topic": "x"}}).status_code == 403
    # Team B's workflow of the same slug is not reachable with team A's token, nor team A's run with B's.
    assert Run.objects.count() == 0 and WorkflowRun.objects.count() == 0


def test_an_agent_runs_detail_has_no_steps(team_a, api_for):
    agent(team_a, "Lead")
    run = Run.objects.create(team=team_a, agent="lead", input="x")
    assert api_for(team_a, "viewer").get(f"/api/runs/{run.id}").json()["steps"] is None
