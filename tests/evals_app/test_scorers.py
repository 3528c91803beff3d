"""Each scorer passes and fails on a plain Observation: no database, no run."""

from __future__ import annotations

from decimal import Decimal

import pytest

from evals_app.scorers import (
    CheckResult,
    JudgeUnavailable,
    JudgeVerdict,
    Observation,
    ToolCallSeen,
    judge_reply,
    score_case,
    score_check,
)
from evals_app.specs import CheckSpec


def seen(**changes) -> Observation:
    base = Observation(
        status="succeeded", result="The answer is 42.", task="What is six times seven?",
        outputs={"summary": {"answer": 42}, "title": "Six sevens"},
        tool_calls=[ToolCallSeen("vfs_write", {"path": "out/report.md", "content": "42"}, "writer"),
                    ToolCallSeen("vfs_read", {"path": "notes.md"}, "writer"),
                    ToolCallSeen("vfs_read", {"path": "data.md"}, "writer")],
        files={"out/report.md": "the answer: 42", "notes.md": "six sevens"},
        cost_usd=Decimal("0.0125"), tokens=1200, duration_s=3.5, reference="The answer is 42.",
    )
    for key, value in changes.items():
        setattr(base, key, value)
    return base


def check(**data) -> dict:
    # Through the spec, as a dataset's checks are: what a scorer gets is always valid.
    return CheckSpec.model_validate(data).model_dump(exclude_none=True)


CASES = [
    # (check, passing observation changes, failing observation changes, failing reason)
    (check(type="exact", value="The answer is 42."), {}, {"result": "It is 41."},
     "result is 'It is 41.', expected 'The answer is 42.'"),
    (check(type="exact"), {}, {"reference": "42"}, "result is 'The answer is 42.', expected '42'"),
    (check(type="exact", target="output:title", value="Six sevens"), {}, {"outputs": {}},
     "output 'title' was not set (outputs: none)"),
    (check(type="contains", value="42"), {}, {"result": "no idea"}, "result 'no idea' does not contain '42'"),
    (check(type="not_contains", value="sorry"), {}, {"result": "sorry, no"}, "result contains 'sorry'"),
    (check(type="regex", pattern=r"\b4\d\b"), {}, {"result": "7"}, r"result '7' does not match '\\b4\\d\\b'"),
    (check(type="json_schema", target="output:summary",
           json_schema={"type": "object", "required": ["answer"], "properties": {"answer": {"type": "integer"}}}),
     {}, {"outputs": {"summary": {"answer": "forty-two"}}},
     "output:summary does not match the schema: $.answer: 'forty-two' is not of type 'integer'"),
    (check(type="tool_called", tool="vfs_write"), {}, {"tool_calls": []},
     "vfs_write was never called (called: no tool)"),
    (check(type="tool_called", tool="vfs_write", args={"path": {"regex": r"^out/.*\.md$"}, "content": "42"}), {},
     {"tool_calls": [ToolCallSeen("vfs_write", {"path": "report.txt", "content": "42"})]},
     "vfs_write was called 1 time(s), never with the expected arguments: argument path='report.txt' does not "
     "match '^out/.*\\\\.md$'"),
    (check(type="tool_not_called", tool="web_fetch"), {},
     {"tool_calls": [ToolCallSeen("web_fetch", {"url": "https://example.org"})]}, "web_fetch was called 1 time(s)"),
    (check(type="max_tool_calls", max=3), {}, {"tool_calls": [ToolCallSeen("vfs_read", {})] * 4},
     "4 tool calls, more than the 3 allowed"),
    (check(type="max_tool_calls", tool="vfs_read", max=2), {}, {"tool_calls": [ToolCallSeen("vfs_read", {})] * 3},
     "3 calls of vfs_read, more than the 2 allowed"),
    (check(type="file", path="out/report.md", contains="42"), {}, {"files": {"out/report.md": "none"}},
     "out/report.md does not contain '42'"),
    (check(type="file", path="notes.md"), {}, {"files": {}}, "no file notes.md in the workspace (files: none)"),
    (check(type="max_cost_usd", max=0.05), {}, {"cost_usd": Decimal("0.5")}, "0.5 USD, more than the 0.05 allowed"),
    (check(type="max_tokens", max=2000), {}, {"tokens": 2001}, "2001 tokens, more than the 2000 allowed"),
    (check(type="max_duration_s", max=10), {}, {"duration_s": 12.25}, "12.25 s, more than the 10 allowed"),
    (check(type="status", equals="succeeded"), {}, {"status": "failed"}, "the run failed, expected succeeded"),
    (check(type="guardrail_fired", guardrail="no-cards"), {"guardrails": ["warn-long", "no-cards"]},
     {"guardrails": ["warn-long"]}, "no-cards never fired (fired: warn-long)"),
    (check(type="guardrail_not_fired", guardrail="no-cards"), {"guardrails": ["warn-long"]},
     {"guardrails": ["no-cards", "no-cards"]}, "no-cards fired 2 time(s)"),
]


@pytest.mark.parametrize("spec,passing,failing,reason", CASES, ids=lambda v: v["type"] if isinstance(v, dict)
                         and "type" in v else None)
def test_each_scorer_passes_and_fails_with_its_reason(spec, passing, failing, reason):
    good = score_check(spec, seen(**passing))
    assert (good.passed, good.score) == (True, 1.0), good.reason
    bad = score_check(spec, seen(**failing))
    assert bad == CheckResult(spec["type"], False, 0.0, reason)


def test_a_passing_check_says_why():
    assert score_check(check(type="contains", value="42"), seen()).reason == "result contains '42'"
    assert score_check(check(type="max_tokens", max=2000), seen()).reason == "1200 tokens, at most 2000 allowed"
    assert score_check(check(type="tool_called", tool="vfs_read"), seen()).reason == "vfs_read was called 2 time(s)"
    assert score_check(check(type="guardrail_fired", guardrail="g"), seen(guardrails=["g"])).reason == (
        "g fired 1 time(s)")


def test_a_guardrail_check_needs_the_guardrail():
    with pytest.raises(ValueError, match="a guardrail_fired check needs guardrail"):
        check(type="guardrail_fired")


def test_the_judge_passes_fails_and_is_skipped_without_one():
    spec = check(type="judge", rubric="Gives the number.", min_score=0.7)
    prompts = []

    def judge(score):
        def call(prompt):
            prompts.append(prompt)
            return JudgeVerdict(score, "gives 42")
        return call

    assert score_check(spec, seen(), judge=judge(0.9)) == CheckResult(
        "judge", True, 0.9, "score 0.9 (at least 0.7): gives 42")
    assert score_check(spec, seen(), judge=judge(0.5)) == CheckResult(
        "judge", False, 0.5, "score 0.5 (below 0.7): gives 42")
    assert prompts[0] == ("Rubric:\nGives the number.\n\nTask:\nWhat is six times seven?\n\nAnswer:\nThe answer is "
                          "42.\n\nReference answer:\nThe answer is 42.")
    assert score_check(spec, seen()) == CheckResult("judge", None, 0.0, "no judge configured")

    def spent(prompt):
        raise JudgeUnavailable("the judge's budget of $0.01 is spent")

    assert score_check(spec, seen(), judge=spent) == CheckResult("judge", None, 0.0,
                                                                  "the judge's budget of $0.01 is spent")


def test_a_judge_reply_must_be_json_with_a_score_from_0_to_1():
    assert judge_reply('```json\n{"score": 1, "reason": "ok"}\n```') == JudgeVerdict(1.0, "ok")
    with pytest.raises(ValueError, match="the judge did not reply with JSON: 'great'"):
        judge_reply("great")
    with pytest.raises(ValueError, match="must be a number from 0 to 1"):
        judge_reply('{"score": 7}')
    bad = score_check(check(type="judge", rubric="r"), seen(), judge=lambda prompt: judge_reply("great"))
    assert bad == CheckResult("judge", False, 0.0, "the judge did not reply with JSON: 'great'")


def test_a_case_passes_when_every_scored_check_passes_and_skipped_ones_count_neither_way():
    checks = [check(type="contains", value="42"), check(type="judge", rubric="r")]
    assert score_case(checks, seen()) == (True, 1.0, [
        CheckResult("contains", True, 1.0, "result contains '42'"),
        CheckResult("judge", None, 0.0, "no judge configured")])
    checks.append(check(type="status", equals="failed"))
    passed, score, _ = score_case(checks, seen())
    assert (passed, score) == (False, 0.5)


def test_a_regex_that_takes_too_long_does_not_match():
    slow = check(type="regex", pattern=r"^(a+)+$")
    result = score_check(slow, seen(result="a" * 40_000 + "b"))
    assert result.passed is False
