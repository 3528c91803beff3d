"""Typed outputs in the plain-Python session loop: one corrective turn, then validation_failed — across a crash."""

import time
import asyncio

import pytest

from agents_app.kernel.loop import SessionConfig, SessionState, ToolResult, run_session
from mas_core.outputs import INVALID_OUTPUT, answer_check, correction, schema_problem, value_errors
from mas_core.llm_types import ToolSchema
from tests.agents_app.kernel.test_loop import Model, Store, Tools, calls, start, text

SCORE = {"type": "object", "required": ["score"], "properties": {"score": {"type": "integer", "minimum": 0}},
         "additionalProperties": False}
ERRORS = "- $.score: 'high' is not of type 'integer'"


def run(state, model, *, check=answer_check(schema=SCORE), store=None, tools=None):
    store, tools = store or Store(), tools or Tools()
    outcome = asyncio.run(run_session(
        state=state, model=model, tools=[ToolSchema("set_output", "set", {"type": "object"})], call_tool=tools,
        store=store, config=SessionConfig(agent="a", output_check=check),
    ))
    return outcome, store, tools


def test_an_answer_that_does_not_match_gets_one_corrective_turn_naming_the_errors():
    model = Model([text('{"score": "high"}'), text('{"score": 7}')])
    outcome, store, _ = run(start(), model)
    assert (outcome.status, outcome.result, outcome.failure) == ("ok", '{"score": 7}', None)
    sent = model.requests[1].messages
    assert [m.role for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[-1].content == correction(ERRORS) == (
        "Your answer does not match the output schema it must follow:\n"
        "- $.score: 'high' is not of type 'integer'\n\n"
        "Answer again with only the corrected answer. This is your one chance to correct it: "
        "an answer that still does not match fails the task.")
    assert [data for kind, data in store.events if kind == "output_invalid"] == [
        {"errors": ERRORS, "correction": 1, "where": "answer"}]
    assert outcome.meta.steps == 2


def test_an_answer_still_wrong_after_the_corrective_turn_fails_as_validation_failed_and_is_kept():
    model = Model([text("a score of high"), text('{"score": -1, "note": "x"}'), text("never asked")])
    outcome, store, _ = run(start(), model)
    assert outcome.status == "failed"
    assert (outcome.failure.kind, outcome.failure.suggested_retry) == ("validation_failed", False)
    assert outcome.failure.message == (
        "the output still does not match its schema after 1 corrective turn:\n"
        "- $: Additional properties are not allowed ('note' was unexpected)\n"
        "- $.score: -1 is less than the minimum of 0")
    assert outcome.result == '{"score": -1, "note": "x"}'  # the refused answer is the partial result
    assert len(model.requests) == 2
    assert [data["correction"] for kind, data in store.events if kind == "output_invalid"] == [1]
    assert store.checkpoints[-1]["corrections"] == 2 and store.checkpoints[-1]["rejected"] == outcome.result


def test_a_text_schema_takes_the_answer_as_text():
    check = answer_check(schema={"enum": ["approve", "revise"]})
    outcome, _, _ = run(start(), Model([text("approve\n")]), check=check)
    assert (outcome.status, outcome.result) == ("ok", "approve\n")
    outcome, _, _ = run(start(), Model([text('"approve"'), text("Approve"), text("x")]), check=check)
    assert outcome.failure.message == ("the output still does not match its schema after 1 corrective turn:\n"
                                       "- $: 'Approve' is not one of ['approve', 'revise']")


class Crash(Exception):
    pass


class CrashingStore(Store):
    """Raises at the first checkpoint whose last message is the corrective turn: before writing it
    (``before=True``, the worker died after recording the answer) or after (died before the next call)."""

    def __init__(self, *, before: bool):
        super().__init__()
        self.before, self.crashed = before, False

    async def checkpoint(self, state, *, before_tools=False):
        correcting = state.messages[-1].role == "user" and state.corrections == 1
        if correcting and not self.crashed and self.before:
            self.crashed = True
            raise Crash()
        await super().checkpoint(state, before_tools=before_tools)
        if correcting and not self.crashed:
            self.crashed = True
            raise Crash()


@pytest.mark.parametrize("before", [True, False], ids=["crash-before-the-correction", "crash-after-it"])
def test_the_corrective_turn_survives_a_crash_and_is_given_once(before):
    store = CrashingStore(before=before)
    first = Model([text('{"score": "high"}')])
    with pytest.raises(Crash):
        run(start(), first, store=store)
    saved = store.checkpoints[-1]
    assert saved["messages"][-1]["role"] == ("assistant" if before else "user")

    # A new worker resumes from the last checkpoint: the model is asked for the corrected answer,
    # never again for the refused one, and the corrective turn already given is counted.
    resumed = Model([text('{"score": "still high"}'), text("never asked")])
    outcome, store, _ = run(SessionState.from_dict(saved), resumed)
    assert len(resumed.requests) == 1
    assert resumed.requests[0].messages[-1].content == correction(ERRORS)
    assert [m.role for m in resumed.requests[0].messages] == ["system", "user", "assistant", "user"]
    assert (outcome.failure.kind, outcome.result) == ("validation_failed", '{"score": "still high"}')
    assert [kind for kind, _ in store.events].count("output_invalid") == (1 if before else 0)


def refused(value):
    return ToolResult(ok=False, error_kind=INVALID_OUTPUT, rejected=value,
                      content=f"Output verdict was not set: {value!r} is not one of ['approve', 'revise']")


class Outputs(Tools):
    """set_output answering from a list of results, one per call."""

    def __init__(self, results):
        super().__init__()
        self.queue = list(results)

    async def __call__(self, call):
        self.calls.append((call.name, call.arguments))
        return self.queue.pop(0)


def set_verdict(value):
    return calls(("set_output", {"name": "verdict", "value": value}))


def test_a_refused_set_output_is_the_corrective_turn_and_a_second_refusal_fails_the_session():
    tools = Outputs([refused("maybe"), refused("perhaps")])
    model = Model([set_verdict("maybe"), set_verdict("perhaps"), text("never asked")])
    outcome, _, tools = run(start(), model, check=None, tools=tools)
    assert [args["value"] for _, args in tools.calls] == ["maybe", "perhaps"]
    assert model.requests[1].messages[-1].content == "Output verdict was not set: 'maybe' is not one of " \
                                                     "['approve', 'revise']"
    assert (outcome.failure.kind, outcome.result) == ("validation_failed", "perhaps")
    assert outcome.failure.message == ("the output still does not match its schema after 1 corrective turn:\n"
                                       "Output verdict was not set: 'perhaps' is not one of ['approve', 'revise']")
    assert len(model.requests) == 2


def test_refusals_in_one_turn_count_as_one_corrective_turn():
    tools = Outputs([refused("maybe"), refused("perhaps"), ToolResult(ok=True, content="Output verdict set.")])
    twice = calls(("set_output", {"name": "verdict", "value": "maybe"}),
                  ("set_output", {"name": "verdict", "value": "perhaps"}))
    outcome, _, _ = run(start(), Model([twice, set_verdict("approve"), text("Reviewed.")]), check=None, tools=tools)
    assert (outcome.status, outcome.result) == ("ok", "Reviewed.")


def test_schemas_are_checked_when_saved():
    assert schema_problem(SCORE) is None
    assert schema_problem({"type": "integr"}) == ("is not a valid JSON Schema: 'integr' is not valid under any of "
                                                  "the given schemas (at $.type)")
    assert schema_problem({"$ref": "#/$defs/missing"}) == "$ref '#/$defs/missing' points to nothing in the schema"
    assert schema_problem({"$schema": "https://example.com/mine"}) == (
        "$schema 'https://example.com/mine' is not a JSON Schema draft this server knows")
    deep: dict = {"type": "object"}
    for _ in range(25):
        deep = {"type": "object", "properties": {"a": deep}}
    assert schema_problem(deep) == "is nested more than 20 levels deep"
    for _ in range(5000):  # deeper than Python's stack: refused all the same, not crashed
        deep = {"not": deep}
    assert schema_problem(deep) == "is nested more than 20 levels deep"
    assert schema_problem({"enum": ["x" * 20_000]}) == "is 20014 characters long as JSON; at most 16000 are allowed"
    assert schema_problem(["not", "a", "mapping"]).startswith("must be a JSON Schema object")


def test_values_are_read_as_json_unless_the_schema_wants_text():
    assert value_errors(SCORE, '```json\n{"score": 2}\n```') == []
    assert value_errors(SCORE, "score: 2") == [
        "$: it is not JSON (Expecting value at line 1 column 1), so it was checked as text",
        "$: 'score: 2' is not of type 'object'"]
    assert value_errors({"type": "string", "maxLength": 3}, "  abc \n") == []
    assert value_errors({"type": "integer"}, "42") == []
    nested = "[" * 100_000 + "]" * 100_000  # deeper than Python's stack: an error for the model, not a crash
    assert value_errors(SCORE, nested) == [
        "$: it is JSON nested too deeply to read, so it was checked as text",
        "$: " + f"{nested!r} is not of type 'object'"[:299] + "…"]
    assert value_errors({"type": "string", "pattern": "^(a+)+$"}, "a" * 40 + "b") == [
        "$: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab' does not match '^(a+)+$'"]


def test_schema_patterns_match_with_re2_in_linear_time():
    """A catastrophic `pattern` over a long model text answers at once (Python's re would run for hours)."""
    started = time.perf_counter()
    assert value_errors({"type": "string", "pattern": "^(a+)+$"}, "a" * 5000 + "!") == [
        "$: " + repr("a" * 5000 + "!")[:99] + "… does not match '^(a+)+$'"]
    assert time.perf_counter() - started < 1.0
    assert value_errors({"type": "string", "pattern": "(?=x)y"}, "xy") == [
        "$: the schema's pattern '(?=x)y' cannot be used: invalid perl operator: (?= "
        "(patterns use RE2 syntax: no look-around or backreferences)"]
    assert value_errors({"type": "string", "pattern": r"^\d{3}-\w+$"}, "123-abc") == []


def test_a_schema_whose_pattern_re2_cannot_use_is_refused_when_saved():
    from mas_core.outputs import schema_problem

    assert schema_problem({"type": "object", "properties": {"id": {"type": "string", "pattern": r"^(\w)\1$"}}}) == (
        "pattern '^(\\\\w)\\\\1$' cannot be used: invalid escape sequence: \\1 "
        "(patterns use RE2 syntax: no look-around or backreferences)")
    assert schema_problem({"type": "object", "properties": {"pattern": {"type": "string", "pattern": "^a+$"}}}) is None
