"""One session on the worker's loop: the plain kernel wired to Postgres, Channels and tools.

``execute_activation`` claims the activation, builds (or resumes) the
session's state, runs :func:`agents_app.kernel.loop.run_session` with a store
that writes every checkpoint and event to the database and pushes events to
websockets after commit, records the outcome, and dispatches what comes next.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agents_app.events import events_insert, events_push_async
from agents_app.execution import services
from agents_app.kernel.loop import PolicyDenied, SessionConfig, SessionState, ToolResult, run_session
from agents_app.kernel.prompt import ExecutionContext, build_messages, build_system_prompt
from agents_app.kernel.results import Limits, Meta, SessionOutcome
from agents_app.llm.pricing import Prices, usage_cost
from agents_app.llm.registry import Resolved, provider_for
from agents_app.llm.scripted import MemoryCursor, ScriptedProvider
from agents_app.llm.types import ModelRequest, ModelResponse, ProviderError, ToolCall
from agents_app.models import Activation, ModelProvider, Run, Session, WorkspaceFile
from agents_app.specs import CustomToolSpec
from agents_app.runner import db
from tools_app.plugin import ToolContext, ToolError
from tools_app.custom import custom_tool, worker_definition
from tools_app.registry import registry_for_agent

logger = logging.getLogger(__name__)

WORKER = f"{socket.gethostname()}:{os.getpid()}"
DEMO_RECORDING = Path(__file__).resolve().parent.parent / "llm" / "demo_recording.json"
NO_PROVIDER_NOTICE = (
    "No model provider is configured for this team (or its API key is not set): "
    "this run replays the bundled demo recording with the scripted provider."
)


# -- the model --------------------------------------------------------------------------


@dataclass
class ModelHandle:
    """A resolved provider and model, as the kernel loop wants it."""

    resolved: Resolved
    tier: str
    cursor: MemoryCursor | None = None

    @property
    def model(self) -> str:
        return self.resolved.model

    async def complete(self, request: ModelRequest, *, on_chunk=None) -> ModelResponse:
        return await self.resolved.provider.complete(request, on_chunk=on_chunk)

    def cost(self, response: ModelResponse) -> Decimal:
        return usage_cost(response.usage, self.resolved.prices)


def model_resolve(*, run: Run, ref: str, tier: str, cursor: MemoryCursor) -> tuple[Resolved, str]:
    """The provider a session calls, and a notice when the demo recording stands in."""
    providers = list(ModelProvider.objects.filter(team_id=run.team_id).prefetch_related("models"))
    if run.script is not None:
        # A run's own script plays through the scripted provider, billed at the
        # team's scripted model of the session's tier when there is one.
        row = next((m for p in providers if p.provider_type == "scripted" for m in p.models.all() if m.tier == tier),
                   None)
        prices = Prices.of(row.input_price, row.output_price) if row else Prices()
        name = row.name if row else "scripted"
        return Resolved(ScriptedProvider(run.script, cursor), "scripted", name, tier, prices), ""
    if run.provider:
        providers = [p for p in providers if p.slug == run.provider]
    usable = [p for p in providers if p.provider_type != "scripted" and (p.base_url or os.environ.get(p.api_key_env))]
    if not usable:
        script = json.loads(DEMO_RECORDING.read_text())
        return Resolved(ScriptedProvider(script, cursor), "scripted", "demo-recording", tier), NO_PROVIDER_NOTICE
    return provider_for(ref, providers=usable, cursor=cursor), ""


# -- the store --------------------------------------------------------------------------


class DatabaseStore:
    """:class:`agents_app.kernel.loop.SessionStore` on Postgres and the Channels layer.

    Events are buffered and written with the next checkpoint, in one
    transaction and one INSERT; the ones a watcher needs at once (a model call
    starting, streamed text, a tool starting) are written immediately. The
    cancel flag is set by the process's :class:`SessionMonitor`, not polled.
    """

    LIVE = frozenset({"llm_request", "stream_chunk", "tool_call"})

    def __init__(self, *, run_id, session_id, agent: str, tier: str, cursor: MemoryCursor | None,
                 budget: dict[str, Any]) -> None:
        self.run_id, self.session_id, self.agent, self.tier, self.cursor = run_id, session_id, agent, tier, cursor
        self.budget = budget
        self.pending: list[tuple[str, dict[str, Any]]] = []
        self.usage = [0, 0, Decimal(0), 0]
        self.cancel_requested = False
        self.saved_position: int | None = cursor.get(agent) if cursor is not None else None

    async def checkpoint(self, state: SessionState) -> None:
        position = self.cursor.get(self.agent) if self.cursor is not None else None
        state.cursor = {self.agent: position} if position is not None else {}
        await self.flush(state=state.to_dict(), position=position)

    async def emit(self, type: str, data: dict[str, Any]) -> None:
        self.pending.append((type, data))
        if type == "llm_response":
            usage = data["usage"]
            self.usage[0] += usage["prompt_tokens"]
            self.usage[1] += usage["completion_tokens"]
            self.usage[2] += Decimal(data["cost_usd"])
            self.usage[3] += 1 if self.tier == "large" else 0
        if type in self.LIVE:
            await self.flush()

    async def flush(self, *, state: dict[str, Any] | None = None, position: int | None = None) -> None:
        if not self.pending and state is None:
            return
        events, self.pending = self.pending, []
        usage, self.usage = self.usage, [0, 0, Decimal(0), 0]
        if position == self.saved_position:
            position = None
        payloads = await db(_flush)(
            run_id=self.run_id, session_id=self.session_id, agent=self.agent, events=events, state=state,
            usage=(usage[0], usage[1], str(usage[2]), usage[3]), position=position,
        )
        if position is not None:
            self.saved_position = position
        await events_push_async(payloads)

    async def cancelled(self) -> bool:
        return self.cancel_requested

    async def before_model_call(self, state: SessionState) -> None:
        if not self.budget:
            return
        await self.flush()  # the budget reads the run's totals
        reason = await db(services.budget_check)(
            run_id=self.run_id, tier=self.tier, agent=self.agent, session_id=self.session_id
        )
        if reason:
            raise PolicyDenied(reason)


def _flush(*, run_id, session_id, agent: str, events, state, usage, position) -> list[dict[str, Any]]:
    """One transaction: the session's events, its usage on the run and session, its checkpoint."""
    with transaction.atomic():
        payloads = events_insert(run_id=run_id, session_id=session_id, agent=agent, events=events,
                                 usage=usage if usage[0] or usage[1] or usage[3] or usage[2] != "0" else None)
        with connection.cursor() as cursor:
            if state is not None or usage[0] or usage[1]:
                cursor.execute(
                    "UPDATE agents_app_session SET prompt_tokens = prompt_tokens + %s, "
                    "completion_tokens = completion_tokens + %s, cost_usd = cost_usd + %s::numeric, "
                    "state = COALESCE(%s::jsonb, state), heartbeat_at = CASE WHEN %s THEN now() ELSE heartbeat_at END "
                    "WHERE id = %s",
                    [usage[0], usage[1], usage[2], json.dumps(state) if state is not None else None,
                     state is not None, session_id],
                )
            if position is not None:
                # The scripted position moves with the checkpoint: a resumed session replays the same turn.
                cursor.execute(
                    "UPDATE agents_app_run SET script_cursor = script_cursor || jsonb_build_object(%s::text, %s) "
                    "WHERE id = %s", [agent, position, run_id],
                )
    return payloads


class SessionMonitor:
    """Per worker process: heartbeats every running session and notices cancelled runs, in bulk."""

    def __init__(self) -> None:
        self.sessions: dict[Any, tuple[Any, DatabaseStore, asyncio.Task]] = {}
        self.task: asyncio.Task | None = None

    def watch(self, session_id, run_id, store: DatabaseStore, task: asyncio.Task) -> None:
        self.sessions[session_id] = (run_id, store, task)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    def forget(self, session_id) -> None:
        self.sessions.pop(session_id, None)

    async def _run(self) -> None:
        beat_every = min(10.0, settings.MAS_SESSION_STALE_S / 3)
        since_beat = 0.0
        while self.sessions:
            await asyncio.sleep(1.0)
            since_beat += 1.0
            beat = since_beat >= beat_every
            if beat:
                since_beat = 0.0
            watched = dict(self.sessions)
            try:
                cancelled = await db(_monitor_tick)(
                    session_ids=list(watched) if beat else [], run_ids={run for run, _, _ in watched.values()}
                )
            except Exception:
                logger.warning("session monitor tick failed", exc_info=True)
                continue
            for session_id, (run_id, store, task) in watched.items():
                if run_id in cancelled and not store.cancel_requested:
                    store.cancel_requested = True
                    task.cancel()


def _monitor_tick(*, session_ids: list, run_ids: set) -> set:
    if session_ids:
        Session.objects.filter(pk__in=session_ids).update(heartbeat_at=timezone.now())
    return set(Run.objects.filter(pk__in=run_ids, status="cancelled").values_list("pk", flat=True))


monitor = SessionMonitor()


# -- the workspace ------------------------------------------------------------------------


class DatabaseWorkspace:
    """:class:`tools_app.plugin.Workspace` on the run's WorkspaceFile rows."""

    def __init__(self, *, run_id, agent: str, session_id) -> None:
        self.run_id, self.agent, self.session_id = run_id, agent, session_id

    async def read(self, path: str) -> str | None:
        def read() -> str | None:
            return WorkspaceFile.objects.filter(run_id=self.run_id, path=path).values_list("content", flat=True).first()

        return await db(read)()

    async def write(self, path: str, content: str) -> int:
        file = await db(services.workspace_write)(
            run_id=self.run_id, path=path, content=content, agent=self.agent, session_id=self.session_id
        )
        return file.version

    async def delete(self, path: str) -> bool:
        return await db(services.workspace_delete)(
            run_id=self.run_id, path=path, agent=self.agent, session_id=self.session_id
        )

    async def paths(self) -> list[str]:
        def paths() -> list[str]:
            return list(WorkspaceFile.objects.filter(run_id=self.run_id).order_by("path").values_list("path", flat=True))

        return await db(paths)()


def kernel_services(*, run: Run, activation_id, tool_call_ids: dict[str, str]) -> dict[str, Any]:
    """What the built-in tools may ask of the kernel, as async callables.

    ``tool_call_ids["current"]`` is the id of the tool call being run, so a
    custom tool's worker is found again (not started twice) after a crash.
    """

    def refusing(func):
        async def call(**kwargs):
            try:
                return await db(func)(**kwargs)
            except services.RunError as error:
                refusal = ToolError(str(error))
                if isinstance(error, services.LimitExceeded):
                    refusal.kind = "policy_denied"
                raise refusal from None

        return call

    async def spawn(*, filename: str, content: str, task: str) -> str:
        slug = await refusing(services.agent_register)(run=run, path=filename, content=content)
        child = await refusing(services.child_spawn)(activation_id=activation_id, agent=slug, task=task, kind="spawn")
        return f"Spawned {slug} (activation {child.id}); it works in parallel and reports back with signal_parent."

    async def delegate(*, agent: str, task: str, priority: int | None = None, context: Any = None) -> str:
        child = await refusing(services.child_spawn)(
            activation_id=activation_id, agent=agent, task=task, kind="delegate",
            priority=priority if priority is not None else 100,
            context={"delegated": context} if context is not None else None,
        )
        return f"Delegated to {agent} (activation {child.id})."

    async def signal_parent(*, message: str) -> str:
        signal = await refusing(services.parent_signal)(activation_id=activation_id, message=message)
        return f"Signalled {signal.agent}."

    async def set_output(*, name: str, value: Any) -> str:
        await db(services.output_set)(activation_id=activation_id, name=name, value=value)
        return f"Output {name} set."

    async def run_custom_tool(*, tool, prompt: str) -> str:
        child = await db(services.tool_worker_activation)(
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

    async def register_agent(path: str, content: str) -> str:
        return await refusing(services.agent_register)(run=run, path=path, content=content)

    async def unregister_agent(path: str) -> None:
        return None  # the file is gone: agent_resolve no longer finds it

    return {"spawn": spawn, "delegate": delegate, "signal_parent": signal_parent, "set_output": set_output,
            "register_agent": register_agent, "unregister_agent": unregister_agent,
            "run_custom_tool": run_custom_tool}


# -- the session ---------------------------------------------------------------------------


def _team_custom_tools(*, team_id, names: list[str]) -> list[CustomToolSpec]:
    from tools_app.models import CustomTool

    rows = CustomTool.objects.filter(team_id=team_id, name__in=names)
    return [CustomToolSpec.model_validate(row.spec) for row in rows]


def _initial_state(start: services.SessionStart) -> SessionState:
    spec = start.agent.spec
    system = build_system_prompt(
        body=start.agent.body, context=spec.context, examples=[e.model_dump() for e in spec.examples],
        tier=start.session.tier,
    )
    execution = ExecutionContext(task=start.activation.input, output_dir=f"out/{start.activation.agent}/")
    return SessionState(messages=build_messages(system=system, execution=execution))


async def execute_activation(activation_id: str) -> None:
    start = await db(services.session_begin)(activation_id=activation_id, worker=WORKER)
    if start is None:
        return
    run, session, activation, agent = start.run, start.session, start.activation, start.agent
    resumed_state = session.state if start.resumed and session.state else None
    state = SessionState.from_dict(resumed_state) if resumed_state else _initial_state(start)
    cursor = MemoryCursor(dict(run.script_cursor))
    store = DatabaseStore(run_id=run.id, session_id=session.id, agent=agent.slug, tier=session.tier, cursor=cursor,
                          budget=run.budget)
    try:
        resolved, notice = await db(model_resolve)(run=run, ref=agent.spec.model or session.tier,
                                                   tier=session.tier, cursor=cursor)
    except ProviderError as error:
        await store.emit("error", {"where": "provider", "kind": error.kind, "message": str(error)})
        failure = {"kind": "provider_error", "message": str(error), "last_tool_calls": [], "suggested_retry": False}
        await db(services.session_finish)(session_id=session.id, status="failed", result="", meta={},
                                          failure=failure, ladder=list(agent.spec.escalation))
        await db(services.run_dispatch)(run_id=run.id)
        return
    if notice:
        await db(lambda: Run.objects.filter(pk=run.id, notice="").update(notice=notice))()
    model = ModelHandle(resolved=resolved, tier=session.tier, cursor=cursor)
    await db(lambda: Session.objects.filter(pk=session.id).update(
        provider=resolved.provider_slug, model=resolved.model))()

    team_tools = await db(_team_custom_tools)(team_id=run.team_id, names=agent.spec.tools or [])
    registry = registry_for_agent(
        agent.spec.tools, extra_tools=[custom_tool(spec) for spec in [*agent.spec.custom_tools, *team_tools]]
    )
    tool_call_ids: dict[str, str] = {}
    context = ToolContext(
        run_id=str(run.id), agent=agent.slug, session_id=str(session.id),
        workspace=DatabaseWorkspace(run_id=run.id, agent=agent.slug, session_id=session.id),
        services=kernel_services(run=run, activation_id=activation.id, tool_call_ids=tool_call_ids),
    )

    async def call_tool(call: ToolCall) -> ToolResult:
        tool_call_ids["current"] = f"{session.id}:{call.id}"
        outcome = await registry.call(call.name, call.arguments, context)
        return ToolResult(ok=outcome.ok, content=outcome.content, error_kind=outcome.error_kind)

    limits = agent.spec.limits
    config = SessionConfig(
        agent=agent.slug, temperature=agent.spec.temperature, max_tokens=agent.spec.max_tokens,
        limits=Limits(max_steps=limits.max_steps, max_tool_calls=limits.max_tool_calls, timeout_s=limits.timeout_s),
        provider_retries=settings.MAS_PROVIDER_RETRIES, backoff_s=settings.MAS_PROVIDER_BACKOFF_S,
    )
    loop_task = asyncio.create_task(run_session(state=state, model=model, tools=registry.schemas(),
                                                call_tool=call_tool, store=store, config=config))
    monitor.watch(session.id, run.id, store, loop_task)
    try:
        outcome = await loop_task
    except asyncio.CancelledError:
        # The run was cancelled while the session waited (for a model, a tool):
        # it stops now, keeping its last checkpoint and partial result.
        outcome = SessionOutcome(status="cancelled", result=state.partial_result(), meta=Meta(
            prompt_tokens=state.prompt_tokens, completion_tokens=state.completion_tokens,
            tool_calls=state.tool_calls, steps=state.steps, model=model.model, tier=model.tier,
            cost_usd=state.cost_usd))
    except Exception as error:  # a kernel bug must not leave the session running forever
        logger.exception("session crashed", extra={"run": str(run.id), "session": str(session.id)})
        await store.emit("error", {"where": "session", "kind": "unknown", "message": f"{type(error).__name__}: {error}"})
        await store.flush()
        outcome = None
        failure = {"kind": "unknown", "message": f"{type(error).__name__}: {error}", "last_tool_calls":
                   state.last_tool_calls(), "suggested_retry": True}
        await db(services.session_finish)(session_id=session.id, status="failed", result="", meta={},
                                          failure=failure, ladder=list(agent.spec.escalation))
    finally:
        monitor.forget(session.id)
        await store.flush()
    if outcome is not None:
        await db(services.session_finish)(
            session_id=session.id, status=outcome.status, result=outcome.result, meta=outcome.meta.to_dict(),
            failure=outcome.failure.to_dict() if outcome.failure else None, ladder=list(agent.spec.escalation),
        )
    await db(services.run_dispatch)(run_id=run.id)
