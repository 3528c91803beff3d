"""The shipped review-loop template on a real worker: rounds until the reviewer approves, or max_rounds.

The writer's scripted turns ``expect`` the previous round's draft and review in their prompt, so a run
only succeeds when each round's outputs reached the next one.
"""

from __future__ import annotations

import pytest

from workflows_app.kinds import WORKFLOW
from agents_app.models import Activation, Session
from tests.runs import agent, define, events, finish
from workflows_app.models import WorkflowRun
from workflows_app.templates import workflow_template

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

BRIEF = "A note on tides"


def setup(team):
    agent(team, "Writer")
    agent(team, "Reviewer")
    define(team, WORKFLOW, workflow_template("review-loop").markdown)


def review(number: int, report: str, verdict: str) -> list[dict]:
    """The reviewer's two turns of a round: both outputs in one turn, then its answer."""
    return [{"expect": f"Draft:\nDraft {number}\n", "tool_calls": [
                {"name": "set_output", "arguments": {"name": "review_report", "value": report}},
                {"name": "set_output", "arguments": {"name": "verdict", "value": verdict}}]},
            {"text": "Reviewed."}]


def writer(verdicts: list[str], reports: list[str]) -> list[dict]:
    turns = [{"expect": [f"Brief:\n{BRIEF}", "Your previous draft:\n[none yet: this is the first round]",
                         "Its review (verdict: [none yet: this is the first round]):"], "text": "Draft 1"}]
    for number in range(2, len(verdicts) + 1):
        turns.append({"expect": [f"Your previous draft:\nDraft {number - 1}\n",
                                 f"Its review (verdict: {verdicts[number - 2]}):\n{reports[number - 2]}\n",
                                 f"### review (round {number - 1})", f"**review_report**:\n{reports[number - 2]}"],
                      "text": f"Draft {number}"})
    turns.append({"expect": [f"the last verdict was {verdicts[-1]}.", f"Your last draft:\nDraft {len(verdicts)}\n"],
                  "text": f"Final: Draft {len(verdicts)}, polished"})
    return turns


def run_loop(team, verdicts: list[str]):
    from workflows_app.services import workflow_run_start

    reports = [f"Comments of round {n}." for n in range(1, len(verdicts) + 1)]
    script = {"writer": writer(verdicts, reports),
              "reviewer": [turn for n, (r, v) in enumerate(zip(reports, verdicts), 1) for turn in review(n, r, v)]}
    return finish(workflow_run_start(team=team, workflow="review-loop", inputs={"brief": BRIEF, "audience": "kids"},
                                     script=script), timeout=120)


def test_the_review_loop_runs_three_rounds_until_approved_keeping_every_round(team_a, api_for,
                                                                             celery_worker_process):
    setup(team_a)
    run = run_loop(team_a, ["revise", "revise", "approve"])

    assert (run.status, run.error, run.result) == ("succeeded", "", "Final: Draft 3, polished")
    steps = {s["id"]: s for s in api_for(team_a, "viewer").get(f"/api/runs/{run.id}").json()["steps"]}
    assert {sid: (s["status"], s["round"], s["attempts"]) for sid, s in steps.items()} == {
        "draft": ("succeeded", 3, 1), "review": ("succeeded", 3, 1), "final": ("succeeded", 1, 1)}
    assert steps["draft"]["rounds"] == [{"round": n, "status": "succeeded", "outputs": {"draft": f"Draft {n}"}}
                                        for n in (1, 2, 3)]
    assert steps["review"]["rounds"] == [
        {"round": n, "status": "succeeded", "outputs": {"review_report": f"Comments of round {n}.", "verdict": v}}
        for n, v in ((1, "revise"), (2, "revise"), (3, "approve"))]
    assert (steps["draft"]["outputs"], steps["final"]["rounds"]) == ({"draft": "Draft 3"}, [])

    starts = [(e.data["step"], e.data["round"]) for e in events(run, "step_start")]
    assert starts == [("draft", 1), ("review", 1), ("draft", 2), ("review", 2), ("draft", 3), ("review", 3),
                      ("final", 1)]
    assert [(e.data["step"], e.data["round"]) for e in events(run, "step_complete")] == starts
    assert [(e.data["round"], e.data["previous"]["review"]["verdict"]) for e in events(run, "loop_round")] == [
        (2, "revise"), (3, "revise")]
    [done] = events(run, "loop_complete")
    assert done.data == {"loop": 0, "steps": ["draft", "review"], "until": 'review.verdict == "approve"',
                         "max_rounds": 3, "rounds": 3, "status": "met",
                         "outputs": {"draft": {"draft": "Draft 3"},
                                     "review": {"review_report": "Comments of round 3.", "verdict": "approve"}}}
    [complete] = events(run, "workflow_complete")
    assert {k: complete.data[k] for k in ("status", "steps_total", "succeeded", "rounds", "loops")} == {
        "status": "succeeded", "steps_total": 3, "succeeded": 3, "rounds": 3,
        "loops": [{"loop": 0, "steps": ["draft", "review"], "rounds": 3, "status": "met"}]}
    # One session per step and round, each activation knowing its round.
    rounds = sorted((a.context["step"], a.context["round"]) for a in Activation.objects.filter(run=run))
    assert rounds == sorted(starts)
    assert Session.objects.filter(run=run).count() == 7
    state = WorkflowRun.objects.get(run=run).state
    assert state["loops"] == [{"round": 3, "status": "met"}]


def test_the_review_loop_stops_at_max_rounds_and_finishes_with_the_last_draft(team_a, celery_worker_process):
    setup(team_a)
    run = run_loop(team_a, ["revise", "revise", "revise"])

    assert (run.status, run.result) == ("succeeded", "Final: Draft 3, polished")
    [done] = events(run, "loop_complete")
    assert (done.data["rounds"], done.data["status"]) == (3, "max_rounds")
    assert [e.data["round"] for e in events(run, "loop_round")] == [2, 3]  # no fourth round
    assert [e.data["round"] for e in events(run, "step_start") if e.data["step"] == "draft"] == [1, 2, 3]
    state = WorkflowRun.objects.get(run=run).state
    assert [r["outputs"]["verdict"] for r in state["steps"]["review"]["rounds"]] == ["revise"] * 3
    assert events(run, "workflow_complete")[0].data["loops"] == [
        {"loop": 0, "steps": ["draft", "review"], "rounds": 3, "status": "max_rounds"}]
    assert Session.objects.filter(run=run, agent="writer").count() == 4
