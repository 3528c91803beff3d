"""Request and response schemas of the runs API (``agents_app.api_runs``).

Limits and budget are closed objects with bounds: a typo in a key or a
negative limit is a 422 naming the field, never a run that silently ignores
it. Money is a decimal string, as in the events (``"0.0012"``, ``"0"``: ``agents_app.money``).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, ValidationInfo, field_validator

from agents_app.llm.scripted import validate_script
from agents_app.money import money_str
from agents_app.specs import MAX_GUARDRAILS, known_guardrails_check

RunStatusName = Literal["queued", "running", "waiting", "succeeded", "failed", "cancelled"]

MAX_INPUT_CHARS = 200_000
SLUG_PATTERN = r"^[-a-zA-Z0-9_]{1,100}$"

# An amount out: fixed point, never "1E-8" (pydantic writes str(Decimal)).
# "always": django-ninja dumps a response in python mode, then encodes it (a Decimal of 1e-7 or less would
# be written "1E-7").
Money = Annotated[Decimal, PlainSerializer(money_str, return_type=str, when_used="always")]


class RunLimitsIn(BaseModel):
    """Per-run limits; keys left out take the server's defaults."""

    model_config = ConfigDict(extra="forbid")

    max_depth: int | None = Field(default=None, ge=0, le=20, description="Deepest spawn/delegate level.")
    max_fanout: int | None = Field(default=None, ge=0, le=100, description="Children per agent.")
    max_concurrency: int | None = Field(default=None, ge=1, le=200, description="Sessions at once.")
    max_retries: int | None = Field(default=None, ge=0, le=10, description="Retries of a failed session.")


class RunBudgetIn(BaseModel):
    """The run's budget: going over stops the next model call with ``policy_denied``."""

    model_config = ConfigDict(extra="forbid")

    max_cost_usd: Decimal | None = Field(default=None, ge=0, max_digits=16, decimal_places=8)
    warn_cost_usd: Decimal | None = Field(default=None, ge=0, max_digits=16, decimal_places=8)
    max_large_tier_uses: int | None = Field(default=None, ge=0, le=100_000)
    max_guardrail_cost_usd: Decimal | None = Field(
        default=None, ge=0, max_digits=16, decimal_places=8,
        description="The guardrail line: what the run's llm_judge guardrails may spend (within max_cost_usd).")


class RunIn(BaseModel):
    """Start a run: an agent of the team and its task."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(pattern=SLUG_PATTERN, description="Slug of one of the team's agents.")
    input: str = Field(max_length=MAX_INPUT_CHARS, description="The task.")
    limits: RunLimitsIn | None = None
    budget: RunBudgetIn | None = None
    provider: str = Field(default="", pattern=r"^([-a-zA-Z0-9_]{1,100})?$",
                          description="Slug of one of the team's model providers to use instead of the default.")
    script: dict[str, Any] | None = Field(
        default=None,
        description="Turns for the scripted provider (agent slug → list of turns); the run then uses no real model.",
    )
    approvals: list[str | dict[str, Any]] = Field(default_factory=list, max_length=100, description=(
        "More tool calls that wait for a person's approval in this run, on top of the agents' and the team's "
        "(a run can add approvals, never remove them): names, patterns or {tool, deadline_s, default, reason}."))

    guardrails: list[Annotated[str, Field(pattern=SLUG_PATTERN)]] = Field(
        default_factory=list, max_length=MAX_GUARDRAILS, description=(
            "Slugs of the team's guardrails that check every session of this run, on top of the team's defaults "
            "and the definitions' (a run can add guardrails, never remove them); another slug is a 422."))

    @field_validator("approvals")
    @classmethod
    def _approvals(cls, value: list[Any]) -> list[Any]:
        from agents_app.approvals.policy import entries_check

        return entries_check(value)

    @field_validator("guardrails")
    @classmethod
    def _guardrails_once(cls, value: list[str], info: ValidationInfo) -> list[str]:
        return known_guardrails_check(value, info)  # each once here; run_start checks they are the team's

    @field_validator("script")
    @classmethod
    def _script_shape(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            validate_script(value)  # its ValueError names the agent and turn
        return value

    def limits_data(self) -> dict[str, Any]:
        return self.limits.model_dump(exclude_none=True) if self.limits else {}

    def budget_data(self) -> dict[str, Any]:
        # Stored as JSON: decimals as strings, read back with Decimal(str(...)).
        return {key: str(value) if isinstance(value, Decimal) else value
                for key, value in (self.budget.model_dump(exclude_none=True) if self.budget else {}).items()}


class RunTotals(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    cost_usd: Money
    duration_s: float | None = Field(description="From start to finish (or to now while running); null while queued.")


class RunDetailTotals(RunTotals):
    cache_hits: int = Field(description="Model requests the semantic cache answered (cache_hit events).")
    cache_misses: int = Field(description="Model requests it could not answer (cache_miss events).")
    guardrail_cost_usd: Money = Field(description="Of cost_usd, what its llm_judge guardrails spent (with the "
                                                  "worst cases of the judges' calls in flight).")


class RunOut(BaseModel):
    """A run in a list."""

    id: str
    agent: str
    workflow: str
    status: RunStatusName
    input: str = Field(description="The task (first 500 characters in lists).")
    notice: str
    error: str
    eval: bool = Field(description="A case of an eval (``GET /api/evals/{slug}/runs``).")
    totals: RunTotals
    created_by: str | None = Field(description="Username of the user who started it, if any.")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    archived_at: datetime | None = Field(description="When it was archived (hidden from lists), if it was.")


class RunDeletedOut(BaseModel):
    id: str
    deleted: bool
    events: int = Field(description="Events deleted with it.")
    files: int = Field(description="Workspace files deleted with it.")


class SessionOut(BaseModel):
    id: str
    agent: str
    attempt: int
    tier: str
    provider: str
    model: str
    status: Literal["running", "suspended", "ok", "failed", "cancelled"]
    prompt_tokens: int
    completion_tokens: int
    cost_usd: Money
    result: str
    failure: dict[str, Any] | None = Field(description="The failure report: kind, message, last tool calls, …")
    meta: dict[str, Any]
    started_at: datetime
    finished_at: datetime | None


class ActivationOut(BaseModel):
    id: str
    parent: str | None = Field(description="The activation that spawned, delegated to or is signalled by this one.")
    agent: str
    kind: str = Field(description="root | spawn | delegate | signal | step | tool")
    depth: int
    priority: int
    status: Literal["queued", "ready", "dispatched", "running", "suspended", "done", "failed", "cancelled"]
    attempts: int
    input: str
    result: str
    created_at: datetime
    sessions: list[SessionOut]


class StepRoundOut(BaseModel):
    """One finished round of a step in a loop."""

    round: int
    status: Literal["succeeded", "failed", "skipped"]
    outputs: dict[str, str]


class StepOut(BaseModel):
    """One step of a workflow run, as its scheduler has it."""

    id: str
    agent: str
    depends_on: list[str]
    status: Literal["pending", "running", "succeeded", "failed", "skipped"]
    attempts: int = Field(description="Attempts in its current round.")
    outputs: dict[str, str] = Field(description="Its latest outputs (in a loop: of the latest round that produced "
                                                "them).")
    round: int = Field(description="The round of its loop it is in; 1 for a step in no loop.")
    rounds: list[StepRoundOut] = Field(description="A loop step's finished rounds, oldest first; empty for a step "
                                                   "in no loop.")
    partial: bool = Field(description="It ran although a step it depends on had failed (on_failure: continue).")
    error: str = Field(description="Why its last attempt failed, if it did.")
    tier: str = Field(description="Tier of its latest attempt when it was escalated, else empty.")
    prompt_tokens: int
    completion_tokens: int
    cost_usd: Money
    started_at: datetime | None
    finished_at: datetime | None


class ForkOut(BaseModel):
    id: str
    seq: int = Field(description="The event of this run the fork started from.")
    status: RunStatusName
    created_at: datetime


class RunDetailOut(RunOut):
    """A run with everything it did: outcome, settings and the activation/session tree."""

    input: str = Field(description="The task.")
    totals: RunDetailTotals
    result: str
    provider: str
    limits: dict[str, Any]
    budget: dict[str, Any]
    approvals: list[Any] = Field(description="Approvals the run asked for at start, beyond its definitions'.")
    guardrails: list[str] = Field(description="Guardrails the run added at start (slugs), beyond the team's defaults "
                                              "and its definitions'.")
    versions: dict[str, Any] = Field(description=(
        'Definition versions the run pinned (every session, retry and resume uses them), e.g. '
        '{"agent:lead": 3, "tool:summarize": 1, "mcp:files": 2, "skill:citation-style": 1}.'))
    uses_script: bool = Field(description="The run plays a script with the scripted provider.")
    activations: list[ActivationOut] = Field(description="Oldest first; follow ``parent`` for the tree.")
    steps: list[StepOut] | None = Field(description="A workflow run's steps in definition order; null for an "
                                                    "agent's run.")
    forked_from: str | None = Field(description="The run this one was forked from (POST /api/runs/{id}/fork), "
                                                "if it was.")
    fork_seq: int | None = Field(description="The event of that run it was forked from (its seq).")
    forks: list[ForkOut] = Field(description="Runs forked from this one, oldest first (the first 100).")


class EventOut(BaseModel):
    """One kernel event: the same shape as on the run's websocket."""

    run: str
    seq: int
    type: str
    agent: str
    session: str | None
    data: dict[str, Any]
    created_at: datetime


class FileOut(BaseModel):
    path: str
    version: int
    author: str = Field(description="Slug of the agent that wrote it last.")
    size: int = Field(description="Bytes (UTF-8).")
    updated_at: datetime


class FileContentOut(FileOut):
    content: str
