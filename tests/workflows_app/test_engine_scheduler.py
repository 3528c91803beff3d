"""The workflow engine as plain Python: readiness, prompts, outputs, retries, stop vs continue, stats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workflows_app.kinds import WORKFLOW
from mas_core.definitions.markdown import parse_definition
from tests.listing import markdown_files
from workflows_app.engine.dag import PLACEHOLDER_RE
from workflows_app.engine.scheduler import (
    Engine,
    Failure,
    MissingOutput,
    Stats,
    WorkflowError,
)
from workflows_app.specs import WorkflowSpec
from workflows_app.templates import templates_folder


def spec(steps, inputs=("topic",), on_failure="stop"):
    return WorkflowSpec.model_validate(
        {"name": "Pipeline", "inputs": list(inputs), "on_failure": on_failure, "steps": steps}
    )


def engine_for(steps, *, inputs=None, on_failure="stop", backoff=0.0, input_names=("topic",)):
    workflow = spec(steps, inputs=input_names, on_failure=on_failure)
    return Engine(workflow.steps, inputs=inputs or {"topic": "owls"}, on_failure=workflow.on_failure, backoff=backoff)


FAN = [
    {"id": "research", "agent": "researcher", "prompt": "Research {topic}", "outputs": ["findings"]},
    {"id": "review_a", "agent": "reviewer", "prompt": "A: {research.findings}", "depends_on": ["research"], "outputs": ["notes"]},
    {"id": "review_b", "agent": "reviewer", "prompt": "B: {research.findings}", "depends_on": ["research"], "outputs": ["notes"]},
    {
        "id": "synth",
        "agent": "writer",
        "prompt": "Merge {review_a.notes} and {review_b.notes} on {input.topic}",
        "depends_on": ["review_a", "review_b"],
        "outputs": ["report"],
    },
]


def test_independent_steps_are_ready_together_once_their_dependency_is_done():
    engine = engine_for(FAN)
    assert engine.ready() == ["research"]
    assert engine.start("research") == "Research owls"
    assert engine.ready() == []
    assert engine.succeed("research", final_answer="owls hoot", tokens=10, cost=0.01) is None
    assert engine.ready() == ["review_a", "review_b"]
    assert engine.start("review_a") == "A: owls hoot"
    assert engine.start("review_b") == "B: owls hoot"
    assert engine.running == ["review_a", "review_b"]
    engine.succeed("review_a", set_outputs={"notes": "good"})
    assert engine.ready() == []
    engine.succeed("review_b", set_outputs={"notes": "fine"})
    assert engine.ready() == ["synth"]
    assert engine.start("synth") == "Merge good and fine on owls"
    assert engine.outcome() == "running"
    engine.succeed("synth", final_answer="report text", tokens=5, cost=0.002)
    assert engine.finished
    assert engine.outcome() == "succeeded"
    assert engine.states["synth"].outputs == {"report": "report text"}
    assert engine.stats(now=12.5) == Stats(steps_total=4, succeeded=4, failed=0, skipped=0, duration=12.5, tokens=15, cost=0.012)


def test_set_output_wins_over_the_final_answer_and_undeclared_outputs_are_dropped():
    step = spec([{"id": "s", "agent": "a", "outputs": ["x"]}]).steps[0]
    assert Engine.collect_outputs(step, set_outputs={"x": "set", "y": "extra"}, final_answer="final") == {"x": "set"}


def test_the_final_answer_is_not_used_when_several_outputs_are_declared():
    step = spec([{"id": "s", "agent": "a", "outputs": ["x", "y"]}]).steps[0]
    with pytest.raises(MissingOutput) as info:
        Engine.collect_outputs(step, set_outputs={"x": "1"}, final_answer="final")
    assert str(info.value) == (
        "step 's' did not produce declared output(s) 'y' (call set_output, or declare a single output to use the final answer)"
    )


def test_a_missing_declared_output_fails_the_step_with_a_clear_message_and_stops_the_run():
    engine = engine_for(FAN)
    engine.start("research")
    decision = engine.succeed("research", final_answer="", set_outputs={})
    message = "step 'research' did not produce declared output(s) 'findings' (call set_output, or declare a single output to use the final answer)"
    assert decision == Failure(retry=False, attempt=1, delay=0.0, tier=0, error=message)
    assert engine.states["research"].status == "failed"
    assert engine.states["research"].outputs == {}
    assert engine.stopped == f"step 'research' failed: {message}"
    assert [engine.states[s].status for s in ("review_a", "review_b", "synth")] == ["skipped"] * 3
    assert engine.ready() == []
    assert engine.outcome() == "failed"
    assert engine.stats(now=1.0) == Stats(steps_total=4, succeeded=0, failed=1, skipped=3, duration=1.0, tokens=0, cost=0.0)


def test_retries_back_off_exponentially_and_climb_the_escalation_ladder():
    steps = [{"id": "flaky", "agent": "a", "max_retries": 3, "outputs": ["out"]}]
    engine = engine_for(steps, input_names=(), backoff=2.0)
    engine.start("flaky")
    assert engine.fail("flaky", error="boom", now=100.0, escalation_tiers=2, tokens=3) == Failure(
        retry=True, attempt=1, delay=2.0, tier=1, error="boom"
    )
    assert engine.states["flaky"].status == "pending"
    assert engine.states["flaky"].retry_at == 102.0
    assert engine.ready(now=101.9) == []
    assert engine.ready(now=102.0) == ["flaky"]
    engine.start("flaky")
    assert engine.fail("flaky", error="boom", now=110.0, escalation_tiers=2) == Failure(
        retry=True, attempt=2, delay=4.0, tier=2, error="boom"
    )
    engine.start("flaky")
    # the ladder has two tiers: the third retry stays on the last one
    assert engine.fail("flaky", error="boom", now=120.0, escalation_tiers=2) == Failure(
        retry=True, attempt=3, delay=8.0, tier=2, error="boom"
    )
    engine.start("flaky")
    engine.succeed("flaky", final_answer="done", tokens=4)
    assert engine.states["flaky"].attempts == 4
    assert engine.states["flaky"].error == ""
    assert engine.outcome() == "succeeded"
    assert engine.stats(now=0).tokens == 7


def test_retries_are_exhausted_then_the_step_fails():
    engine = engine_for([{"id": "s", "agent": "a", "max_retries": 1}], input_names=(), backoff=0.5)
    engine.start("s")
    assert engine.fail("s", error="e1").delay == 0.5
    engine.start("s")
    assert engine.fail("s", error="e2") == Failure(retry=False, attempt=2, delay=0.0, tier=0, error="e2")
    assert engine.states["s"].status == "failed"
    assert engine.outcome() == "failed"


def test_continue_passes_partial_results_downstream_marked_as_partial():
    engine = engine_for(FAN, on_failure="continue")
    engine.start("research")
    engine.succeed("research", final_answer="owls hoot")
    engine.start("review_a")
    engine.start("review_b")
    engine.fail("review_a", error="model down")
    assert engine.stopped == ""
    engine.succeed("review_b", final_answer="fine")
    assert engine.ready() == ["synth"]
    assert engine.start("synth") == "Merge [partial: step 'review_a' failed, output 'notes' missing] and fine on owls"
    assert engine.states["synth"].partial is True
    engine.succeed("synth", final_answer="half a report")
    assert engine.outcome() == "partial"
    assert engine.results() == {
        "research": {"status": "succeeded", "outputs": {"findings": "owls hoot"}, "partial": False},
        "review_a": {"status": "failed", "outputs": {}, "partial": True},
        "review_b": {"status": "succeeded", "outputs": {"notes": "fine"}, "partial": False},
        "synth": {"status": "succeeded", "outputs": {"report": "half a report"}, "partial": True},
    }


def test_a_step_level_policy_overrides_the_workflow_policy():
    steps = [dict(s) for s in FAN]
    steps[1]["on_failure"] = "stop"
    engine = engine_for(steps, on_failure="continue")
    engine.start("research")
    engine.succeed("research", final_answer="x")
    engine.start("review_a")
    engine.start("review_b")
    engine.fail("review_a", error="bad")
    assert engine.stopped == "step 'review_a' failed: bad"
    assert engine.states["synth"].status == "skipped"
    # a step already running may still finish; nothing new starts
    engine.succeed("review_b", final_answer="ok")
    assert engine.ready() == []
    assert engine.outcome() == "failed"


def test_stopping_for_the_budget_skips_pending_steps_and_forbids_retries():
    engine = engine_for([{"id": "a", "agent": "x", "max_retries": 2}, {"id": "b", "agent": "x", "depends_on": ["a"]}], input_names=())
    engine.start("a")
    assert engine.stop("budget exceeded") == ["b"]
    assert engine.fail("a", error="cut off").retry is False
    assert engine.stopped == "budget exceeded"
    assert engine.outcome() == "failed"


def test_state_round_trips_through_json_so_finished_steps_are_not_rerun():
    engine = engine_for(FAN)
    engine.start("research")
    engine.succeed("research", final_answer="owls hoot", tokens=9)
    engine.start("review_a")
    data = json.loads(json.dumps(engine.to_dict()))
    workflow = spec(FAN)
    restored = Engine.from_dict(workflow.steps, data)
    assert restored.states["research"].status == "succeeded"
    assert restored.states["research"].attempts == 1
    assert restored.running == ["review_a"]
    assert restored.ready() == ["review_b"]
    assert restored.render("synth") == (
        "Merge [partial: step 'review_a' failed, output 'notes' missing] and "
        "[partial: step 'review_b' failed, output 'notes' missing] on owls"
    )


def test_bad_transitions_and_graphs_are_refused_with_clear_errors():
    engine = engine_for(FAN)
    with pytest.raises(WorkflowError, match="step 'review_a' is pending, expected running"):
        engine.succeed("review_a", final_answer="x")
    with pytest.raises(WorkflowError, match="unknown step 'nope'"):
        engine.start("nope")
    engine.start("research")
    with pytest.raises(WorkflowError, match="step 'research' is running, expected pending"):
        engine.start("research")

    class Step:
        def __init__(self, id, depends_on):
            self.id, self.agent, self.prompt, self.depends_on, self.outputs = id, "a", "", depends_on, []
            self.max_retries, self.on_failure = 0, None

    with pytest.raises(WorkflowError, match="cycle: a → b → a"):
        Engine([Step("a", ["b"]), Step("b", ["a"])], inputs={})
    with pytest.raises(WorkflowError, match="step 'a' depends on unknown step 'zz'"):
        Engine([Step("a", ["zz"])], inputs={})


DEFS = Path(__file__).resolve().parents[2] / "defs"
# The four built-in templates (package data), then the demo team's workflows (the demo's own and its copies
# of the templates).
TEMPLATES = markdown_files(Path(templates_folder())) + markdown_files(DEFS / "workflows")
SHIPPED_AGENTS = {path.stem for path in markdown_files(DEFS / "agents")}


def test_the_four_templates_are_shipped_with_the_demo_workflow():
    assert [f"{path.parent.name}/{path.stem}" for path in TEMPLATES] == [
        "builtin_templates/chain", "builtin_templates/debate", "builtin_templates/fan-out",
        "builtin_templates/review-loop", "workflows/chain", "workflows/debate", "workflows/fan-out",
        "workflows/research-and-review", "workflows/review-loop"]
    assert SHIPPED_AGENTS == {"launch-lead", "market-analyst", "orchestrator", "researcher", "reviewer", "risk-analyst",
                              "writer"}


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_shipped_template_runs_to_completion_in_the_engine(path):
    parsed = parse_definition(WORKFLOW, path.read_text(), path=f"workflows/{path.name}", context={"known_agents": SHIPPED_AGENTS})
    workflow = parsed.spec
    engine = Engine(workflow.steps, inputs={name: f"<{name}>" for name in workflow.inputs}, on_failure=workflow.on_failure,
                    loops=workflow.loops)
    order = []
    while True:
        engine.advance_loops()  # as the service does after every transition
        if engine.finished:
            break
        ready = engine.ready()
        assert ready, f"{path.name}: no step ready while {engine.running} run"
        for step_id in ready:
            prompt = engine.start(step_id)
            assert "[partial:" not in prompt
            assert PLACEHOLDER_RE.findall(prompt) == []
            order.append(step_id)
        for step_id in ready:
            step = engine.steps[step_id]
            # A value each output's schema accepts (the review loop's verdict: approve, so one round).
            outputs = {name: step.output_schemas.get(name, {}).get("enum", [f"{step_id}.{name}"])[0]
                       for name in step.outputs}
            assert engine.succeed(step_id, set_outputs=outputs) is None
    assert sorted(order) == sorted(step.id for step in workflow.steps)
    assert [sid for level in workflow.levels() for sid in level] == order
    assert engine.outcome() == "succeeded"
