"""Bounded loops and typed step outputs in the plain-Python engine, and the parser's checks of both."""

from __future__ import annotations

import json

import pytest

from workflows_app.kinds import WORKFLOW
from mas_core.definitions.markdown import DefinitionError, parse_definition
from workflows_app.engine.loops import parse_condition
from workflows_app.engine.scheduler import FIRST_ROUND_MARK, Engine, Failure, LoopEvent, MissingOutput, Stats
from workflows_app.specs import WorkflowSpec

LOOP = {
    "name": "Loop",
    "inputs": ["brief"],
    "steps": [
        {"id": "draft", "agent": "writer", "prompt": "Brief: {brief}. Before: {draft.text}. Review: {review.notes}",
         "outputs": ["text"]},
        {"id": "review", "agent": "reviewer", "prompt": "Review {draft.text}", "depends_on": ["draft"],
         "outputs": ["notes", "verdict"], "output_schemas": {"verdict": {"enum": ["approve", "revise"]}}},
        {"id": "publish", "agent": "writer", "prompt": "Publish {draft.text}", "depends_on": ["review"],
         "outputs": ["post"]},
    ],
    "loops": [{"steps": ["draft", "review"], "until": 'review.verdict == "approve"', "max_rounds": 3}],
}


def engine_for(data=LOOP, **changes) -> Engine:
    spec = WorkflowSpec.model_validate({**data, **changes})
    return Engine(spec.steps, inputs={"brief": "owls"}, on_failure=spec.on_failure, loops=spec.loops)


def round_of(engine: Engine, text: str, verdict: str) -> tuple[str, str]:
    """Run draft then review once; returns their prompts."""
    draft = engine.start("draft")
    assert engine.succeed("draft", final_answer=text) is None
    assert engine.advance_loops() == []
    assert engine.ready() == ["review"]
    review = engine.start("review")
    assert engine.succeed("review", set_outputs={"notes": f"notes on {text}", "verdict": verdict}) is None
    return draft, review


def test_a_loop_repeats_until_its_condition_holds_and_keeps_every_rounds_outputs():
    engine = engine_for()
    assert engine.ready() == ["draft"]
    draft, review = round_of(engine, "v1", "revise")
    assert draft == f"Brief: owls. Before: {FIRST_ROUND_MARK}. Review: {FIRST_ROUND_MARK}"
    assert review == "Review v1"
    assert not engine.finished
    assert engine.ready() == []  # publish waits for the loop, not just for review's first round
    [event] = engine.advance_loops()
    assert event == LoopEvent("loop_round", 0, 2, "running", ("draft", "review"),
                              {"draft": {"text": "v1"}, "review": {"notes": "notes on v1", "verdict": "revise"}})
    assert [(s.status, s.round, s.attempts) for s in (engine.states["draft"], engine.states["review"])] == [
        ("pending", 2, 0), ("pending", 2, 0)]
    assert engine.ready() == ["draft"]

    # The next round's prompts read the latest round's outputs, the step's own included.
    draft, _ = round_of(engine, "v2", "revise")
    assert draft == "Brief: owls. Before: v1. Review: notes on v1"
    assert [e.type for e in engine.advance_loops()] == ["loop_round"]
    draft, _ = round_of(engine, "v3", "approve")
    assert draft == "Brief: owls. Before: v2. Review: notes on v2"
    [event] = engine.advance_loops()
    assert (event.type, event.round, event.status) == ("loop_complete", 3, "met")
    assert engine.ready() == ["publish"]
    assert engine.start("publish") == "Publish v3"
    engine.succeed("publish", final_answer="posted")
    assert engine.advance_loops() == []
    assert engine.finished and engine.outcome() == "succeeded"
    assert engine.states["draft"].rounds == [
        {"round": 1, "status": "succeeded", "outputs": {"text": "v1"}},
        {"round": 2, "status": "succeeded", "outputs": {"text": "v2"}},
        {"round": 3, "status": "succeeded", "outputs": {"text": "v3"}}]
    assert [r["outputs"]["verdict"] for r in engine.states["review"].rounds] == ["revise", "revise", "approve"]
    assert engine.states["publish"].rounds == [] and engine.states["publish"].round == 1
    assert engine.stats(now=0).loops == ({"loop": 0, "steps": ["draft", "review"], "rounds": 3, "status": "met"},)


def test_a_loop_stops_at_max_rounds_and_the_workflow_goes_on_with_the_last_round():
    engine = engine_for(loops=[{"steps": ["draft", "review"], "until": 'review.verdict == "approve"',
                                "max_rounds": 2}])
    round_of(engine, "v1", "revise")
    assert [e.type for e in engine.advance_loops()] == ["loop_round"]
    round_of(engine, "v2", "revise")
    [event] = engine.advance_loops()
    assert (event.type, event.round, event.status) == ("loop_complete", 2, "max_rounds")
    assert engine.start("publish") == "Publish v2"
    engine.succeed("publish", final_answer="posted")
    assert engine.outcome() == "succeeded"
    assert engine.stats(now=0).loops == (
        {"loop": 0, "steps": ["draft", "review"], "rounds": 2, "status": "max_rounds"},)


def test_without_until_a_loop_runs_max_rounds_rounds():
    engine = engine_for(loops=[{"steps": ["draft", "review"], "max_rounds": 2}])
    round_of(engine, "v1", "approve")
    assert [(e.type, e.round) for e in engine.advance_loops()] == [("loop_round", 2)]
    round_of(engine, "v2", "approve")
    assert [(e.type, e.status) for e in engine.advance_loops()] == [("loop_complete", "max_rounds")]
    assert engine.start("publish") == "Publish v2"


def test_a_failed_round_ends_its_loop_and_keeps_the_rounds_before():
    engine = engine_for()
    round_of(engine, "v1", "revise")
    engine.advance_loops()
    engine.start("draft")
    assert engine.fail("draft", error="model down") == Failure(retry=False, attempt=1, delay=0.0, tier=0,
                                                               error="model down")
    assert engine.stopped == "step 'draft' failed: model down"
    [event] = engine.advance_loops()
    assert (event.type, event.round, event.status) == ("loop_complete", 2, "failed")
    assert engine.states["draft"].rounds == [{"round": 1, "status": "succeeded", "outputs": {"text": "v1"}},
                                             {"round": 2, "status": "failed", "outputs": {}}]
    assert engine.states["review"].rounds[-1] == {"round": 2, "status": "skipped", "outputs": {}}
    assert engine.finished and engine.outcome() == "failed"
    assert engine.ready() == []


def test_retries_count_per_round():
    data = json.loads(json.dumps(LOOP))
    data["steps"][0]["max_retries"] = 1
    engine = engine_for(data)
    engine.start("draft")
    assert engine.fail("draft", error="flaky").retry is True
    engine.start("draft")
    engine.succeed("draft", final_answer="v1")
    engine.start("review")
    engine.succeed("review", set_outputs={"notes": "n", "verdict": "revise"})
    engine.advance_loops()
    engine.start("draft")  # round 2: its first attempt again, so one retry is left
    assert engine.states["draft"].attempts == 1
    assert engine.fail("draft", error="flaky").retry is True


def test_loop_state_round_trips_through_json_mid_round():
    engine = engine_for()
    round_of(engine, "v1", "revise")
    engine.advance_loops()
    engine.start("draft")
    data = json.loads(json.dumps(engine.to_dict()))
    spec = WorkflowSpec.model_validate(LOOP)
    restored = Engine.from_dict(spec.steps, data, loops=spec.loops)
    assert restored.loop_states[0].round == 2 and restored.running == ["draft"]
    restored.succeed("draft", final_answer="v2")
    restored.start("review")
    restored.succeed("review", set_outputs={"notes": "fine", "verdict": "approve"})
    assert [(e.type, e.round, e.status) for e in restored.advance_loops()] == [("loop_complete", 2, "met")]
    assert [r["outputs"]["text"] for r in restored.states["draft"].rounds] == ["v1", "v2"]


def test_step_outputs_are_checked_against_their_schemas_at_step_end():
    step = WorkflowSpec.model_validate(LOOP).steps[1]
    with pytest.raises(MissingOutput) as info:
        Engine.collect_outputs(step, set_outputs={"notes": "ok", "verdict": "maybe"}, final_answer=None)
    assert str(info.value) == ("step 'review' produced output(s) that do not match their schema: verdict:\n"
                               "- $: 'maybe' is not one of ['approve', 'revise']")
    assert Engine.collect_outputs(step, set_outputs={"notes": {"n": 1}, "verdict": "approve"},
                                  final_answer=None) == {"notes": '{"n": 1}', "verdict": "approve"}
    single = WorkflowSpec.model_validate({"name": "S", "steps": [{
        "id": "score", "agent": "a", "outputs": ["score"],
        "output_schemas": {"score": {"type": "object", "required": ["value"],
                                     "properties": {"value": {"type": "integer"}}}}}]}).steps[0]
    assert Engine.collect_outputs(single, set_outputs={}, final_answer='```json\n{"value": 3}\n```') == {
        "score": '```json\n{"value": 3}\n```'}
    with pytest.raises(MissingOutput) as info:
        Engine.collect_outputs(single, set_outputs={}, final_answer='{"value": "three"}')
    assert str(info.value) == ("step 'score' produced output(s) that do not match their schema: score:\n"
                               "- $.value: 'three' is not of type 'integer'")


def test_a_refused_output_fails_the_step_like_a_missing_one():
    engine = engine_for()
    engine.start("draft")
    engine.succeed("draft", final_answer="v1")
    engine.start("review")
    decision = engine.succeed("review", set_outputs={"notes": "n", "verdict": "maybe"})
    assert decision.retry is False and decision.error.startswith("step 'review' produced output(s) that do not")
    assert engine.states["review"].status == "failed" and engine.states["review"].outputs == {}


@pytest.mark.parametrize("text,value,met", [
    ('review.verdict == "approve"', " approve\n", True),
    ('review.verdict == "approve"', "Approve", False),
    ("review.verdict != 'revise'", "approve", True),
    ('review.notes contains "LGTM"', "all good, LGTM!", True),
    ('review.notes contains "LGTM"', "lgtm", False),
])
def test_conditions_compare_the_stripped_text(text, value, met):
    assert parse_condition(text).met(value) is met


# -- the parser ------------------------------------------------------------------------------------

AGENTS = {"writer", "reviewer"}
BASE = """---
name: Loop
steps:
- id: draft
  agent: writer
  prompt: "Draft. Feedback: {review.notes}"
  outputs: [text]
- id: middle
  agent: writer
  depends_on: [draft]
- id: review
  agent: reviewer
  depends_on: [middle]
  outputs: [notes, verdict]
%s---
"""
GOOD_LOOP = "loops:\n- {steps: [draft, middle, review], until: 'review.verdict == \"approve\"', max_rounds: 3}\n"


def parse(loops: str):
    return parse_definition(WORKFLOW, BASE % loops, path="workflows/loop.md", context={"known_agents": AGENTS})


def test_a_loop_may_feed_a_later_steps_output_back_to_an_earlier_step():
    spec = parse(GOOD_LOOP).spec
    assert [loop.model_dump() for loop in spec.loops] == [
        {"steps": ["draft", "middle", "review"], "until": 'review.verdict == "approve"', "max_rounds": 3}]
    assert spec.levels() == [["draft"], ["middle"], ["review"]]


@pytest.mark.parametrize("loops,message", [
    ("", "workflows/loop.md:6: steps[0].prompt: {review.notes}: step 'draft' does not depend on 'review'"),
    ("loops:\n- {steps: [draft, review], max_rounds: 3}\n",
     "workflows/loop.md:16: loops[0].steps: step 'middle' depends on loop step 'draft' and loop step 'review' "
     "depends on it: add 'middle' to the loop (its steps repeat together)"),
    ("loops:\n- {steps: [draft, middle, review, nope], max_rounds: 3}\n",
     "workflows/loop.md:16: loops[0].steps: unknown step 'nope'"),
    ("loops:\n- {steps: [draft, middle, review, draft], max_rounds: 3}\n",
     "workflows/loop.md:16: loops[0].steps: step 'draft' is listed twice"),
    ("loops:\n- {steps: [draft, middle, review], max_rounds: 3}\n- {steps: [review], max_rounds: 2}\n",
     "workflows/loop.md:17: loops[1].steps: step 'review' is already in loops[0]: a step repeats in one loop only"),
    ("loops:\n- {steps: [draft, middle, review], until: 'review.verdikt == \"approve\"', max_rounds: 3}\n",
     "workflows/loop.md:16: loops[0].until: step 'review' declares no output 'verdikt' (its outputs: notes, "
     "verdict)"),
    ("loops:\n- {steps: [draft, middle, review], until: 'review.verdict = approve', max_rounds: 3}\n",
     "workflows/loop.md:16: loops[0].until: cannot read 'review.verdict = approve': write <step>.<output> == "
     "\"text\" (or != \"text\", or contains \"text\")"),
    ("loops:\n- {steps: [draft, middle, review], until: '__import__(\"os\").system(\"x\")', max_rounds: 3}\n",
     "workflows/loop.md:16: loops[0].until: cannot read '__import__(\"os\").system(\"x\")': write "
     "<step>.<output> == \"text\" (or != \"text\", or contains \"text\")"),
    ("loops:\n- {steps: [draft, middle, review], until: 'other.verdict == \"x\"', max_rounds: 3}\n",
     "workflows/loop.md:16: loops[0].until: unknown step 'other'"),
    ("loops:\n- {steps: [middle, review], until: 'review.verdict == \"x\"', max_rounds: 3}\n"
     "- {steps: [draft], until: 'review.verdict == \"x\"', max_rounds: 3}\n",
     "workflows/loop.md:17: loops[1].until: step 'review' is not in this loop (its steps: draft)"),
    ("loops:\n- {steps: [draft, middle, review], max_rounds: 21}\n",
     "workflows/loop.md:16: loops.0.max_rounds: Input should be less than or equal to 20"),
    ("loops:\n- {steps: [draft, middle, review], max_rounds: 0}\n",
     "workflows/loop.md:16: loops.0.max_rounds: Input should be greater than or equal to 1"),
    ("loops:\n- {steps: [draft, middle, review]}\n", "workflows/loop.md:16: loops.0.max_rounds: required field "
                                                    "is missing"),
    ("loops:\n- {steps: [], max_rounds: 2}\n",
     "workflows/loop.md:16: loops.0.steps: List should have at least 1 item after validation, not 0"),
    ("loops:\n- {steps: [draft, middle, review], max_rounds: 2, while: x}\n",
     "workflows/loop.md:16: loops.0.while: Extra inputs are not permitted"),
])
def test_bad_loops_are_refused_naming_the_line_and_field(loops, message):
    with pytest.raises(DefinitionError) as info:
        parse(loops)
    assert str(info.value) == message


def test_cycles_are_still_refused_with_loops():
    text = (BASE % GOOD_LOOP).replace("  depends_on: [draft]\n", "  depends_on: [draft, review]\n")
    with pytest.raises(DefinitionError) as info:
        parse_definition(WORKFLOW, text, path="workflows/loop.md", context={"known_agents": AGENTS})
    assert str(info.value) == "workflows/loop.md:3: steps: cycle: middle → review → middle"


@pytest.mark.parametrize("schemas,message", [
    ("  output_schemas:\n    verdikt: {enum: [approve]}\n",
     "workflows/loop.md:15: steps.2.output_schemas: 'verdikt' is not a declared output (outputs: notes, verdict)"),
    ("  output_schemas:\n    verdict: {type: strng}\n",
     "workflows/loop.md:15: steps.2.output_schemas: verdict: is not a valid JSON Schema: 'strng' is not valid "
     "under any of the given schemas (at $.type)"),
    ("  output_schemas:\n    verdict: {$ref: 'https://example.com/s.json'}\n",
     "workflows/loop.md:15: steps.2.output_schemas: verdict: $ref 'https://example.com/s.json' points outside the "
     "schema: only local references (#/…) are resolved"),
])
def test_bad_output_schemas_are_refused_naming_the_step_and_output(schemas, message):
    with pytest.raises(DefinitionError) as info:
        parse(schemas)
    assert str(info.value) == message


def test_stats_of_a_workflow_without_loops_have_none():
    engine = Engine(WorkflowSpec.model_validate({"name": "One", "steps": [{"id": "a", "agent": "x"}]}).steps,
                    inputs={})
    engine.start("a")
    engine.succeed("a", final_answer="done")
    assert engine.advance_loops() == []
    assert engine.stats(now=1.0) == Stats(steps_total=1, succeeded=1, failed=0, skipped=0, duration=1.0, tokens=0,
                                          cost=0.0)


def test_the_manuals_examples_are_a_valid_step_and_loop():
    from tests.manual import example

    step = example("docs/concepts/workflows.md", language="yaml", heading="Typed step outputs").text
    loops = example("docs/concepts/workflows.md", language="yaml", heading="Loops", containing="loops:").text
    draft = "- id: draft\n  agent: writer\n  prompt: 'Again, after {review.review_report}'\n  outputs: [draft]\n"
    review = step.replace("  agent: reviewer\n", "  agent: reviewer\n  depends_on: [draft]\n")
    parsed = parse_definition(WORKFLOW, f"---\nname: Readme\nsteps:\n{draft}{review}{loops}---\n",
                              path="workflows/readme.md", context={"known_agents": AGENTS})
    assert [loop.model_dump() for loop in parsed.spec.loops] == [
        {"steps": ["draft", "review"], "until": 'review.verdict == "approve"', "max_rounds": 3}]
    assert parsed.spec.steps[1].output_schemas == {"verdict": {"enum": ["approve", "revise"]}}
