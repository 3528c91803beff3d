"""Bounded loops of workflow steps, as plain Python: the ``until`` language and the checks of a loop.

A loop is a group of steps that repeats, round after round, until a
condition on one of its outputs holds or ``max_rounds`` rounds have run::

    loops:
    - steps: [draft, review]
      until: review.verdict == "approve"
      max_rounds: 3

The condition language is one comparison, read by a regular expression and
never evaluated as code: ``<step>.<output>`` then ``==``, ``!=`` or
``contains``, then a quoted text. Values are compared with surrounding
whitespace stripped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from workflows_app.engine.dag import GraphError, StepLike, ancestors

MAX_CONDITION_CHARS = 300
CONDITION_RE = re.compile(
    r"""^\s*(?P<step>[A-Za-z_][A-Za-z0-9_-]*)\.(?P<output>[A-Za-z_][A-Za-z0-9_-]*)"""
    r"""(?:\s*(?P<cmp>==|!=)\s*|\s+(?P<has>contains)\s+)(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)')\s*$"""
)
CONDITION_HELP = 'write <step>.<output> == "text" (or != "text", or contains "text")'


class LoopLike(Protocol):
    steps: list[str]
    until: str | None
    max_rounds: int


class ConditionError(ValueError):
    pass


@dataclass(frozen=True)
class Condition:
    step: str
    output: str
    op: str  # == | != | contains
    text: str

    def met(self, value: str) -> bool:
        value = value.strip()
        if self.op == "==":
            return value == self.text
        if self.op == "!=":
            return value != self.text
        return self.text in value

    def __str__(self) -> str:
        return f"{self.step}.{self.output} {self.op} {self.text!r}"


def parse_condition(text: str) -> Condition:
    """The condition ``text`` states, or ConditionError saying how to write one."""
    if len(text) > MAX_CONDITION_CHARS:
        raise ConditionError(f"is {len(text)} characters long; at most {MAX_CONDITION_CHARS} are allowed")
    match = CONDITION_RE.match(text)
    if match is None:
        raise ConditionError(f"cannot read {text!r}: {CONDITION_HELP}")
    literal = match["dq"] if match["dq"] is not None else match["sq"]
    return Condition(match["step"], match["output"], match["cmp"] or match["has"], literal)


def validate_loops(steps: Sequence[StepLike], loops: Sequence[LoopLike]) -> list[GraphError]:
    """Check each loop: known steps, each in one loop only, no step outside it between two of its steps
    (their rounds could never complete), and an ``until`` on a declared output of one of its steps."""
    errors: list[GraphError] = []
    by_id = {step.id: step for step in steps}
    edges = {step.id: list(step.depends_on) for step in steps}
    owner: dict[str, int] = {}
    for index, loop in enumerate(loops):
        loc = f"loops[{index}]"
        members: list[str] = []
        for sid in loop.steps:
            if sid not in by_id:
                errors.append(GraphError(f"{loc}.steps", f"unknown step {sid!r}"))
            elif sid in members:
                errors.append(GraphError(f"{loc}.steps", f"step {sid!r} is listed twice"))
            elif sid in owner:
                errors.append(GraphError(f"{loc}.steps", f"step {sid!r} is already in loops[{owner[sid]}]: "
                                                         f"a step repeats in one loop only"))
            else:
                members.append(sid)
                owner[sid] = index
        inside = set(members)
        for step in steps:
            if step.id in inside:
                continue
            before = [sid for sid in members if sid in ancestors(edges, step.id)]
            after = [sid for sid in members if step.id in ancestors(edges, sid)]
            if before and after:
                errors.append(GraphError(f"{loc}.steps", (
                    f"step {step.id!r} depends on loop step {before[0]!r} and loop step {after[0]!r} depends on "
                    f"it: add {step.id!r} to the loop (its steps repeat together)")))
        if loop.until is None:
            continue
        try:
            condition = parse_condition(loop.until)
        except ConditionError as error:
            errors.append(GraphError(f"{loc}.until", str(error)))
            continue
        if condition.step not in by_id:
            errors.append(GraphError(f"{loc}.until", f"unknown step {condition.step!r}"))
        elif condition.step not in inside:
            errors.append(GraphError(f"{loc}.until", f"step {condition.step!r} is not in this loop "
                                                     f"(its steps: {', '.join(members)})"))
        elif condition.output not in by_id[condition.step].outputs:
            declared = ", ".join(by_id[condition.step].outputs) or "none"
            errors.append(GraphError(f"{loc}.until", f"step {condition.step!r} declares no output "
                                                     f"{condition.output!r} (its outputs: {declared})"))
    return errors


__all__ = ["Condition", "ConditionError", "LoopLike", "parse_condition", "validate_loops"]
