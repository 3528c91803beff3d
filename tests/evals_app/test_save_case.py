"""Save as eval case: what a finished run makes (an agent's run, a workflow's), and the refusals, which save nothing."""

from __future__ import annotations

import pytest

from agents_app.models import Event, Run
from evals_app.kinds import EVAL
from evals_app.models import EvalDataset
from tests.evals_app.test_eval_runs import DATASET
from tests.runs import agent, define

pytestmark = pytest.mark.django_db


def response(run: Run, seq: int, agent_slug: str, text: str) -> None:
    Event.objects.create(run=run, seq=seq, type="llm_response", agent=agent_slug,
                         data={"text": text, "usage": {"prompt_tokens": 3, "completion_tokens": 2}})


def test_a_workflow_run_becomes_a_case_with_its_inputs(team_a, api_for):
    from workflows_app.kinds import WORKFLOW

    agent(team_a, "Researcher")
    agent(team_a, "Writer")
    define(team_a, WORKFLOW, "---\nname: Pipeline\ninputs: [topic, depth]\nsteps:\n- id: research\n"
                             "  agent: researcher\n  prompt: Research {topic}.\n- id: write\n  agent: writer\n"
                             "  prompt: Write.\n  depends_on: [research]\n---\n")
    run = Run.objects.create(team=team_a, workflow="pipeline", status="succeeded", result="The report.")
    Event.objects.create(run=run, seq=1, type="workflow_start", data={"inputs": {"topic": "tides", "depth": 2}})
    response(run, 2, "researcher", "Findings.")
    response(run, 3, "writer", "The report.")
    saved = api_for(team_a, "editor").post(f"/api/runs/{run.pk}/eval-case", {"dataset": "pipeline-cases"})
    assert saved.status_code == 201, saved.content
    body = saved.json()
    assert (body["slug"], body["workflow"], body.get("agent"), body["version"]) == ("pipeline-cases", "pipeline",
                                                                                    None, 1)
    [case] = EvalDataset.objects.get(team=team_a, slug="pipeline-cases").spec["cases"]
    assert case == {
        "id": f"run-{str(run.pk)[:8]}", "inputs": {"topic": "tides", "depth": "2"},
        "script": {"researcher": [{"text": "Findings.", "usage": {"prompt_tokens": 3, "completion_tokens": 2}}],
                   "writer": [{"text": "The report.", "usage": {"prompt_tokens": 3, "completion_tokens": 2}}]},
        "reference": "The report.",
        "checks": [{"type": "status", "equals": "succeeded"}, {"type": "exact"}],
    }


def test_refusals_name_the_problem_and_save_nothing(team_a, team_b, api_for):
    agent(team_a, "Writer")
    define(team_a, EVAL, DATASET)  # tests the writer
    editor = api_for(team_a, "editor")
    working = Run.objects.create(team=team_a, agent="writer", status="running", input="t")
    reviewer_run = Run.objects.create(team=team_a, agent="reviewer", status="succeeded", input="t", result="ok")
    workflow_run = Run.objects.create(team=team_a, workflow="pipeline", status="failed", input="t")
    theirs = Run.objects.create(team=team_b, agent="writer", status="succeeded", input="t", result="ok")
    refusals = [
        # docs/concepts/evals.md: 409 while a run is queued or running (a conflict with its state), 422 invalid with the field.
        (working, "writer-evals", 409, {"detail": "the run is still running: save it as a case once it has finished"}),
        (reviewer_run, "writer-evals", 422, {"detail": [{
            "loc": ["body", "dataset"], "type": "eval_refused",
            "msg": "dataset 'writer-evals' tests agent 'writer'; this run's agent is reviewer"}]}),
        (workflow_run, "writer-evals", 422, {"detail": [{
            "loc": ["body", "dataset"], "type": "eval_refused",
            "msg": "dataset 'writer-evals' tests agent 'writer'; this run's agent is none (a workflow run)"}]}),
        (theirs, "writer-evals", 404, None),
    ]
    for run, dataset, status, body in refusals:
        answer = editor.post(f"/api/runs/{run.pk}/eval-case", {"dataset": dataset})
        assert answer.status_code == status, (run.agent, answer.content)
        if body is not None:
            assert answer.json() == body
    assert editor.post(f"/api/runs/{reviewer_run.pk}/eval-case", {"dataset": ""}).status_code == 422
    for role in ("viewer", "operator"):  # only those who may edit datasets
        assert api_for(team_a, role).post(f"/api/runs/{reviewer_run.pk}/eval-case",
                                          {"dataset": "x"}).status_code == 403
    assert list(EvalDataset.objects.values_list("team__slug", "slug", "version")) == [("alpha", "writer-evals", 1)]
