"""Scorers: each check of a case against what its run did → pass or fail, a score and the reason.

Plain Python, no ORM: an :class:`Observation` holds what the run did (read from its rows and events by
``evals_app.services``), and the LLM judge is a function passed in, so every scorer is tested alone.
A check that cannot be scored (no judge configured, its budget spent) is *skipped*: ``passed`` is None
and it counts neither way.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any, Callable

import regex

from mas_core.outputs import value_errors

REGEX_TIMEOUT_S = 0.5
SHOWN_CHARS = 120
MAX_JUDGE_REPLY_CHARS = 20_000


@dataclass(frozen=True)
class ToolCallSeen:
    name: str
    arguments: dict[str, Any]
    agent: str = ""


@dataclass
class Observation:
    """What one run did, as the checks see it."""

    status: str
    result: str
    task: str = ""
    outputs: dict[str, Any] = field(default_factory=dict)
    tool_calls: list[ToolCallSeen] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    cost_usd: Decimal = Decimal(0)
    tokens: int = 0
    duration_s: float | None = None
    reference: str | None = None
    guardrails: list[str] = field(default_factory=list)  # the slug of each guardrail_triggered event, in order


@dataclass(frozen=True)
class CheckResult:
    type: str
    passed: bool | None  # None: skipped
    score: float
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class JudgeVerdict:
    score: float
    reason: str


class JudgeUnavailable(Exception):
    """The judge cannot score now (no model, its budget spent): the check is skipped with this reason."""


Judge = Callable[[str], JudgeVerdict]


def _short(text: Any) -> str:
    text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"


def _ok(kind: str, reason: str) -> CheckResult:
    return CheckResult(kind, True, 1.0, reason)


def _fail(kind: str, reason: str) -> CheckResult:
    return CheckResult(kind, False, 0.0, reason)


def _search(pattern: str, text: str) -> bool:
    try:
        return regex.search(pattern, text, timeout=REGEX_TIMEOUT_S) is not None
    except TimeoutError:
        return False


def target_value(check: dict[str, Any], seen: Observation) -> tuple[Any, str | None]:
    """The value a text check reads, and why there is none (a named output never set)."""
    target = check.get("target") or "result"
    if target == "result":
        return seen.result, None
    name = target.split(":", 1)[1]
    if name not in seen.outputs:
        return None, f"output {name!r} was not set (outputs: {', '.join(sorted(seen.outputs)) or 'none'})"
    return seen.outputs[name], None


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def args_match(expected: dict[str, Any], actual: dict[str, Any]) -> str | None:
    """Why ``actual`` does not hold ``expected`` (a subset; ``{regex: …}`` matches text), or None."""
    for key, want in expected.items():
        if key not in actual:
            return f"argument {key!r} missing"
        have = actual[key]
        if isinstance(want, dict) and set(want) == {"regex"}:
            if not _search(str(want["regex"]), _as_text(have)):
                return f"argument {key}={_short(have)!r} does not match {want['regex']!r}"
        elif have != want:
            return f"argument {key}={_short(have)!r}, not {_short(want)!r}"
    return None


def score_check(check: dict[str, Any], seen: Observation, *, judge: Judge | None = None) -> CheckResult:
    """One check (a ``CheckSpec`` as data) against ``seen``."""
    kind = check["type"]
    scorer = SCORERS[kind]
    if kind == "judge":
        return scorer(check, seen, judge)
    return scorer(check, seen)


def score_case(checks: list[dict[str, Any]], seen: Observation, *, judge: Judge | None = None
               ) -> tuple[bool, float, list[CheckResult]]:
    """All checks of a case: (passed — every check not skipped passed, mean score of those, the results)."""
    results = [score_check(check, seen, judge=judge) for check in checks]
    scored = [result for result in results if result.passed is not None]
    passed = all(result.passed for result in scored)
    score = round(sum(result.score for result in scored) / len(scored), 4) if scored else 0.0
    return passed, score, results


# -- text ------------------------------------------------------------------------------


def _text_check(kind: str, check: dict[str, Any], seen: Observation) -> tuple[str | None, CheckResult | None]:
    value, missing = target_value(check, seen)
    if missing:
        return None, _fail(kind, missing)
    return _as_text(value), None


def _exact(check: dict[str, Any], seen: Observation) -> CheckResult:
    text, failed = _text_check("exact", check, seen)
    if failed:
        return failed
    want = check.get("value")
    if want is None:
        want = seen.reference
        if want is None:
            return _fail("exact", "no value to compare with: the check gives none and the case has no reference")
    if text.strip() == want.strip():
        return _ok("exact", f"{check.get('target') or 'result'} equals the expected text")
    return _fail("exact", f"{check.get('target') or 'result'} is {_short(text)!r}, expected {_short(want)!r}")


def _contains(check: dict[str, Any], seen: Observation) -> CheckResult:
    text, failed = _text_check("contains", check, seen)
    if failed:
        return failed
    if check["value"] in text:
        return _ok("contains", f"{check.get('target') or 'result'} contains {_short(check['value'])!r}")
    return _fail("contains", f"{check.get('target') or 'result'} {_short(text)!r} does not contain "
                             f"{_short(check['value'])!r}")


def _not_contains(check: dict[str, Any], seen: Observation) -> CheckResult:
    text, failed = _text_check("not_contains", check, seen)
    if failed:
        return failed
    if check["value"] not in text:
        return _ok("not_contains", f"{check.get('target') or 'result'} does not contain {_short(check['value'])!r}")
    return _fail("not_contains", f"{check.get('target') or 'result'} contains {_short(check['value'])!r}")


def _regex(check: dict[str, Any], seen: Observation) -> CheckResult:
    text, failed = _text_check("regex", check, seen)
    if failed:
        return failed
    if _search(check["pattern"], text):
        return _ok("regex", f"{check.get('target') or 'result'} matches {check['pattern']!r}")
    return _fail("regex", f"{check.get('target') or 'result'} {_short(text)!r} does not match {check['pattern']!r}")


def _json_schema(check: dict[str, Any], seen: Observation) -> CheckResult:
    value, missing = target_value(check, seen)
    if missing:
        return _fail("json_schema", missing)
    errors = value_errors(check["json_schema"], value)
    if not errors:
        return _ok("json_schema", f"{check.get('target') or 'result'} matches the schema")
    return _fail("json_schema", f"{check.get('target') or 'result'} does not match the schema: "
                                f"{'; '.join(errors[:3])}")


# -- tool calls -------------------------------------------------------------------------


def _tool_called(check: dict[str, Any], seen: Observation) -> CheckResult:
    calls = [call for call in seen.tool_calls if call.name == check["tool"]]
    if not calls:
        made = sorted({call.name for call in seen.tool_calls})
        return _fail("tool_called", f"{check['tool']} was never called (called: {', '.join(made) or 'no tool'})")
    expected = check.get("args")
    if not expected:
        return _ok("tool_called", f"{check['tool']} was called {len(calls)} time(s)")
    problems = [args_match(expected, call.arguments) for call in calls]
    if any(problem is None for problem in problems):
        return _ok("tool_called", f"{check['tool']} was called with the expected arguments")
    return _fail("tool_called", f"{check['tool']} was called {len(calls)} time(s), never with the expected "
                                f"arguments: {problems[0]}")


def _tool_not_called(check: dict[str, Any], seen: Observation) -> CheckResult:
    count = sum(1 for call in seen.tool_calls if call.name == check["tool"])
    if count == 0:
        return _ok("tool_not_called", f"{check['tool']} was not called")
    return _fail("tool_not_called", f"{check['tool']} was called {count} time(s)")


def _max_tool_calls(check: dict[str, Any], seen: Observation) -> CheckResult:
    tool = check.get("tool")
    calls = [call for call in seen.tool_calls if tool is None or call.name == tool]
    what = f"calls of {tool}" if tool else "tool calls"
    bound = int(check["max"])
    if len(calls) <= bound:
        return _ok("max_tool_calls", f"{len(calls)} {what}, at most {bound} allowed")
    return _fail("max_tool_calls", f"{len(calls)} {what}, more than the {bound} allowed")


def _guardrail_fired(check: dict[str, Any], seen: Observation) -> CheckResult:
    count = seen.guardrails.count(check["guardrail"])
    if count:
        return _ok("guardrail_fired", f"{check['guardrail']} fired {count} time(s)")
    fired = sorted(set(seen.guardrails))
    return _fail("guardrail_fired", f"{check['guardrail']} never fired (fired: {', '.join(fired) or 'none'})")


def _guardrail_not_fired(check: dict[str, Any], seen: Observation) -> CheckResult:
    count = seen.guardrails.count(check["guardrail"])
    if count == 0:
        return _ok("guardrail_not_fired", f"{check['guardrail']} did not fire")
    return _fail("guardrail_not_fired", f"{check['guardrail']} fired {count} time(s)")


# -- files, bounds, status -------------------------------------------------------------------


def _file(check: dict[str, Any], seen: Observation) -> CheckResult:
    path = check["path"]
    if path not in seen.files:
        return _fail("file", f"no file {path} in the workspace (files: {_short(', '.join(sorted(seen.files)) or 'none')})")
    want = check.get("contains")
    if want is None:
        return _ok("file", f"{path} exists")
    if want in seen.files[path]:
        return _ok("file", f"{path} contains {_short(want)!r}")
    return _fail("file", f"{path} does not contain {_short(want)!r}")


def _bound(kind: str, value: float | None, bound: float, unit: str) -> CheckResult:
    if value is None:
        return _fail(kind, f"no {unit} was recorded")
    if value <= bound:
        return _ok(kind, f"{value:g} {unit}, at most {bound:g} allowed")
    return _fail(kind, f"{value:g} {unit}, more than the {bound:g} allowed")


def _max_cost(check: dict[str, Any], seen: Observation) -> CheckResult:
    return _bound("max_cost_usd", float(seen.cost_usd), float(check["max"]), "USD")


def _max_tokens(check: dict[str, Any], seen: Observation) -> CheckResult:
    return _bound("max_tokens", float(seen.tokens), float(check["max"]), "tokens")


def _max_duration(check: dict[str, Any], seen: Observation) -> CheckResult:
    return _bound("max_duration_s", seen.duration_s, float(check["max"]), "s")


def _status(check: dict[str, Any], seen: Observation) -> CheckResult:
    if seen.status == check["equals"]:
        return _ok("status", f"the run {seen.status}")
    return _fail("status", f"the run {seen.status}, expected {check['equals']}")


# -- the LLM judge -------------------------------------------------------------------------

JUDGE_INSTRUCTIONS = (
    "You grade the answer of an AI agent against a rubric. Reply with JSON only: "
    '{"score": <a number from 0 to 1>, "reason": "<one sentence>"}.'
)


def judge_prompt(check: dict[str, Any], seen: Observation) -> str:
    value, _ = target_value(check, seen)
    parts = [f"Rubric:\n{check['rubric']}", f"Task:\n{seen.task}", f"Answer:\n{_as_text(value) if value is not None else ''}"]
    if seen.reference is not None:
        parts.append(f"Reference answer:\n{seen.reference}")
    return "\n\n".join(parts)


def judge_reply(text: str) -> JudgeVerdict:
    """The judge's JSON reply → a verdict; ValueError saying what is wrong with it."""
    text = text.strip()[:MAX_JUDGE_REPLY_CHARS]
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        data = json.loads(text)
    except ValueError:
        raise ValueError(f"the judge did not reply with JSON: {_short(text)!r}") from None
    score = data.get("score") if isinstance(data, dict) else None
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 1:
        raise ValueError(f"the judge's score must be a number from 0 to 1: {_short(text)!r}")
    return JudgeVerdict(float(score), str(data.get("reason") or "")[:500])


def _judge(check: dict[str, Any], seen: Observation, judge: Judge | None) -> CheckResult:
    if judge is None:
        return CheckResult("judge", None, 0.0, "no judge configured")
    try:
        verdict = judge(judge_prompt(check, seen))
    except JudgeUnavailable as error:
        return CheckResult("judge", None, 0.0, str(error))
    except ValueError as error:
        return _fail("judge", str(error))
    minimum = float(check.get("min_score", 0.5))
    passed = verdict.score >= minimum
    return CheckResult("judge", passed, round(verdict.score, 4),
                       f"score {verdict.score:g} ({'at least' if passed else 'below'} {minimum:g}): {verdict.reason}")


SCORERS: dict[str, Callable[..., CheckResult]] = {
    "exact": _exact, "contains": _contains, "not_contains": _not_contains, "regex": _regex,
    "json_schema": _json_schema, "tool_called": _tool_called, "tool_not_called": _tool_not_called,
    "max_tool_calls": _max_tool_calls, "file": _file, "max_cost_usd": _max_cost, "max_tokens": _max_tokens,
    "max_duration_s": _max_duration, "status": _status, "judge": _judge, "guardrail_fired": _guardrail_fired,
    "guardrail_not_fired": _guardrail_not_fired,
}
