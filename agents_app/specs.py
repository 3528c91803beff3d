"""Frontmatter schemas of agents, skills, model providers and guardrails.

One schema serves the markdown files, the REST API and the admin, so a
definition is valid or not in the same way whichever way it arrives.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from mas_core.netpolicy import private_url_refusal
from mas_core.secrets import env_refusal
from mas_core.specs import MAX_LADDER, TIERS, ModelRef, Name, Strict, Tier, checked_schema
from tools_app.catalog import BUILTIN_TOOLS
from tools_app.specs import CustomToolSpec

if TYPE_CHECKING:
    from mas_core.guardrails import DetectorError

MAX_GUARDRAILS = 50  # named by one agent, workflow step or run


def each_once(value: list[str], why: str = "") -> None:
    """Refuse a list naming something twice, saying which (and ``why`` it must be once)."""
    repeated = sorted({item for item in value if value.count(item) > 1})
    if repeated:
        raise ValueError(f"{', '.join(repeated)} appears more than once{why}")


def known_guardrails_check(value: list[str], info: ValidationInfo) -> list[str]:
    """Guardrail slugs, each once; each one of the team's when the caller knows them (``known_guardrails``)."""
    each_once(value)
    known = (info.context or {}).get("known_guardrails")
    unknown = [slug for slug in value if known is not None and slug not in known]
    if unknown:
        raise ValueError(unknown_guardrails(unknown, known))
    return value


def unknown_guardrails(unknown: list[str], known: set[str]) -> str:
    """Why ``unknown`` slugs are refused: the team's guardrails are ``known``."""
    return (f"unknown guardrail(s) {', '.join(unknown)}; the team's guardrails are: "
            f"{', '.join(sorted(known)) or 'none yet'}")


class AgentLimits(Strict):
    max_steps: int = Field(default=20, ge=1, le=1000)
    max_tool_calls: int = Field(default=50, ge=0, le=10000)
    timeout_s: int = Field(default=600, ge=1, le=86400)


class AgentCache(Strict):
    """The semantic cache of model responses (memory_app.cache); temperature 0 only."""

    enabled: bool = False
    similarity: float = Field(default=0.96, ge=0.8, le=1.0)  # of the request's last message to a cached one
    ttl_s: int = Field(default=86400, ge=1, le=30 * 86400)


class AgentMemory(Strict):
    enabled: bool = False
    k: int = Field(default=5, ge=1, le=100)
    consolidate: bool = False  # after a successful session, the model picks what to remember
    cache: AgentCache = Field(default_factory=AgentCache)


class AgentExample(Strict):
    task: str
    approach: str = ""
    outcome: str = ""


class AgentSpec(Strict):
    name: Name
    description: str = ""
    model: ModelRef | None = None
    tier: Tier | None = None
    # Rungs tried in order after failed attempts: tiers or provider:model references (agents_app.execution.escalation).
    escalation: list[ModelRef] = Field(default_factory=list, max_length=MAX_LADDER)
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    tools: list[str] | None = None
    custom_tools: list[CustomToolSpec] = Field(default_factory=list)
    mcp_servers: list[str | dict[str, Any]] = Field(default_factory=list)
    limits: AgentLimits = Field(default_factory=AgentLimits)
    memory: AgentMemory = Field(default_factory=AgentMemory)
    context: str = ""
    examples: list[AgentExample] = Field(default_factory=list)
    skills: list[str] = Field(default_factory=list)
    approval: list[str | dict[str, Any]] = Field(default_factory=list, description=(
        "Tool calls that wait for a person's approval: tool names or patterns (code_exec, mcp__github__*, "
        "mcp_unmarked for every MCP tool not marked read-only), or mappings {tool, deadline_s, default, reason} "
        "overriding the team's deadline and default outcome (reject, approve or fail)."))
    output_schema: dict[str, Any] | None = Field(default=None, description=(
        "A JSON Schema the final answer must match (read as JSON unless the schema asks for a string): an answer "
        "that does not gets one corrective turn, then the session fails as validation_failed."))
    expose: bool = Field(default=False, description=(
        "Reachable through the doors beside MAS's own API, by the team's tokens: the OpenAI-compatible endpoint "
        "(/v1/chat/completions and /v1/responses, model = the agent's slug)."))
    guardrails: list[str] = Field(default_factory=list, max_length=MAX_GUARDRAILS, description=(
        "Slugs of the team's guardrails that check this agent's sessions, on top of the team's defaults (and a "
        "workflow step's and a run's): each must be one of the team's guardrails when the agent is saved."))

    @field_validator("approval")
    @classmethod
    def _approval(cls, value: list[Any]) -> list[Any]:
        from agents_app.approvals.policy import entries_check

        return entries_check(value)

    @field_validator("output_schema")
    @classmethod
    def _output_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return checked_schema(value)

    @field_validator("guardrails")
    @classmethod
    def _guardrails(cls, value: list[str], info: ValidationInfo) -> list[str]:
        return known_guardrails_check(value, info)

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        # Built-in tools, or the team's own custom tools (rows of tools/) by
        # name when the caller knows them.
        if value is None:
            return None
        team_tools = set((info.context or {}).get("known_tools", ()))
        unknown = [name for name in value if name not in BUILTIN_TOOLS and name not in team_tools]
        if unknown:
            known = ", ".join([*BUILTIN_TOOLS, *sorted(team_tools)])
            raise ValueError(f"unknown tool(s) {', '.join(unknown)}; known tools are: {known}")
        return value

    @field_validator("escalation")
    @classmethod
    def _ladder_climbs(cls, value: list[str]) -> list[str]:
        # Tiers must climb; a model's tier is its provider row's, checked when the ladder is used.
        each_once(value, ": each rung is tried once")
        tiers = [rung for rung in value if rung in TIERS]
        for lower, higher in zip(tiers, tiers[1:]):
            if TIERS.index(higher) < TIERS.index(lower):
                raise ValueError(f"{higher} comes after {lower}: a ladder never steps down")
        return value

    @model_validator(mode="after")
    def _unique_custom_tools(self) -> "AgentSpec":
        names = [tool.name for tool in self.custom_tools]
        dupes = sorted({name for name in names if names.count(name) > 1})
        if dupes:
            raise ValueError(f"custom_tools: duplicate name(s) {', '.join(dupes)}")
        return self

    @model_validator(mode="after")
    def _not_a_remote_agent(self, info: ValidationInfo) -> "AgentSpec":
        name_free(self.name, (info.context or {}).get("remote_agents"), taken_by="a remote agent", kind="an agent")
        return self

    @model_validator(mode="after")
    def _cache_needs_temperature_zero(self) -> "AgentSpec":
        if self.memory.cache.enabled and self.temperature != 0:
            raise ValueError("memory.cache needs temperature: 0 (a cached answer may only stand in for a "
                             "deterministic one)")
        return self


class SkillSpec(Strict):
    # Skills written for other tools carry keys of their own (license,
    # allowed-tools, …): the markdown layer keeps them in ``extra``.
    name: Name
    description: str = ""


class ProviderModelSpec(Strict):
    name: Name
    tier: Tier | None = None
    input_price: Decimal = Field(default=Decimal(0), ge=0, max_digits=12, decimal_places=4)
    output_price: Decimal = Field(default=Decimal(0), ge=0, max_digits=12, decimal_places=4)
    # Tokens: left out, a well-known model's defaults apply (agents_app.llm.windows).
    context_window: int | None = Field(default=None, ge=1024, le=100_000_000)
    max_output_tokens: int | None = Field(default=None, ge=1, le=10_000_000)


def team_of(info: ValidationInfo) -> str | None:
    """The slug of the team a definition is validated for on save (None: read back, not saved)."""
    return (info.context or {}).get("team")


class ProviderSpec(Strict):
    name: Name
    description: str = ""
    type: Literal["scripted", "openai", "anthropic", "gemini"]
    base_url: str | None = None
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    models: list[ProviderModelSpec] = Field(default_factory=list)

    # On save only: the operator may change the declarations and the allow-list later, and a row saved before
    # is then refused when used (agents_app.llm.registry), not unreadable.
    @field_validator("api_key_env")
    @classmethod
    def _declared_for_the_team(cls, value: str | None, info: ValidationInfo) -> str | None:
        team = team_of(info)
        refusal = env_refusal(value, team=team) if value and team is not None else None
        if refusal:
            raise ValueError(refusal)
        return value

    @field_validator("base_url")
    @classmethod
    def _address_allowed(cls, value: str | None, info: ValidationInfo) -> str | None:
        refusal = private_url_refusal(value) if value and team_of(info) is not None else None
        if refusal:
            raise ValueError(refusal)
        return value

    @model_validator(mode="after")
    def _unique_models(self) -> "ProviderSpec":
        names = [model.name for model in self.models]
        dupes = sorted({name for name in names if names.count(name) > 1})
        if dupes:
            raise ValueError(f"models: duplicate name(s) {', '.join(dupes)}")
        return self


GUARDRAIL_POINTS = ("run_input", "model_request", "model_answer", "tool_arguments", "tool_result", "memory_write",
                    "outgoing")
GuardrailPoint = Literal["run_input", "model_request", "model_answer", "tool_arguments", "tool_result",
                         "memory_write", "outgoing"]
TOOL_POINTS = ("tool_arguments", "tool_result", "memory_write")  # the points ``tools`` narrows
ToolPattern = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_*?.\-\[\]]+$")]


def _detector_refusal(error: "DetectorError", value: dict[str, Any]) -> ValidationError:
    """A :class:`mas_core.guardrails.DetectorError` as the validation error of the place it names.

    ``error.field`` is ``detector.patterns[1]``: raised from the ``detector`` validator, the error's location
    (``patterns``, 1) is nested under the field by pydantic, so a file, the API and the admin all name
    ``detector.patterns.1`` (the API's ``loc``: ``["body", "detector", "patterns", 1]``).
    """
    path = error.field or "detector"
    inner = path.removeprefix("detector") if path.startswith(("detector.", "detector[")) or path == "detector" else ""
    loc = tuple(int(part) if part.isdigit() else part for part in re.findall(r"[^.\[\]]+", inner))
    return ValidationError.from_exception_data("GuardrailSpec", [InitErrorDetails(
        type=PydanticCustomError("guardrail_detector", "{message}", {"message": str(error)}), loc=loc, input=value)])


class GuardrailSpec(Strict):
    """A check on content where it enters or leaves a model (SPEC §11): where it applies, what detects, what is done.

    The body is notes for people; nothing reads it.
    """

    name: Name
    description: str = ""
    applies_to: list[GuardrailPoint] = Field(min_length=1, description=(
        "Where the guardrail checks: the run's input, each model request, the model's answer (streamed in chunks), "
        "tool arguments, tool results, memory writes, what leaves through the team's webhook (outgoing: every "
        "string of a notification's data) — at least one, each once."))
    tools: list[ToolPattern] = Field(default_factory=lambda: ["*"], max_length=50, description=(
        "Tool names or fnmatch patterns (web_fetch, mcp__*) whose calls the tool_arguments, tool_result and "
        "memory_write points check; every tool by default."))
    detector: dict[str, Any] = Field(description=(
        "What finds the content: a mapping with a type (pattern, keywords, pii, secrets, prompt_leak, injection, "
        "json_schema, length, language, llm_judge, webhook) and that type's settings, checked when saved."))
    action: Literal["block", "redact", "mask", "warn", "fence", "ask"] = Field(description=(
        "What a finding does: block (the session fails as guardrail), redact or mask the content (the original is "
        "never stored), warn (an event, nothing changed), fence (a tool result wrapped as untrusted data; "
        "applies_to tool_result only), ask (the tool call waits for a person's approval, as an approval policy's "
        "would, its result waits until a person lets the model read it, the answer until a person lets it out; "
        "applies_to tool_arguments, memory_write, tool_result or model_answer only)."))
    default: bool = Field(default=False, description=(
        "A team default: checks every run of the team, without being named by an agent, a step or the run."))

    @field_validator("applies_to")
    @classmethod
    def _points_once(cls, value: list[str]) -> list[str]:
        each_once(value)
        return value

    @field_validator("detector")
    @classmethod
    def _detector(cls, value: dict[str, Any]) -> dict[str, Any]:
        from mas_core.guardrails import DetectorError, detector_build

        try:
            detector_build(value)
        except DetectorError as error:
            raise _detector_refusal(error, value) from None
        return value

    @model_validator(mode="after")
    def _action_fits(self) -> "GuardrailSpec":
        if self.action == "ask" and not set(self.applies_to) <= {"tool_arguments", "memory_write", "tool_result",
                                                                 "model_answer"}:
            raise ValueError("action: ask makes a tool call, its result or the answer wait for a person: it needs "
                             "applies_to tool_arguments, memory_write, tool_result or model_answer, and nothing else")
        if self.action == "fence" and self.applies_to != ["tool_result"]:
            raise ValueError("action: fence marks a tool's result as untrusted data: it needs applies_to: "
                             "[tool_result] and nothing else")
        from mas_core.guardrails import REMOTE_DETECTORS

        asked = self.detector.get("type")
        if asked in REMOTE_DETECTORS and set(self.applies_to) & {"run_input", "outgoing"}:
            raise ValueError(f"detector: a {asked} asks a model or a service, which a session does; it cannot check "
                             "run_input (checked when the run is started, before it is kept: model_request sees "
                             "the task before any model does) nor outgoing")
        if self.tools != ["*"] and not set(self.applies_to) & set(TOOL_POINTS):
            raise ValueError(f"tools: narrows only the {', '.join(TOOL_POINTS)} points, and applies_to names none "
                             "of them")
        return self


MAX_REMOTE_HEADERS = 10


class RemoteAgentSpec(Strict):
    """An agent served elsewhere over A2A, which the team's agents delegate to and workflow steps name like one
    of its own (issue 25): where its agent card is, the headers that authenticate MAS to it, how long a task of
    it may take.

    ``card_url`` passes web_fetch's address policy (MAS_WEB_FETCH_ALLOW) on save and again on every connection,
    the card's own endpoint too. Header values carry credentials, so each one refers to a variable the operator
    declared for the team (MAS_TEAM_SECRETS) as ``${NAME}`` (``Bearer ${PARTNER_TOKEN}``): never a literal.
    """

    name: Name
    description: str = ""
    card_url: str = Field(max_length=500)
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: int = Field(default=600, ge=1, le=86_400)

    @field_validator("card_url")
    @classmethod
    def _address_allowed(cls, value: str, info: ValidationInfo) -> str:
        from mas_core.netpolicy import web_url_refusal

        if not re.match(r"^https?://", value):
            raise ValueError("must start with http:// or https://")
        refusal = web_url_refusal(value) if team_of(info) is not None else None  # on save (see ProviderSpec)
        if refusal:
            raise ValueError(refusal)
        return value

    @field_validator("headers")
    @classmethod
    def _declared_secrets(cls, values: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        from mas_core.secrets import references

        if len(values) > MAX_REMOTE_HEADERS:
            raise ValueError(f"at most {MAX_REMOTE_HEADERS} headers")
        team = team_of(info)
        for key, value in values.items():
            if not re.fullmatch(r"[A-Za-z0-9-]{1,100}", key):
                raise ValueError(f"{key!r} is not a header name (letters, digits and dashes)")
            names = references(value)
            if not names:
                raise ValueError(f"{key}: a header carries a credential, so it must refer to a secret the operator "
                                 f"declared for the team, as ${{NAME}} (for example 'Bearer ${{PARTNER_TOKEN}}'), "
                                 f"never hold one")
            for name in names if team is not None else ():
                refusal = env_refusal(name, team=team)
                if refusal:
                    raise ValueError(f"{key}: {refusal}")
        return values

    @model_validator(mode="after")
    def _not_an_agent(self, info: ValidationInfo) -> "RemoteAgentSpec":
        name_free(self.name, (info.context or {}).get("known_agents"), taken_by="an agent", kind="a remote agent")
        return self


def name_free(name: str, taken: set[str] | None, *, taken_by: str, kind: str) -> None:
    """Agents and remote agents share one namespace (a workflow step and delegate name either): refuse ``name``
    when its slug is among ``taken`` (the other kind's slugs, known on save)."""
    from django.utils.text import slugify

    slug = slugify(name)[:100]
    if taken and slug in taken:
        raise ValueError(f"name: the team has {taken_by} {slug!r}: {kind} needs a name of its own (workflow steps "
                         f"and delegate name both kinds alike)")
