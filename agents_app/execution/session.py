"""One session on the worker's loop: the plain kernel wired to Postgres, Channels and tools.

``execute_activation`` claims the activation, builds (or resumes) the
session's state, runs :func:`agents_app.kernel.loop.run_session` with a store
that writes every checkpoint and event to the database and pushes events to
websockets after commit, records the outcome, and dispatches what comes next.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection

from agents_app.approvals.gate import ApprovalFailed, Gate, Verdict
from agents_app.approvals.policy import Rule, policy_rules
from agents_app.execution.agents import AgentDefinition, agent_register
from agents_app.execution.children import CHILD_KINDS, OUTCOME_KEYS, child_for_call, child_spawn, parent_signal
from agents_app.execution.compaction import SUMMARY_MAX_TOKENS, SUMMARY_SYSTEM, Compaction, result_kept
from agents_app.execution.errors import InvalidOutput, LimitExceeded, RunError
from agents_app.execution.guardrail_calls import RemoteChecks
from agents_app.execution.guardrails import SessionGuard, guardrails_sql, rows_read, session_guard
from agents_app.execution.journal import journal_load
from agents_app.execution.lifecycle import (
    SessionStart,
    session_begin,
    session_begin_failed,
    session_settle,
    session_suspend,
)
from agents_app.execution.modelchoice import model_resolve
from agents_app.execution.remote import remote_session
from agents_app.execution.runs import DEFAULT_PRIORITY
from agents_app.execution.store import (
    COMPACTOR_KEY,
    DatabaseStore,
    DatabaseWorkspace,
    SessionTakenOver,
    WriteRefused,
    monitor,
)
from agents_app.execution.tool_requests import output_set, tool_worker_activation
from agents_app.execution.versions import mcp_pinned, tools_pinned
from agents_app.kernel.context import estimate_tokens, request_chars, window_for
from agents_app.kernel.loop import GuardrailTripped, PolicyDenied, SessionConfig, SessionState, ToolResult, run_session
from agents_app.kernel.prompt import ExecutionContext, WorkspaceEntry, build_messages, build_system_prompt
from agents_app.kernel.results import FailureReport, Limits, Meta, SessionOutcome
from agents_app.llm.pricing import cost_at_most, usage_cost
from agents_app.llm.registry import Resolved
from agents_app.llm.scripted import MemoryCursor
from agents_app.models import Activation, ActivationContext, Run, Session
from agents_app.money import money_str
from agents_app.skills import skill_text, skills_for, skills_section
from mas_core import lanes, phases, telemetry
from mas_core.llm_types import Message, ModelRequest, ModelResponse, ProviderError, ToolCall, ToolSchema
from mas_core.logs import bind
from mas_core.outputs import INVALID_OUTPUT, answer_check, answer_format
from mas_core.runner import db
from memory_app.cache import cached_model
from memory_app.selectors import FINDINGS_SQL, run_findings
from tools_app.catalog import BUILTIN_TOOLS
from tools_app.custom import custom_tool, worker_definition
from tools_app.mcp.bridge import SessionServers, agent_servers, rows_for
from tools_app.paths import is_agent_file, normalise_path
from tools_app.plugin import ToolContext, ToolError, ToolSuspended
from tools_app.registry import DATABASE_ERRORS, ToolRegistry, registry_for_agent
from tools_app.specs import CustomToolSpec

logger = logging.getLogger(__name__)

WORKER = f"{socket.gethostname()}:{os.getpid()}"
# Tools that touch nothing but the run's files, which are written through the session's store.
WORKSPACE_TOOLS = frozenset({"vfs_read", "vfs_write", "vfs_edit", "vfs_list", "vfs_delete", "vfs_search"})
# Tools whose file write the store may commit with the checkpoint recording their result (see ToolCaller).
HELD_WRITES = frozenset({"vfs_write", "vfs_edit"})


def _agent_path(arguments: dict[str, Any]) -> bool:
    """Whether the call writes an agent's definition (or a path the tool will refuse anyway)."""
    try:
        return is_agent_file(normalise_path(arguments.get("path", "")))
    except Exception:  # noqa: BLE001 - the tool reports it
        return True


# -- the model --------------------------------------------------------------------------


@dataclass
class ModelHandle:
    """A resolved provider and model, as the kernel loop wants it."""

    resolved: Resolved
    tier: str
    cursor: MemoryCursor | None = None
    span: Any = None  # the session's trace span, when tracing is on (mas_core.telemetry)

    @property
    def model(self) -> str:
        return self.resolved.model

    async def complete(self, request: ModelRequest, *, on_chunk=None) -> ModelResponse:
        async with lanes.away():  # other sessions use the loop meanwhile (mas_core.lanes)
            return await self._complete(request, on_chunk=on_chunk)

    async def _complete(self, request: ModelRequest, *, on_chunk=None) -> ModelResponse:
        if self.span is None:
            return await self.resolved.provider.complete(request, on_chunk=on_chunk)
        span = telemetry.child_span(self.span, f"chat {self.model}", {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": self.resolved.provider.name,
            "gen_ai.request.model": self.model, "mas.provider": self.resolved.provider_slug, "mas.tier": self.tier})
        try:
            response = await self.resolved.provider.complete(request, on_chunk=on_chunk)
        except BaseException as error:
            telemetry.end(span, error=f"{type(error).__name__}: {error}")
            raise
        telemetry.end(span, attributes={
            "gen_ai.response.model": response.model or self.model,
            "gen_ai.usage.input_tokens": response.usage.prompt_tokens,
            "gen_ai.usage.output_tokens": response.usage.completion_tokens,
            "gen_ai.response.finish_reasons": [response.finish_reason] if response.finish_reason else None})
        return response

    def cost(self, response: ModelResponse) -> Decimal:
        return usage_cost(response.usage, self.resolved.prices)

    def cost_at_most(self, *, prompt_tokens: int, max_tokens: int | None) -> Decimal:
        return cost_at_most(self.resolved.prices, prompt_tokens=prompt_tokens, max_tokens=max_tokens,
                            output_limit=self.resolved.limits.max_output_tokens)


def kernel_services(*, run: Run, activation_id, tool_call_ids: dict[str, str], session_id=None,
                    agent: str = "", outputs_set: set[str] | None = None, gate: Gate | None = None) -> dict[str, Any]:
    """What the built-in tools may ask of the kernel, as async callables.

    ``tool_call_ids["current"]`` is the id of the tool call being run, so a
    custom tool's worker is found again (not started twice) after a crash.
    ``outputs_set`` collects the names of the outputs set_output accepted.
    """

    def refusing(func):
        async def call(**kwargs):
            try:
                return await db(func)(**kwargs)
            except RunError as error:
                refusal = ToolError(str(error))
                if isinstance(error, LimitExceeded):
                    refusal.kind = "policy_denied"
                raise refusal from None

        return call

    async def started(child: Activation, *, wait: bool, verb: str) -> str:
        """A waiting call's result is the child's outcome (the session suspends until it exists)."""
        if not wait:
            return (f"{verb} {child.agent} (activation {child.id}). It works on its own; its outcome will reach "
                    f"you as a message when it ends.")
        outcome = child.ctx.outcome
        if outcome is None:
            raise ToolSuspended(str(child.id))
        # Stored as jsonb, which does not keep key order: the text the model reads has one order.
        return json.dumps({key: outcome.get(key) for key in OUTCOME_KEYS}, ensure_ascii=False)

    async def spawn(*, filename: str, content: str, task: str, wait: bool = True, write=None) -> str:
        key = tool_call_ids.get("current", "")
        child = await db(child_for_call)(activation_id=activation_id, call_key=key)
        if child is None:  # not asked before this call was interrupted or suspended
            slug = await refusing(agent_register)(run=run, path=filename, content=content)
            if write is not None:
                await write(filename, content)
            child = await refusing(child_spawn)(activation_id=activation_id, agent=slug, task=task,
                                                         kind="spawn", call_key=key, wait=wait)
        return await started(child, wait=wait, verb="Spawned")

    async def delegate(*, agent: str, task: str, priority: int | None = None, context: Any = None,
                       wait: bool = True) -> str:
        child = await refusing(child_spawn)(
            activation_id=activation_id, agent=agent, task=task, kind="delegate",
            priority=priority if priority is not None else DEFAULT_PRIORITY,
            context=ActivationContext(parent_context=context) if context is not None else None,
            call_key=tool_call_ids.get("current", ""), wait=wait,
        )
        return await started(child, wait=wait, verb="Delegated to")

    async def signal_parent(*, message: str) -> str:
        signal = await refusing(parent_signal)(activation_id=activation_id, message=message)
        return f"Signalled {signal.agent}."

    async def set_output(*, name: str, value: Any) -> str:
        try:
            await db(output_set)(activation_id=activation_id, name=name, value=value)
        except InvalidOutput as error:
            refusal = ToolError(str(error))
            refusal.kind = INVALID_OUTPUT  # the loop counts it as a corrective turn
            raise refusal from None
        if outputs_set is not None:
            outputs_set.add(name)
        return f"Output {name} set."

    async def run_custom_tool(*, tool, prompt: str) -> str:
        child = await db(tool_worker_activation)(
            activation_id=activation_id, tool_call_id=tool_call_ids.get("current", ""),
            worker=worker_definition(tool), prompt=prompt,
        )
        if child.status not in {"done", "failed", "cancelled"}:
            await execute_activation(str(child.id))
        child = await db(lambda: Activation.objects.get(pk=child.id))()
        if child.status != "done":
            failure = await db(lambda: Session.objects.filter(activation=child).order_by("-attempt")
                               .values_list("failure", flat=True).first())()
            reason = f"{failure['kind']}: {failure['message']}" if failure else child.status
            raise ToolError(f"{tool.name}: its worker agent failed ({reason})")
        return child.result

    async def ask_human(*, question: str, choices: list[str]) -> str:
        if gate is None:
            raise ToolError("ask_human is not available in this context")
        waiting, answer = await gate.ask(call_id=tool_call_ids.get("call", ""), question=question, choices=choices)
        if waiting:
            raise ToolSuspended("a person's answer")
        return answer

    async def register_agent(path: str, content: str) -> str:
        return await refusing(agent_register)(run=run, path=path, content=content)

    async def unregister_agent(path: str) -> None:
        return None  # the file is gone: agent_resolve no longer finds it

    from memory_app.board import board_tool_services
    from memory_app.services import memory_tool_services

    return {"spawn": spawn, "delegate": delegate, "signal_parent": signal_parent, "set_output": set_output,
            "register_agent": register_agent, "unregister_agent": unregister_agent,
            "run_custom_tool": run_custom_tool, "ask_human": ask_human,
            **memory_tool_services(team_id=run.team_id, run_id=run.id, session_id=session_id, agent=agent),
            **board_tool_services(run_id=run.id, session_id=session_id, agent=agent)}


# -- the session ---------------------------------------------------------------------------


# The session's model, once resolved (its tier becomes the model's). Alone, the statement is a transaction of its
# own whose commit waited for the disk's flush (5.3 ms of a session start under bench/load.py): it does not wait
# (synchronous_commit off for its transaction only). The row is what every reader sees at once all the same;
# only a database crash within a fraction of a second could lose it, and the session's next write (waiting for
# its flush, which carries this one's) comes first: a session resumed after such a crash prepares again.
_MODEL_SQL = "UPDATE agents_app_session SET provider = %s, model = %s, tier = %s WHERE id = %s"
_MODEL_SQL_NO_FLUSH = ("WITH unflushed AS (SELECT set_config('synchronous_commit', 'off', true)) "
                       "UPDATE agents_app_session SET provider = %s, model = %s, tier = %s FROM unflushed WHERE id = %s")


def session_prepare(*, run: Run, session: Session, agent: AgentDefinition, ref: str,
                    cursor: MemoryCursor) -> tuple[Resolved, list[CustomToolSpec]]:
    """The session's model (recorded on its row, whose tier becomes the model's) and the team custom tools
    it may call, at the run's versions of them."""
    resolved, notice = model_resolve(run=run, ref=ref, tier=session.tier, cursor=cursor, agent=agent.slug)
    if notice:
        Run.objects.filter(pk=run.id, notice="").update(notice=notice)
    session.tier = resolved.tier or session.tier
    with connection.cursor() as cursor:
        # Inside a caller's transaction the setting would reach its commit too: there, the plain statement.
        cursor.execute(_MODEL_SQL if connection.in_atomic_block else _MODEL_SQL_NO_FLUSH,
                       [resolved.provider_slug, resolved.model, session.tier, session.id])
    names = [name for name in agent.spec.tools or [] if name not in BUILTIN_TOOLS]
    specs = tools_pinned(run=run, names=names) if names else []
    return resolved, [CustomToolSpec.model_validate(spec) for spec in specs]


async def _consolidate(*, state: SessionState, model: ModelHandle, store: DatabaseStore, run: Run, session_id,
                       agent: str) -> None:
    """Let the model pick what this session taught it (see memory_app.consolidation); failures are events."""
    from memory_app.consolidation import ConsolidationError, consolidate
    from memory_app.services import consolidation_apply, consolidation_nearest

    async def ask(request: ModelRequest) -> str:
        # The run's budget holds for these calls too (PolicyDenied).
        prompt = estimate_tokens(request_chars(request.messages, request.tools), state.token_ratio)
        await store.before_model_call(state, worst_usd=model.cost_at_most(prompt_tokens=prompt,
                                                                          max_tokens=request.max_tokens))
        try:
            await store.emit("llm_request", {"model": model.model, "tier": model.tier, "purpose": "consolidation",
                                             "messages": len(request.messages), "tools": 0})
            response = await model.complete(request)
        finally:
            store.after_model_call()
        await store.emit("llm_response", {
            "model": response.model or model.model, "finish_reason": response.finish_reason, "text": response.text,
            "tool_calls": [], "purpose": "consolidation",
            "usage": {"prompt_tokens": response.usage.prompt_tokens,
                      "completion_tokens": response.usage.completion_tokens},
            "cost_usd": money_str(model.cost(response)),
        })
        return response.text

    async def nearest(content: str):
        return await db(consolidation_nearest)(team_id=run.team_id, agent=agent, content=content)

    async def apply(decision: str, candidate: dict, existing, merged) -> None:
        await store.flush()  # the model call's events come before the decision's
        await db(consolidation_apply)(team_id=run.team_id, run_id=run.id, session_id=session_id, agent=agent,
                                      decision=decision, candidate=candidate, existing=existing, merged=merged)

    try:
        await consolidate(messages=state.messages, model=model, agent=agent, ask=ask, nearest=nearest, apply=apply)
    except PolicyDenied as error:
        await store.emit("error", {"where": "consolidation", "kind": "policy_denied", "message": str(error)})
    except (ConsolidationError, ProviderError) as error:
        await store.emit("error", {"where": "consolidation", "kind": getattr(error, "kind", "invalid"),
                                   "message": str(error)})


def _summariser(*, run: Run, resolved: Resolved, cursor: MemoryCursor, store: DatabaseStore):
    """The compactor's writer: the team's small tier (the session's own model when the team has none),
    called under the run's budget and accounted on it like any model call."""
    chosen: list[Resolved] = []

    async def summarise(state: SessionState, text: str) -> str:
        if not chosen:
            try:
                chosen.append((await db(model_resolve)(run=run, ref="small", tier="small", cursor=cursor))[0])
            except ProviderError:
                chosen.append(resolved)
        small = chosen[0]
        request = ModelRequest(model=small.model, messages=[Message(role="system", content=SUMMARY_SYSTEM),
                                                            Message(role="user", content=text)],
                               max_tokens=SUMMARY_MAX_TOKENS, agent=COMPACTOR_KEY,
                               timeout_s=settings.MAS_MODEL_TIMEOUT_S)
        # Reserved at the small model's prices and counted by its tier: the model this call makes.
        worst = cost_at_most(small.prices, prompt_tokens=estimate_tokens(request_chars(request.messages, []),
                                                                         state.token_ratio),
                             max_tokens=SUMMARY_MAX_TOKENS, output_limit=small.limits.max_output_tokens)
        try:
            await store.before_model_call(state, worst_usd=worst, tier=small.tier or "")
        except PolicyDenied as denied:
            raise ProviderError("bad_request", f"the run's budget allows no summary: {denied}") from None
        try:
            await store.emit("llm_request", {"model": small.model, "tier": small.tier or "",
                                             "purpose": "compaction", "messages": 2, "tools": 0})
            async with lanes.away():
                response = await asyncio.wait_for(small.provider.complete(request), timeout=request.timeout_s)
        except asyncio.TimeoutError:
            raise ProviderError("timeout", f"no summary within {request.timeout_s:.0f} s") from None
        finally:
            store.after_model_call()
        cost = usage_cost(response.usage, small.prices)
        state.prompt_tokens += response.usage.prompt_tokens
        state.completion_tokens += response.usage.completion_tokens
        state.cost_usd = str(Decimal(state.cost_usd) + cost)
        await store.emit("llm_response", {
            "model": response.model or small.model, "tier": small.tier or "", "purpose": "compaction",
            "finish_reason": response.finish_reason, "text": response.text, "tool_calls": [],
            "usage": {"prompt_tokens": response.usage.prompt_tokens,
                      "completion_tokens": response.usage.completion_tokens},
            "cost_usd": str(cost),
        })
        return response.text

    return summarise


@dataclass(frozen=True)
class TeamRules:
    """What a session takes from its team's row and its place in the run, read once at its start."""

    approval_policy: list | None
    result_limit: int  # bytes a tool result may hold before it is kept in a file
    scope: str  # see _results_scope
    team: str  # the team's slug
    guardrails: list[dict[str, Any]]  # the guardrails that apply to the session: {slug, spec} (guardrails_sql)


# What a session reads of its team and its run, in one statement: the team's approval policy and tool-result
# limit, whether the team has skills (none: skills_for reads no rows), how many activations of the agent
# the run had before this one (see _results_scope) and, for a new session, what its execution context
# reads: its parent's agent (a child's), the run's findings (memory_app.selectors.FINDINGS_SQL) and the
# run's files (a JSON array of [path, size in bytes, author], by path).
_RUN_READS_SQL = """SELECT t.approval_policy, t.tool_result_max_bytes, t.slug,
  """ + guardrails_sql(team="team", slugs="guardrails") + """,
  EXISTS (SELECT 1 FROM agents_app_skill WHERE team_id = %(team)s),
  (SELECT count(*) FROM agents_app_activation WHERE run_id = %(run)s AND agent = %(agent)s
   AND (created_at < %(created)s OR (created_at = %(created)s AND id < %(activation)s))){context}
FROM (SELECT 1) one LEFT JOIN agents_app_team t ON t.id = %(team)s"""
_RESUMED_READS_SQL = _RUN_READS_SQL.format(context="")
_NEW_READS_SQL = _RUN_READS_SQL.format(context=f""",
  (SELECT agent FROM agents_app_activation WHERE id = %(parent)s), ({FINDINGS_SQL}),
  (SELECT json_agg(json_build_array(path, octet_length(content), author) ORDER BY path)::text
   FROM agents_app_workspacefile WHERE run_id = %(run)s)""")


@dataclass(frozen=True)
class RunReads:
    """What a session reads of its team and its run (:data:`_RUN_READS_SQL`)."""

    rules: TeamRules
    team_has_skills: bool
    execution: ExecutionContext | None  # a new session's execution context; None when it resumes a history


def _run_reads(*, team_id: int, activation: Activation, attempt: int, new: bool,
               guardrails: list[str] | tuple[str, ...] = ()) -> RunReads:
    parent = activation.parent_id if activation.parent_id and activation.kind in CHILD_KINDS else None
    with connection.cursor() as cursor:
        cursor.execute(_NEW_READS_SQL if new else _RESUMED_READS_SQL, {
            "team": team_id, "run": activation.run_id, "agent": activation.agent, "created": activation.created_at,
            "activation": activation.id, "parent": parent, "guardrails": list(guardrails)})
        policy, own_limit, team, guards, team_has_skills, earlier, *context = cursor.fetchone()
    rules = TeamRules(approval_policy=None if policy is None else json.loads(policy),
                      result_limit=own_limit or settings.MAS_TOOL_RESULT_MAX_BYTES,
                      scope=_results_scope(ordinal=earlier + 1, attempt=attempt), team=team or "",
                      guardrails=rows_read(guards))
    return RunReads(rules=rules, team_has_skills=team_has_skills,
                    execution=_execution_context(activation, *context) if new else None)


def _results_scope(*, ordinal: int, attempt: int) -> str:
    """What tells this session's stored tool results from those of the agent's other sessions in the run: ""
    for the agent's first activation in the run (``ordinal`` 1) at its first attempt, else ``.<ordinal>`` and
    ``.<attempt>`` — the same in every run that does the same things, unlike the session's id."""
    return "" if (ordinal, attempt) == (1, 1) else f".{ordinal}" + (f".{attempt}" if attempt > 1 else "")


def _execution_context(activation: Activation, parent: str | None, findings: str | None,
                       files: str | None) -> ExecutionContext:
    """The execution context of an activation's first session: its task, what its parent passed along,
    the results of the workflow steps it depends on, the run's findings so far (the shared knowledge its
    agents added) and its files so far (path, size, author), as :data:`_RUN_READS_SQL` read them."""
    context = activation.ctx
    passed = context.parent_context
    if passed is not None and not isinstance(passed, str):
        passed = json.dumps(passed, ensure_ascii=False, indent=2)
    return ExecutionContext(
        task=activation.input, output_dir=f"out/{activation.agent}/", parent_context=passed or "",
        parent=parent or "", dependency_results=dict(context.dependencies or {}), findings=run_findings(findings),
        files=[WorkspaceEntry(path, size, author) for path, size, author in (json.loads(files) if files else [])],
    )


def _remembered(start: SessionStart) -> str:
    """The memories most relevant to the task (the agent's own and the team's shared), for its prompt."""
    from memory_app.selectors import memory_prompt_section, memory_search

    hits = memory_search(team_id=start.run.team_id, agent=start.agent.slug, query=start.activation.input,
                         k=start.agent.spec.memory.k)
    return memory_prompt_section(hits)


async def _initial_state(start: SessionStart, store: DatabaseStore, *, execution: ExecutionContext,
                         remembered: str = "", skills: str = "") -> SessionState:
    """A new session's history: the system prompt and the task with its execution context.

    Context too long for the tier is written to ``context/<agent>-<activation>/`` in the
    workspace first, so the pointers in the prompt lead to it.
    """
    spec = start.agent.spec
    sections = [("Skills", skills), ("What you remember", remembered),
                ("Answer format", answer_format(spec.output_schema) if spec.output_schema else "")]
    system = build_system_prompt(
        body=start.agent.body, context=spec.context, examples=[e.model_dump() for e in spec.examples],
        tier=start.session.tier, sections=[(title, text) for title, text in sections if text] or None,
    )
    messages, spilled = build_messages(system=system, execution=execution, tier=start.session.tier,
                                       spill_prefix=f"context/{start.activation.agent}-{str(start.activation.id)[:8]}/")
    for path, text in spilled.items():
        await store.file_write(path, text)
    return SessionState(messages=messages)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _skill_tool(registry, services: dict[str, Any], skills: list) -> None:
    """An agent with skills (or a team with rules) can read them in full with skill_load."""
    from tools_app.builtin.skill_load import SkillLoad

    if "skill_load" not in registry:
        registry.register(SkillLoad())

    async def load(*, name: str, query: str) -> str:
        try:
            return await db(skill_text)(skills, name, query)
        except LookupError as error:
            raise ToolError(str(error)) from None

    services["skill_load"] = load


async def _offered_tools(registry, *, task: str, services: dict[str, Any]) -> list:
    """What the model is offered: every tool, or above the discovery threshold the most relevant to the task.

    The list is the one the session loop reads each turn: ``tool_search`` adds what it finds to it.
    """
    from tools_app.builtin.tool_search import ToolSearch
    from tools_app.discovery import offered_names, rank

    discovering = len(registry) > settings.MAS_TOOL_DISCOVERY_THRESHOLD
    if discovering and "tool_search" not in registry:
        registry.register(ToolSearch())
    schemas = registry.schemas()
    catalogue = [(schema.name, schema.description) for schema in schemas]
    # Below the threshold every tool is offered (no hop to a database thread to learn it); an agent that lists
    # tool_search itself still searches them.
    names = await db(offered_names)(task, catalogue) if discovering else None
    offered = schemas if names is None else [schema for schema in schemas if schema.name in names]

    async def search(*, query: str, limit: int) -> list[tuple[str, str]]:
        ranked = await db(rank)(query, catalogue)
        found = [schema for name in ranked[:limit] for schema in schemas if schema.name == name]
        offered.extend(schema for schema in found if schema not in offered)
        return [(schema.name, schema.description) for schema in found]

    services["tool_search"] = search
    return offered


async def _write_refused(store: DatabaseStore, error: WriteRefused, state: SessionState,
                         model: ModelHandle) -> dict[str, Any]:
    """The database refused a checkpoint for what it holds: drop the unwritten part, fail the session.

    Writing it again would fail the same way, so the session neither stays
    ``running`` nor is resumed: it ends ``failed`` with a report, and the
    ``error`` event says what could not be kept.
    """
    dropped = await store.salvage()
    message = f"the database refused the session's checkpoint ({error}): its last step's usage is not counted"
    if dropped:
        message += f" and {dropped} event(s) of it were refused too"
    logger.error("checkpoint refused: the session fails", extra={"error": str(error), "dropped_events": dropped})
    await store.emit("error", {"where": "checkpoint", "kind": "unknown", "message": message})
    meta = Meta(steps=state.steps, tool_calls=state.tool_calls, model=model.model, tier=model.tier)
    return {"status": "failed", "result": state.partial_result(), "meta": meta.to_dict(), "failure": {
        "kind": "unknown", "message": message, "last_tool_calls": state.last_tool_calls(), "suggested_retry": False}}


# -- one session's work: begin → prepare → loop → settle ----------------------------------------


@dataclass
class ToolCaller:
    """Runs the model's tool calls for the kernel loop: the approval gate first, then the tool, its
    result kept within the team's size limit (a longer one is stored as a file, see ``result_kept``).

    ``ids`` is the dict :func:`kernel_services` reads: the call being run, so a tool that starts
    something (a child, a worker) finds it again after a crash instead of starting it twice.
    """

    registry: ToolRegistry
    gate: Gate
    context: ToolContext
    store: DatabaseStore
    ids: dict[str, str]
    session_id: Any
    agent: str
    span: Any  # the session's trace span (None when tracing is off)
    result_limit: int
    scope: str  # see _results_scope
    guard: SessionGuard | None = None  # an ``ask`` guardrail makes a call wait for a person as a policy does

    async def __call__(self, call: ToolCall) -> ToolResult:
        self.ids["current"], self.ids["call"] = f"{self.session_id}:{call.id}", call.id
        registry, gate = self.registry, self.gate
        holds = self.guard is not None and self.guard.asks_results(call.name)
        if holds:  # its result may be held for a person already: then the tool ran, and does not run again
            held = await gate.held(f"result:{call.id}")
            if held is not None:
                return _held_result(held)
        with phases.timed("gate"):
            rule = gate.rule(call.name, registry.get(call.name)) if call.name in registry else None
            if rule is None and self.guard is not None and call.name in registry:
                reason = await self.guard.asking(call)
                rule = Rule(pattern=call.name, reason=reason, source="guardrail") if reason else None
            if call.name not in WORKSPACE_TOOLS or rule is not None:
                # The tool may record events of its own (spawn, delegate, memory, ...):
                # this session's tool_call must be numbered before them.
                await self.store.flush()
            arguments = call.arguments
            if rule is not None:  # a person approves this call first (agents_app.approvals)
                verdict = await gate.call(call_id=call.id, name=call.name, arguments=call.arguments,
                                          schema=registry.schema(call.name), rule=rule)
                if verdict.suspend:
                    return ToolResult(ok=True, content="", suspended=True)
                if verdict.refusal is not None:
                    return ToolResult(ok=False, content=verdict.refusal, error_kind="rejected")
                arguments = verdict.arguments
        span = telemetry.child_span(self.span, f"execute_tool {call.name}", {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name, "gen_ai.tool.call.id": call.id})
        # A file write of vfs_write or vfs_edit is committed with the checkpoint that records its result (one
        # commit for both, and never one without the other): nothing else awaits the run's rows in between.
        # Not for an agent's definition, whose registration reads the run's rows from another connection.
        self.store.deferring = rule is None and call.name in HELD_WRITES and not _agent_path(arguments)
        try:
            with phases.timed("tool"):
                # A tool may wait long (a site, an MCP server, a sandbox): the turn goes to other sessions
                # meanwhile, unless the store holds a connection (a held file write) that must not wait for it.
                slow = not self.store.deferring and self.store.held is None
                async with lanes.away() if slow else contextlib.nullcontext():
                    outcome = await registry.call(call.name, arguments, self.context)
        except ToolSuspended:
            telemetry.end(span, attributes={"mas.tool.suspended": True})
            return ToolResult(ok=True, content="", suspended=True)
        finally:
            self.store.deferring = False
        telemetry.end(span, error=None if outcome.ok else (outcome.error_kind or "tool_error"))
        rejected = _text(call.arguments.get("value")) if outcome.error_kind == INVALID_OUTPUT else None
        with phases.timed("tool result kept"):
            content = await result_kept(name=call.name, call_id=call.id, arguments=call.arguments,
                                        content=outcome.content, agent=self.agent, max_bytes=self.result_limit,
                                        write=self.store.file_write, scope=self.scope)
        if holds:  # the other guardrails first: a person reads the result as the model would
            content = await self.guard.result(call, content)
            reason = await self.guard.asking_result(call, content)
            if reason:
                await self.store.flush()  # the guardrail's event before the request's
                await gate.hold(key=f"result:{call.id}", kind="result", name=call.name, content=content, reason=reason)
                return ToolResult(ok=True, content="", suspended=True)
        return ToolResult(ok=outcome.ok, content=content, error_kind=outcome.error_kind, rejected=rejected,
                          guarded=holds)


def _held_result(verdict: Verdict) -> ToolResult:
    """A tool's result a person was asked about, as the model reads it: as they let it (edited or not), or why
    it was withheld."""
    if verdict.suspend:
        return ToolResult(ok=True, content="", suspended=True)
    if verdict.refusal is not None:
        return ToolResult(ok=False, content=verdict.refusal, error_kind="rejected", guarded=True)
    return ToolResult(ok=True, content=verdict.arguments["result"], guarded=True)


@dataclass
class SessionWork:
    """What the steps of one session's work share once it is prepared (see :func:`execute_activation`)."""

    start: SessionStart
    store: DatabaseStore
    ladder: list[str]  # the agent's escalation rungs, for session_settle
    state: SessionState
    model: ModelHandle  # the session's model; its span is the session's trace span
    loop_model: Any  # the model as the loop calls it: behind the semantic cache when the agent enabled it
    tools: list[ToolSchema]  # the tool schemas offered to the model (tool_search adds to this list)
    call_tool: ToolCaller
    gate: Gate
    config: SessionConfig
    compactor: Compaction
    gates: list[str]  # a workflow step's gates: "start", "outputs"
    mcp: SessionServers | None

    @property
    def run(self) -> Run:
        return self.start.run

    @property
    def session(self) -> Session:
        return self.start.session

    @property
    def activation(self) -> Activation:
        return self.start.activation

    @property
    def agent(self) -> AgentDefinition:
        return self.start.agent


async def execute_activation(activation_id: str) -> None:
    """Run one activation's session on this worker.

    It reads in four steps: begin (claim the activation and its session), prepare (model, context,
    tools, approval gate, the loop's configuration), loop (the kernel, as a task the run's cancellation
    can stop) and settle (record how it ended and dispatch what comes next). It holds one of the
    process's turns throughout but while it waits for a model or a tool. A remote agent's session talks to
    its agent instead (:mod:`agents_app.execution.remote`).
    """
    async with lanes.turn():  # the process's loop, in turn with the other teams' sessions (mas_core.lanes)
        with phases.timed("session begin"):
            start = await _begin(activation_id)
        if start is None:
            return
        if start.agent.remote is None:
            with phases.timed("session prepare"):
                work = await _prepare(start)
            if work is None:  # its model could not be resolved: the session has failed and is settled
                return
            with phases.timed("session loop"):
                ending = await _loop(work)
            with phases.timed("session settle"):
                await _settle(work, ending)
    if start.agent.remote is not None:
        # A remote agent's session waits on another server, not on this loop: it holds no turn.
        await remote_session(start)
    phases.dump()


async def _begin(activation_id: str) -> SessionStart | None:
    """Claim the activation and its session (a new one, or the one to resume); None when there is
    nothing to run here."""
    try:
        start = await db(session_begin)(activation_id=activation_id, worker=WORKER)
    except DATABASE_ERRORS:
        raise  # nothing can be recorded now: the worker's scheduler hands the activation back
    except Exception as error:
        # Never left dispatched for the sweep to send again forever: tried again a bounded number of times.
        message = str(error) if isinstance(error, RunError) else f"{type(error).__name__}: {error}"
        logger.warning("session could not begin", extra={"activation": activation_id, "error": message})
        await db(session_begin_failed)(activation_id=activation_id, worker=WORKER, error=message)
        return None
    if start is not None:
        bind(run=str(start.run.id), session=str(start.session.id), agent=start.agent.slug)  # on every log line
    return start


async def _prepare(start: SessionStart) -> SessionWork | None:
    """Everything the loop needs, in this order: what it reads from the database (skills, the model, the
    team's rules, the execution context: one hop), the approval gate and the guardrails (which hold content
    for a person through it), the history, the tools, what runs a tool call, the loop's configuration. None
    when the model cannot be resolved."""
    run, session, activation, agent = start.run, start.session, start.activation, start.agent
    cursor = MemoryCursor(dict(run.script_cursor))
    store = DatabaseStore(run_id=run.id, session_id=session.id, agent=agent.slug, tier="", cursor=cursor,
                          budget=run.budget, team_id=run.team_id, claim=session.claim, writes=session.writes)
    ladder = list(agent.spec.escalation)
    reads = await _prepare_reads(start, store, cursor=cursor, ladder=ladder)
    if reads is None:
        return None
    resolved, skills, rules = reads.resolved, reads.skills, reads.rules
    store.tier = resolved.tier or ""  # the budget counts the model called, by its row's tier
    gate = _prepare_gate(start, team_policy=rules.approval_policy)
    guard = session_guard(rows=rules.guardrails, team=rules.team, system_prompt=agent.body, emit=store.emit,
                          ask=lambda: RemoteChecks(run=run, cursor=cursor, store=store, team=rules.team),
                          gate=gate, flush=store.flush)
    try:
        state = await _prepare_context(start, store, skills=skills, execution=reads.execution, guard=guard)
    except GuardrailTripped as tripped:  # the task itself was blocked: the session fails, settled at once
        await _prepare_failed(start, store, ladder=ladder, kind="guardrail", message=str(tripped))
        return None
    model = ModelHandle(resolved=resolved, tier=session.tier, cursor=cursor, span=await telemetry.session_span(
        run_id=run.id, session_id=session.id, agent=agent.slug, attempt=session.attempt,
        provider=resolved.provider.name, model=resolved.model))
    registry, mcp = await _prepare_tools(start, store, team_tools=reads.team_tools)
    outputs_set = set(activation.ctx.outputs or {})
    call_tool, offered = await _prepare_calls(start, store, registry=registry, gate=gate, skills=skills,
                                              outputs_set=outputs_set, span=model.span, rules=rules, guard=guard)
    config = _session_config(start, resolved=resolved, outputs_set=outputs_set, guard=guard)
    compactor = Compaction(agent=agent.slug, scope=call_tool.scope, window=config.window, write=store.file_write,
                           emit=store.emit,
                           summarise=_summariser(run=run, resolved=resolved, cursor=cursor, store=store))
    cache = agent.spec.memory.cache
    loop_model = cached_model(model, enabled=cache.enabled, similarity=cache.similarity, ttl_s=cache.ttl_s,
                              model_key=f"{resolved.provider_slug}:{resolved.model}", team_id=run.team_id,
                              run_id=run.id, agent=agent.slug, emit=store.emit)
    gates = list(activation.ctx.gate) if activation.kind == "step" else []
    return SessionWork(start=start, store=store, ladder=ladder, state=state, model=model, loop_model=loop_model,
                       tools=offered, call_tool=call_tool, gate=gate, config=config, compactor=compactor,
                       gates=gates, mcp=mcp)


@dataclass(frozen=True)
class SessionReads:
    """What preparing a session reads from the database, read in one hop (see :func:`session_reads`)."""

    skills: list
    resolved: Resolved
    team_tools: list[CustomToolSpec]
    rules: TeamRules
    execution: ExecutionContext | None  # a new session's execution context; None when it resumes a history


def session_reads(*, start: SessionStart, ref: str, cursor: MemoryCursor) -> SessionReads:
    """The agent's skills, the session's model and team custom tools (:func:`session_prepare`), its team's
    rules and, for a new session, its execution context: one hop to the database threads, not four."""
    run, session, activation, agent = start.run, start.session, start.activation, start.agent
    reads = _run_reads(team_id=run.team_id, activation=activation, attempt=session.attempt,
                       new=not _resumes_history(start), guardrails=_named_guardrails(start))
    skills = skills_for(team_id=run.team_id, names=agent.spec.skills, run=run, team_has_skills=reads.team_has_skills)
    resolved, team_tools = session_prepare(run=run, session=session, agent=agent, ref=ref, cursor=cursor)
    return SessionReads(skills=skills, resolved=resolved, team_tools=team_tools, rules=reads.rules,
                        execution=reads.execution)


def _named_guardrails(start: SessionStart) -> list[str]:
    """The guardrails the agent, the workflow step and the run name (the team's defaults apply besides)."""
    return [*start.agent.spec.guardrails, *(start.activation.ctx.step_guardrails or []), *start.run.guardrails]


def _resumes_history(start: SessionStart) -> bool:
    """The session goes on from its journal (a resumed session that had checkpointed), not from a new history."""
    return start.resumed and bool(start.session.state)


async def _prepare_reads(start: SessionStart, store: DatabaseStore, *, cursor: MemoryCursor,
                         ladder: list[str]) -> SessionReads | None:
    """What the session reads before it runs (:func:`session_reads`).

    A model that cannot be resolved fails the session here, settled at once: None.
    """
    session, activation, agent = start.session, start.activation, start.agent
    # An escalated attempt calls its rung's model, whatever the agent names as its own.
    ref = activation.ctx.rung or agent.spec.model or session.tier
    try:
        return await db(session_reads)(start=start, ref=ref, cursor=cursor)
    except ProviderError as error:
        await store.emit("error", {"where": "provider", "kind": error.kind, "message": str(error)})
        await _prepare_failed(start, store, ladder=ladder, kind="provider_error", message=str(error))
        return None


async def _prepare_failed(start: SessionStart, store: DatabaseStore, *, ladder: list[str], kind: str,
                          message: str) -> None:
    """A session that cannot run (its model unknown, its task blocked) fails before its loop, settled at once."""
    await store.close()
    failure = {"kind": kind, "message": message, "last_tool_calls": [], "suggested_retry": False}
    await db(session_settle)(run_id=start.run.id, session_id=start.session.id, status="failed", result="", meta={},
                             failure=failure, ladder=ladder)


async def _prepare_context(start: SessionStart, store: DatabaseStore, *, skills: list,
                           execution: ExecutionContext | None, guard: SessionGuard | None) -> SessionState:
    """The session's history: loaded from its journal when it resumes, else a new one (the system
    prompt with the agent's skills and what it remembers, the task with its execution context — the task as
    the ``run_input`` guardrails let it in)."""
    session, agent = start.session, start.agent
    if _resumes_history(start):
        counters = {key: value for key, value in session.state.items() if key in SessionState.__dataclass_fields__}
        state, store.journal = await db(journal_load)(session_id=session.id, counters=counters)
        return state
    if guard is not None and execution is not None and start.activation.kind != "root":
        # A root's task is the run's input, checked before the run was kept (execution.runs.run_start).
        execution.task = await guard.check("run_input", execution.task)
    remembered = await db(_remembered)(start) if agent.spec.memory.enabled else ""
    section = await db(skills_section)(skills, task=start.activation.input) if skills else ""
    return await _initial_state(start, store, execution=execution, remembered=remembered, skills=section)


async def _prepare_tools(start: SessionStart, store: DatabaseStore, *,
                         team_tools: list[CustomToolSpec]) -> tuple[ToolRegistry, SessionServers | None]:
    """The tools the agent may call: its built-ins, its own and the team's custom tools, and the tools
    of its MCP servers, connected for this session (their failures are events)."""
    run, activation, spec = start.run, start.activation, start.agent.spec
    allowed = spec.tools
    if activation.kind == "step" and allowed is not None and "set_output" not in allowed:
        allowed = [*allowed, "set_output"]  # a workflow step may always set its declared outputs
    registry = registry_for_agent(allowed, extra_tools=[custom_tool(tool) for tool in [*spec.custom_tools,
                                                                                       *team_tools]])
    mcp = SessionServers(emit=store.emit) if spec.mcp_servers else None
    if mcp is not None:
        pinned = await db(mcp_pinned)(run=run, slugs=[slug for slug, _ in agent_servers(spec.mcp_servers)])
        servers = await db(rows_for)(run.team_id, spec.mcp_servers, pinned)
        async with lanes.away():  # connecting may take its timeout: not on the loop's turn
            opened = await mcp.open(servers, team_id=run.team_id, db=db)
        for tool in opened:
            registry.register(tool)
    return registry, mcp


def _prepare_gate(start: SessionStart, *, team_policy: list | None) -> Gate:
    """The approval gate: the rules of the agent, the workflow step, the run and the team, in that order."""
    run, session, activation, agent = start.run, start.session, start.activation, start.agent
    return Gate(rules=policy_rules(agent=agent.spec.approval, step=activation.ctx.step_approval or None,
                                   run=run.approvals, team=team_policy),
                run_id=run.id, session_id=session.id, agent=agent.slug)


async def _prepare_calls(start: SessionStart, store: DatabaseStore, *, registry: ToolRegistry, gate: Gate,
                         skills: list, outputs_set: set[str], span: Any, rules: TeamRules,
                         guard: SessionGuard | None) -> tuple[ToolCaller, list[ToolSchema]]:
    """What runs the model's tool calls, and the tools offered to the model (all of them, or above the
    discovery threshold those that fit the task)."""
    run, session, activation, agent = start.run, start.session, start.activation, start.agent
    ids: dict[str, str] = {}
    context = ToolContext(
        run_id=str(run.id), agent=agent.slug, session_id=str(session.id),
        workspace=DatabaseWorkspace(store=store),
        services=kernel_services(run=run, activation_id=activation.id, tool_call_ids=ids,
                                 session_id=session.id, agent=agent.slug, outputs_set=outputs_set, gate=gate),
    )
    if skills:
        _skill_tool(registry, context.services, skills)
    offered = await _offered_tools(registry, task=activation.input, services=context.services)
    caller = ToolCaller(registry=registry, gate=gate, context=context, store=store, ids=ids, session_id=session.id,
                        agent=agent.slug, span=span, result_limit=rules.result_limit, scope=rules.scope,
                        guard=guard)
    return caller, offered


def _session_config(start: SessionStart, *, resolved: Resolved, outputs_set: set[str],
                    guard: SessionGuard | None) -> SessionConfig:
    """The loop's limits, retries, answer check, context window and guardrails, from the agent and the settings."""
    spec, activation = start.agent.spec, start.activation
    limits = spec.limits
    return SessionConfig(
        agent=start.agent.slug, temperature=spec.temperature, max_tokens=spec.max_tokens,
        limits=Limits(max_steps=limits.max_steps, max_tool_calls=limits.max_tool_calls, timeout_s=limits.timeout_s),
        provider_retries=settings.MAS_PROVIDER_RETRIES, backoff_s=settings.MAS_PROVIDER_BACKOFF_S,
        model_timeout_s=settings.MAS_MODEL_TIMEOUT_S,
        output_check=answer_check(schema=spec.output_schema,
                                  step_schemas=activation.ctx.output_schemas,
                                  answer_output=activation.ctx.answer_output, outputs_set=outputs_set),
        window=window_for(context_window=resolved.limits.context_window,
                          max_output_tokens=resolved.limits.max_output_tokens, max_tokens=spec.max_tokens,
                          threshold=settings.MAS_CONTEXT_THRESHOLD),
        guard=guard,
    )


async def _loop(work: SessionWork) -> dict[str, Any] | None:
    """Run the session as a task the monitor watches (heartbeats, the run's cancellation), then let go
    of what it held; how it ended, or None when nothing can be recorded now (it is resumed later)."""
    run, session, state, model, store = work.run, work.session, work.state, work.model, work.store
    loop_task = asyncio.create_task(_gated_run(work))
    monitor.watch(session.id, run.id, store, loop_task)
    ending: dict[str, Any] | None = None
    try:
        outcome = await loop_task
        ending = {"status": outcome.status, "result": outcome.result, "meta": outcome.meta.to_dict(),
                  "failure": outcome.failure.to_dict() if outcome.failure else None}
        if outcome.status == "ok" and work.agent.spec.memory.consolidate:
            await _consolidate(state=state, model=model, store=store, run=run, session_id=session.id,
                               agent=work.agent.slug)
    except DATABASE_ERRORS as error:
        # The database went away (restarted, unreachable): nothing can be recorded now. The session
        # stays running without a heartbeat, and the reaper resumes it from its last checkpoint.
        logger.warning("database unavailable: the session is left to be resumed",
                       extra={"run": str(run.id), "session": str(session.id), "error": str(error)})
        ending = None
    except SessionTakenOver:
        # Another worker claimed the session (this one was thought dead): it goes on from there, and this
        # worker records nothing more.
        logger.warning("session taken over by another worker: stopped here")
        ending = None
    except WriteRefused as error:
        ending = await _write_refused(store, error, state, model)
    except ApprovalFailed as error:  # a deadline passed whose default outcome is to fail: not retried
        await store.emit("error", {"where": "approval", "kind": "policy_denied", "message": str(error)})
        ending = {"status": "failed", "result": state.partial_result(), "meta": _meta(state, model).to_dict(),
                  "failure": {"kind": "policy_denied", "message": str(error),
                              "last_tool_calls": state.last_tool_calls(), "suggested_retry": False}}
    except asyncio.CancelledError:
        # The run was cancelled while the session waited (for a model, a tool):
        # it stops now, keeping its last checkpoint and partial result.
        ending = {"status": "cancelled", "result": state.partial_result(), "meta": _meta(state, model).to_dict(),
                  "failure": None}
    except Exception as error:  # a kernel bug must not leave the session running forever
        logger.exception("session crashed", extra={"run": str(run.id), "session": str(session.id)})
        message = f"{type(error).__name__}: {error}"
        await store.emit("error", {"where": "session", "kind": "unknown", "message": message})
        ending = {"status": "failed", "result": "", "meta": {}, "failure": {
            "kind": "unknown", "message": message, "last_tool_calls": state.last_tool_calls(),
            "suggested_retry": True}}
    finally:
        ending = await _release(work, ending)
    return ending


async def _gated_run(work: SessionWork) -> SessionOutcome:
    """The kernel loop, between a workflow step's gates (before it starts, before its outputs count)."""
    if "start" in work.gates:
        held = await _step_gate(work, "start", {"task": work.activation.input[:4000]})
        if held is not None:
            return held
    outcome = await run_session(state=work.state, model=work.loop_model, tools=work.tools, call_tool=work.call_tool,
                                store=work.store, config=work.config, compact=work.compactor)
    if outcome.status == "ok" and "outputs" in work.gates:
        outputs = await db(_step_outputs)(work.activation.id)
        held = await _step_gate(work, "outputs", {"result": outcome.result[:4000], "outputs": outputs})
        if held is not None:
            return held
    return outcome


async def _step_gate(work: SessionWork, where: str, details: dict[str, Any]) -> SessionOutcome | None:
    """A workflow step's gate: None once a person approved it, else the session's outcome (wait, or fail)."""
    state, step = work.state, work.activation.ctx.step
    verdict = await work.gate.step(where=where, details={"step": step, **details},
                                   reason=f"step {step} waits for approval "
                                          + ("before it starts" if where == "start" else "before its outputs are "
                                                                                         "accepted"))
    meta = _meta(state, work.model)
    if verdict.suspend:
        await work.store.checkpoint(state)
        return SessionOutcome(status="suspended", result=state.partial_result(), meta=meta)
    if verdict.refusal is not None:
        return SessionOutcome(status="failed", result=state.partial_result(), meta=meta, failure=FailureReport(
            kind="policy_denied", message=verdict.refusal, last_tool_calls=state.last_tool_calls()))
    return None


async def _release(work: SessionWork, ending: dict[str, Any] | None) -> dict[str, Any] | None:
    """Let go of what the session held (the monitor's watch, its MCP servers, its store, whose last
    events are written now); the ending to record, None when it cannot be recorded now."""
    monitor.forget(work.session.id)
    if work.mcp is not None:
        await work.mcp.close()
    try:
        await work.store.close()
    except SessionTakenOver:
        return None
    except DATABASE_ERRORS as error:  # its last events could not be written: resumed later, as in _loop
        logger.warning("database unavailable: the session is left to be resumed",
                       extra={"run": str(work.run.id), "session": str(work.session.id), "error": str(error)})
        return None
    except WriteRefused as error:
        ending = await _write_refused(work.store, error, work.state, work.model)
        await work.store.close()
    return ending


async def _settle(work: SessionWork, ending: dict[str, Any] | None) -> None:
    """Record how the session ended (suspended until what it waits for comes; else settled,
    which dispatches what comes next); nothing when it cannot be recorded now."""
    telemetry.end(work.model.span, error=None if ending is None or ending["status"] == "ok" else ending["status"],
                  attributes={"mas.session.status": ending["status"] if ending else "interrupted"})
    if ending is not None and ending["status"] == "suspended":
        awaited = await db(session_suspend)(run_id=work.run.id, session_id=work.session.id, result=ending["result"],
                                            meta=ending["meta"])
        logger.info("session suspended", extra={"waiting_for": awaited})
    elif ending is not None:
        await db(session_settle)(run_id=work.run.id, session_id=work.session.id, ladder=work.ladder, **ending)
        logger.info("session ended", extra={"status": ending["status"],
                                            "failure": (ending["failure"] or {}).get("kind")})


def _meta(state: SessionState, model: ModelHandle) -> Meta:
    return Meta(steps=state.steps, tool_calls=state.tool_calls, model=model.model, tier=model.tier,
                prompt_tokens=state.prompt_tokens, completion_tokens=state.completion_tokens,
                cost_usd=state.cost_usd)


def _step_outputs(activation_id) -> dict[str, Any]:
    """The outputs the step has set so far (set_output writes them on its activation's row)."""
    context = Activation.objects.filter(pk=activation_id).values_list("context", flat=True).first()
    return ActivationContext.from_json(context).outputs or {}
