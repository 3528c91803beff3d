"""Typed results of a session: what the loop returns and what it records."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

FailureKind = Literal[
    "tool_error", "timeout", "validation_failed", "stuck", "policy_denied", "provider_error", "guardrail", "unknown"
]


@dataclass(frozen=True)
class Limits:
    max_steps: int = 20
    max_tool_calls: int = 50
    timeout_s: float = 600.0
    # Stuck detection: the same call with the same arguments this many times
    # in a row, or this many steps in a row that bring no new tool result.
    repeat_limit: int = 3
    no_progress_steps: int = 5


@dataclass
class FailureReport:
    kind: FailureKind
    message: str
    last_tool_calls: list[dict[str, Any]] = field(default_factory=list)
    suggested_retry: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Meta:
    duration_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calls: int = 0
    steps: int = 0
    model: str = ""
    tier: str = ""
    cost_usd: str = "0"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SessionOutcome:
    """``ok`` with a result, ``failed`` with a report and the partial result, ``cancelled``, or
    ``suspended``: checkpointed with tool calls whose results come later (children, people it waits for)."""

    status: Literal["ok", "failed", "cancelled", "suspended"]
    result: str = ""
    meta: Meta = field(default_factory=Meta)
    failure: FailureReport | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"
