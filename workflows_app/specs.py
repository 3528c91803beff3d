"""Frontmatter schema of workflows (SPEC §5)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from agents_app.specs import MAX_GUARDRAILS, known_guardrails_check
from mas_core.outputs import schema_problem
from mas_core.specs import Name, Strict
from workflows_app.engine.dag import topological_levels, validate_graph

STEP_ID = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"


class WorkflowStep(Strict):
    id: str = Field(pattern=STEP_ID)
    agent: str = Field(min_length=1)
    prompt: str = ""
    depends_on: list[str] = Field(default_factory=list)
    outputs: list[str] = Field(default_factory=list)
    output_schemas: dict[str, dict[str, Any]] = Field(default_factory=dict, description=(
        "A JSON Schema per declared output: a value that does not match gets one corrective turn, then the step's "
        "session fails as validation_failed."))
    max_retries: int = Field(default=0, ge=0, le=10)
    on_failure: Literal["stop", "continue"] | None = None
    gate: list[Literal["start", "outputs"]] = Field(default_factory=list, max_length=2, description=(
        "A person approves the step before it starts (start) and/or before its outputs are accepted (outputs); "
        "a rejection fails the step."))
    approval: list[str | dict[str, Any]] = Field(default_factory=list, description=(
        "Tool calls made inside the step (by its agent, and by the agents it delegates to or spawns) that wait "
        "for a person's approval, on top of the agent's, the run's and the team's: tool names or patterns "
        "(vfs_write, mcp__github__*, mcp_unmarked), or mappings {tool, deadline_s, default, reason}."))
    guardrails: list[str] = Field(default_factory=list, max_length=MAX_GUARDRAILS, description=(
        "Slugs of the team's guardrails that check the sessions of the step (its agent's, and those of the agents "
        "it delegates to or spawns), on top of the team's defaults, the agents' and the run's."))

    @field_validator("approval")
    @classmethod
    def _approval(cls, value: list[Any]) -> list[Any]:
        from agents_app.approvals.policy import entries_check

        return entries_check(value)

    @field_validator("output_schemas")
    @classmethod
    def _schemas(cls, value: dict[str, dict[str, Any]], info: ValidationInfo) -> dict[str, dict[str, Any]]:
        outputs = info.data.get("outputs") or []
        for name, schema in value.items():
            if name not in outputs:
                raise ValueError(f"{name!r} is not a declared output (outputs: {', '.join(outputs) or 'none'})")
            problem = schema_problem(schema)
            if problem:
                raise ValueError(f"{name}: {problem}")
        return value


class WorkflowLoop(Strict):
    """A group of steps that repeats until ``until`` holds or ``max_rounds`` rounds have run."""

    steps: list[str] = Field(min_length=1, max_length=50, description="The steps that repeat together.")
    until: str | None = Field(default=None, min_length=1, max_length=300, description=(
        'Ends the loop when it holds on the round\'s outputs: <step>.<output> == "text" (or != "text", or '
        'contains "text").'))
    max_rounds: int = Field(ge=1, le=20, description="Rounds at most (1 to 20).")


class WorkflowSpec(Strict):
    name: Name
    description: str = ""
    trigger: Literal["manual", "schedule", "channel"] = "manual"
    schedule: str | None = None
    channel: str | None = None
    inputs: list[str] = Field(default_factory=list)
    expose: bool = Field(default=False, description=(
        "Reachable through the doors beside MAS's own API, by the team's tokens: the OpenAI-compatible endpoint "
        "(model = workflow:<slug>)."))
    on_failure: Literal["stop", "continue"] = "stop"
    steps: list[WorkflowStep] = Field(min_length=1)
    loops: list[WorkflowLoop] = Field(default_factory=list, max_length=10, description=(
        "Bounded loops: groups of steps that repeat, each round's prompts reading the latest round's outputs."))

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is not None:
            from workflows_app.triggers import cron

            cron(value)  # its ValueError says what is wrong
        return value

    @model_validator(mode="after")
    def _graph(self, info: ValidationInfo) -> "WorkflowSpec":
        if self.trigger == "schedule" and not self.schedule:
            raise ValueError("schedule: required when trigger is schedule")
        if self.trigger == "channel" and not self.channel:
            raise ValueError("channel: required when trigger is channel")
        known_agents = (info.context or {}).get("known_agents")
        errors = validate_graph(self.steps, inputs=self.inputs, known_agents=known_agents, loops=self.loops)
        if errors:
            raise ValueError("; ".join(str(error) for error in errors))
        for index, step in enumerate(self.steps):
            try:
                known_guardrails_check(step.guardrails, info)
            except ValueError as error:
                raise ValueError(f"steps[{index}].guardrails: {error}") from None
        return self

    def levels(self) -> list[list[str]]:
        """Step ids grouped so that each group can run in parallel, in order."""
        return topological_levels({step.id: list(step.depends_on) for step in self.steps})


__all__ = ["WorkflowLoop", "WorkflowSpec", "WorkflowStep"]
