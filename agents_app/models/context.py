"""An activation's context, typed: what its creator and its sessions note on it (``Activation.context``).

The row keeps the JSON it always had (queries filter on ``context__wait``, ``context__tool_call`` and
``context__step``); code reads and writes it through :class:`ActivationContext` (``activation.ctx``).
A field at its default is left out of the JSON, so a root activation's context is still ``{}``; keys this
class does not know (rows written by another version) are kept in ``extra`` and written back unchanged.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

@dataclass(frozen=True)
class ActivationContext:
    # A workflow step's (workflows_app): which step, its attempt and loop round, its dependencies' results.
    step: str = ""
    attempt: int | None = None
    round: int | None = None
    dependencies: dict[str, Any] | None = None
    gate: list[str] = field(default_factory=list)  # where a person approves: "start", "outputs"
    # The step's approval policy (its ``approval`` entries): carried to every child it starts, read by the
    # session's gate.
    step_approval: list[Any] = field(default_factory=list)
    # The step's guardrails (slugs of the team's guardrail definitions): carried to every child it starts, like
    # its approval policy; they check the sessions on top of the team's defaults, the agent's and the run's.
    step_guardrails: list[str] = field(default_factory=list)
    output_schemas: dict[str, Any] = field(default_factory=dict)  # an output's JSON Schema, by name
    answer_output: str | None = None  # the only output, filled by the final answer when set_output was not
    outputs: dict[str, Any] | None = None  # the named outputs set so far (None: none set, not even empty)
    # The escalation ladder's rung this attempt runs on, and that rung's tier.
    rung: str = ""
    tier: str = ""
    # A workflow's planner (workflows_app.orchestrate): the plan's number, and whether it adapts a plan.
    plan: int = 0
    adapt: bool = False
    # A child (spawn, delegate, a custom tool's worker): the tool call of the parent that started it, and
    # whether the parent waits for its outcome (``wait``) or hears of it as a signal (``notify``).
    tool_call: str = ""
    wait: bool = False
    notify: bool = False
    parent_context: Any = None  # what a delegating agent passed along
    worker: dict[str, Any] | None = None  # a custom tool's worker: the agent definition that answers the call
    outcome: dict[str, Any] | None = None  # a settled child's: status, result, outputs, files, failure
    # Counters: sessions handed over from a dead worker, tries to begin that failed.
    resumes: int = 0
    begin_tries: int = 0
    extra: dict[str, Any] = field(default_factory=dict)  # keys of another version, kept as they were

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> ActivationContext:
        known, extra = {}, {}
        for key, value in (data or {}).items():
            (known if key in _FIELDS and key != "extra" else extra)[key] = value
        return cls(**known, extra=extra)

    def to_json(self) -> dict[str, Any]:
        data = {}
        for item in dataclasses.fields(self):
            if item.name == "extra":
                continue
            value = getattr(self, item.name)
            if value != _DEFAULTS[item.name]:  # a None default keeps any other value, even "round": 0
                data[item.name] = value
        return {**data, **self.extra}

    def replace(self, **changes: Any) -> ActivationContext:
        return dataclasses.replace(self, **changes)


def _default(item: dataclasses.Field) -> Any:
    return item.default_factory() if item.default_factory is not dataclasses.MISSING else item.default


_FIELDS = frozenset(item.name for item in dataclasses.fields(ActivationContext))
_DEFAULTS = {item.name: _default(item) for item in dataclasses.fields(ActivationContext)}
