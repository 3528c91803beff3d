"""The activation's context, typed (agents_app.models.context): its JSON round trip and the row's property."""
import dataclasses

import pytest

from agents_app.models import Activation, ActivationContext

EVERY_KEY = {
    "step": "write", "attempt": 2, "round": 0, "dependencies": {"research": "notes"},
    "gate": ["start", "outputs"], "step_approval": ["vfs_write"], "step_guardrails": ["no-cards"],
    "output_schemas": {"facts": {"type": "array"}},
    "answer_output": "facts", "outputs": {"facts": [1, 2]}, "rung": "large", "tier": "large", "plan": 3,
    "adapt": True, "tool_call": "s1:tc-2", "wait": True, "notify": True, "parent_context": {"topic": "tides"},
    "worker": {"name": "report", "body": "You report."}, "outcome": {"status": "ok", "result": "done"},
    "resumes": 1, "begin_tries": 2,
}


def test_every_key_round_trips_to_a_typed_field():
    context = ActivationContext.from_json(EVERY_KEY)
    fields = {item.name for item in dataclasses.fields(ActivationContext)} - {"extra"}
    assert set(EVERY_KEY) == fields  # the test names every field
    assert {name: getattr(context, name) for name in fields} == EVERY_KEY
    assert context.extra == {}
    assert context.to_json() == EVERY_KEY


def test_unknown_keys_are_kept_and_written_back():
    stored = {"step": "write", "from_a_newer_version": {"x": 1}, "flag": False}
    context = ActivationContext.from_json(stored)
    assert (context.step, context.extra) == ("write", {"from_a_newer_version": {"x": 1}, "flag": False})
    assert context.replace(rung="large").to_json() == {**stored, "rung": "large"}


def test_defaults_are_left_out_and_falsy_values_that_mean_something_kept():
    assert ActivationContext().to_json() == {}
    assert ActivationContext.from_json(None) == ActivationContext.from_json({}) == ActivationContext()
    # Left out at their defaults: nothing reads them otherwise.
    assert ActivationContext(tier="", gate=[], wait=False, resumes=0, begin_tries=0, plan=0).to_json() == {}
    # Kept though falsy: a loop's round 0, a step's empty outputs, a delegation's empty context.
    assert ActivationContext(round=0, attempt=0, outputs={}, dependencies={}, parent_context="").to_json() == {
        "round": 0, "attempt": 0, "outputs": {}, "dependencies": {}, "parent_context": ""}
    assert ActivationContext(begin_tries=2).replace(begin_tries=0).to_json() == {}


def test_it_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ActivationContext().step = "x"


def test_the_rows_property_reads_and_writes_the_same_json():
    row = Activation(context={"tool_call": "s:tc-1", "wait": True, "old_key": 7})
    assert (row.ctx.tool_call, row.ctx.wait, row.ctx.notify) == ("s:tc-1", True, False)
    row.ctx = row.ctx.replace(outcome={"status": "ok"})
    assert row.context == {"tool_call": "s:tc-1", "wait": True, "old_key": 7, "outcome": {"status": "ok"}}
