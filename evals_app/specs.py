"""Frontmatter schema of eval datasets (``defs/evals/<slug>.md``): cases, their fixtures and checks.

A dataset tests one agent (``agent``) or one workflow (``workflow``). Each case gives the task (or the
workflow's inputs), optional fixtures — workspace files present before the run starts and a script for
the agents that are *not* under test — and the checks its run must pass (``evals_app.scorers``).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from mas_core.outputs import schema_problem
from agents_app.llm.scripted import validate_script
from mas_core.specs import TIERS, ModelRef, Name, Strict

MAX_CASES = 100
MAX_CHECKS = 20
MAX_FILES = 20
MAX_FILE_CHARS = 100_000
MAX_TASK_CHARS = 20_000
MAX_PATTERN_CHARS = 500
CASE_ID = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
FILE_PATH = re.compile(r"^(?!/)(?!.*(?:^|/)\.\.(?:/|$))[^\x00]{1,500}$")

CheckType = Literal[
    "exact", "contains", "not_contains", "regex", "json_schema",
    "tool_called", "tool_not_called", "max_tool_calls",
    "file", "max_cost_usd", "max_tokens", "max_duration_s", "status", "judge", "guardrail_fired",
    "guardrail_not_fired",
]
TEXT_CHECKS = {"exact", "contains", "not_contains", "regex", "json_schema"}
BOUND_CHECKS = {"max_cost_usd", "max_tokens", "max_duration_s"}
TARGET = r"^(result|output:[A-Za-z_][A-Za-z0-9_-]{0,63}(\.[A-Za-z_][A-Za-z0-9_-]{0,63})?)$"


class CheckSpec(Strict):
    """One check of a case; which fields it needs depends on its ``type``."""

    type: CheckType
    target: str = Field(default="result", pattern=TARGET, description=(
        "What a text check reads: the run's final result, or output:<name> (a value set with set_output, or a "
        "workflow step's named output; output:<step>.<name> names the step)."))
    value: str | None = Field(default=None, max_length=MAX_FILE_CHARS, description=(
        "exact/contains/not_contains: the text (exact without value compares with the case's reference)."))
    pattern: str | None = Field(default=None, max_length=MAX_PATTERN_CHARS, description="regex: the pattern.")
    json_schema: dict[str, Any] | None = Field(default=None, description="json_schema: the JSON Schema.")
    tool: str | None = Field(default=None, max_length=200, description="tool_called/tool_not_called/max_tool_calls.")
    args: dict[str, Any] | None = Field(default=None, description=(
        "tool_called: arguments the call must have (a subset; a value {regex: …} matches text)."))
    path: str | None = Field(default=None, max_length=500, description="file: the workspace path.")
    contains: str | None = Field(default=None, max_length=MAX_FILE_CHARS, description="file: text it must hold.")
    # int | float: an integer bound stays one, so the markdown mirror writes `max: 2`, not `max: 2.0`.
    max: int | float | None = Field(default=None, ge=0, le=1e12, description="max_*: the bound.")
    equals: Literal["succeeded", "failed", "cancelled"] | None = Field(default=None, description="status: the status.")
    rubric: str | None = Field(default=None, max_length=MAX_TASK_CHARS, description="judge: what a good answer does.")
    min_score: float = Field(default=0.5, ge=0, le=1, description="judge: the score from which it passes.")
    guardrail: str | None = Field(default=None, max_length=100, description=(
        "guardrail_fired/guardrail_not_fired: the guardrail's slug (whether the run had a guardrail_triggered "
        "event of it)."))

    @model_validator(mode="after")
    def _needs(self) -> CheckSpec:
        kind = self.type
        missing = {
            "contains": not self.value, "not_contains": not self.value, "regex": not self.pattern,
            "json_schema": self.json_schema is None, "tool_called": not self.tool, "tool_not_called": not self.tool,
            "max_tool_calls": self.max is None, "file": not self.path, "max_cost_usd": self.max is None,
            "max_tokens": self.max is None, "max_duration_s": self.max is None, "status": self.equals is None,
            "judge": not self.rubric, "guardrail_fired": not self.guardrail, "guardrail_not_fired": not self.guardrail,
        }.get(kind, False)
        if missing:
            need = {"contains": "value", "not_contains": "value", "regex": "pattern", "json_schema": "json_schema",
                    "tool_called": "tool", "tool_not_called": "tool", "max_tool_calls": "max", "file": "path",
                    "max_cost_usd": "max", "max_tokens": "max", "max_duration_s": "max", "status": "equals",
                    "judge": "rubric", "guardrail_fired": "guardrail", "guardrail_not_fired": "guardrail"}[kind]
            raise ValueError(f"a {kind} check needs {need}")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as error:
                raise ValueError(f"pattern {self.pattern!r}: {error}") from None
        if self.json_schema is not None:
            problem = schema_problem(self.json_schema)
            if problem:
                raise ValueError(f"schema {problem}")
        if self.path is not None and not FILE_PATH.match(self.path):
            raise ValueError(f"path {self.path!r}: a relative workspace path")
        return self


class CaseSpec(Strict):
    id: str = Field(pattern=CASE_ID, description="Unique in the dataset: names the case in results.")
    task: str | None = Field(default=None, max_length=MAX_TASK_CHARS, description="The task of the agent under test.")
    inputs: dict[str, str] | None = Field(default=None, description="A workflow dataset: the workflow's inputs.")
    files: dict[str, str] = Field(default_factory=dict, description=(
        "Fixtures: workspace files (path → text) present before the run starts."))
    script: dict[str, list[dict[str, Any]]] | None = Field(default=None, description=(
        "Fixtures: scripted turns of the agents that are not under test (agents it does not name call the "
        "team's models)."))
    reference: str | None = Field(default=None, max_length=MAX_FILE_CHARS, description=(
        "The expected result (an exact check without value compares with it; the judge sees it)."))
    checks: list[CheckSpec] = Field(min_length=1, max_length=MAX_CHECKS)

    @field_validator("files")
    @classmethod
    def _files(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_FILES:
            raise ValueError(f"at most {MAX_FILES} fixture files")
        for path, text in value.items():
            if not FILE_PATH.match(path):
                raise ValueError(f"{path!r}: a relative workspace path")
            if len(text) > MAX_FILE_CHARS:
                raise ValueError(f"{path}: at most {MAX_FILE_CHARS} characters")
        return value

    @field_validator("script")
    @classmethod
    def _script(cls, value: dict[str, list[dict[str, Any]]] | None) -> dict[str, list[dict[str, Any]]] | None:
        if value is not None:
            validate_script(value)
        return value


class JudgeSpec(Strict):
    """The model that scores ``judge`` checks, billed to the eval's own budget."""

    model: ModelRef = Field(description="provider:model or a tier, among the team's providers.")
    max_cost_usd: float = Field(default=1.0, ge=0, le=10_000, description="The judge's budget per eval run.")
    script: list[dict[str, Any]] | None = Field(default=None, description=(
        "The judge's turns when its provider is scripted (tests, demos)."))

    @field_validator("script")
    @classmethod
    def _script(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if value is not None:
            validate_script({"judge": value})
        return value


class EvalSpec(Strict):
    name: Name
    description: str = ""
    agent: str | None = Field(default=None, max_length=100, description="The agent under test (its slug).")
    workflow: str | None = Field(default=None, max_length=100, description="Or the workflow under test.")
    judge: JudgeSpec | None = None
    allow_real_models: bool = Field(default=False, description=(
        "Let the cases' runs call the team's real models for the agents a case does not script (the agent "
        "under test, as a rule). Without it an eval calls no real model: while the team has a real provider, a "
        "case leaving an agent it starts unscripted is refused when the eval starts, and any such call during a "
        "run fails (the bundled demo recording, no real model, still stands in when the team has none)."))
    timeout_s: int | float = Field(default=600, gt=0, le=86_400, description="How long one case's run may take.")
    cases: list[CaseSpec] = Field(min_length=1, max_length=MAX_CASES)

    @model_validator(mode="after")
    def _target(self, info: ValidationInfo) -> EvalSpec:
        if bool(self.agent) == bool(self.workflow):
            raise ValueError("agent: name the agent under test, or a workflow (one of them)")
        self._check_names(info.context or {})
        seen: set[str] = set()
        for index, case in enumerate(self.cases):
            if case.id in seen:
                raise ValueError(f"cases[{index}].id: {case.id!r} is the id of an earlier case")
            seen.add(case.id)
            if self.agent and not case.task:
                raise ValueError(f"cases[{index}].task: a case of an agent's dataset needs a task")
            if self.workflow and case.inputs is None:
                raise ValueError(f"cases[{index}].inputs: a case of a workflow's dataset needs inputs")
        return self

    def _check_names(self, context: dict[str, Any]) -> None:
        """On save, the agent or workflow under test and the judge's provider must be the team's own.

        The context (mas_core.definitions.services.validation_context) holds the team's names; a kept
        version read back has none and is not checked again.
        """
        for field, value, known_key, label in (("agent", self.agent, "known_agents", "agent"),
                                               ("workflow", self.workflow, "known_workflows", "workflow")):
            known = context.get(known_key)
            if value and known is not None and value not in known:
                raise ValueError(f"{field}: no {label} {value!r} in this team (its {label}s: "
                                 f"{', '.join(sorted(known)) or 'none'})")
        providers = context.get("known_providers")
        if self.judge is not None and providers is not None and self.judge.model not in TIERS:
            slug = self.judge.model.partition(":")[0]
            if slug not in providers:
                raise ValueError(f"judge.model: no model provider {slug!r} in this team (its providers: "
                                 f"{', '.join(sorted(providers)) or 'none'})")

    def case(self, case_id: str) -> CaseSpec | None:
        return next((case for case in self.cases if case.id == case_id), None)
