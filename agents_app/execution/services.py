"""Runs in the database: start, dispatch, spawn/delegate/signal, finish, cancel.

Plain synchronous ORM functions (the session coroutine calls them through
``runner.db``). Every state change takes the run's row lock, so concurrent
sessions of one run never double-dispatch or double-finish it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, F, Func, OuterRef, Q
from django.utils import timezone

from agents_app.definitions.kinds import AGENT
from agents_app.definitions.markdown import DefinitionError, parse_definition
from agents_app.execution.escalation import Escalation, escalation_next
from agents_app.execution.eventlog import event_append as event_emit
from agents_app.execution.filehistory import file_version_keep
from agents_app.money import money_display, money_str
from agents_app.execution.versions import VersionMissing, definition_pinned
from agents_app.execution.workspace_limit import USED_SQL, workspace_check
from agents_app.models import Activation, Agent, Run, Session, Team, WorkspaceFile
from agents_app.models.runs import (
    ACTIVE_ACTIVATION_STATUSES,
    ACTIVE_RUN_STATUSES,
    FINISHED_RUN_STATUSES,
    OPEN_ACTIVATION_STATUSES,
    UNSETTLED_ACTIVATION_STATUSES,
    ActivationStatus,
    RunStatus,
    SessionStatus,
)
from agents_app.kernel.outputs import describe, schema_text, value_errors
from agents_app.kernel.prompt import ExecutionContext, WorkspaceEntry
from agents_app.specs import TIERS, AgentSpec
from tools_app.catalog import SAFE_DEFAULT_TOOLS

logger = logging.getLogger(__name__)

DEFAULT_LIMITS = {"max_depth": 3, "max_fanout": 5, "max_concurrency": 8, "max_retries": 2}
# Activations are dispatched lowest priority number first (then oldest first): 0 before 100.
DEFAULT_PRIORITY = 100


class RunError(ValueError):
    """A request the kernel refuses, with a message for the caller."""


class LimitExceeded(RunError):
    pass


class InvalidOutput(RunError):
    """A step output its declared schema refuses (the message lists why, for the model to correct)."""


class ScriptError(RunError):
    """A run's script the kernel cannot play (its message names the agent and turn)."""


def script_check(*, team: Team, script: dict[str, Any] | None, agents: list[str]) -> None:
    """Check a run's script: its shape and bounds, and no turn slower than its agent's session timeout.

    ``agents`` are the ones the run starts with; the script's ``"*"`` turns are
    held to the shortest of their timeouts.
    """
    if script is None:
        return
    from agents_app.llm.scripted import script_check_latency, validate_script

    try:
        validate_script(script)
        named = set(script) - {"*"}
        timeouts = {slug: float((spec.get("limits") or {}).get("timeout_s", 600))
                    for slug, spec in Agent.objects.filter(team=team, slug__in=named | set(agents))
                    .values_list("slug", "spec")}
        starting = [timeouts[slug] for slug in agents if slug in timeouts and slug not in named]
        if starting:
            timeouts["*"] = min(starting)
        script_check_latency(script, timeouts)
    except ValueError as error:
        raise ScriptError(str(error)) from None


# -- agents of a run -------------------------------------------------------------


@dataclass(frozen=True)
class AgentDefinition:
    slug: str
    spec: AgentSpec
    body: str
    version: int | None  # None for agents written into the run's workspace
    source: str  # "team" | "workspace"


def agent_resolve(*, run: Run, slug: str) -> AgentDefinition:
    """The run's own agent (``agents/<slug>.md`` in its workspace) or the team's, at the version the run pinned."""
    local = WorkspaceFile.objects.filter(run=run, path=f"agents/{slug}.md").values_list("content", flat=True).first()
    if local is not None:
        path = f"agents/{slug}.md"
        try:
            parsed = parse_definition(AGENT, local, path=path)
        except DefinitionError as error:
            # Written by the run (a refused vfs_write stays written): a refusal for the caller, not a crash.
            raise RunError(f"{path} is not a valid agent definition: {error}") from None
        return AgentDefinition(slug, parsed.spec, parsed.body, None, "workspace")
    try:
        pinned = definition_pinned(run=run, kind=AGENT, slug=slug)
    except VersionMissing as error:
        raise RunError(str(error)) from None
    if pinned is None:
        raise RunError(f"agent {slug!r} does not exist in this team or run")
    key = (run.team_id, slug, pinned.number, pinned.content_hash)
    found = _validated.get(key)
    if found is None:
        # Valid when saved; the custom tools it names are pinned (or missing) on their own.
        tools = pinned.spec.get("tools")
        spec = AgentSpec.model_validate(pinned.spec, context={"known_tools": set(tools or [])})
        if len(_validated) > 1000:
            _validated.clear()
        found = _validated[key] = AgentDefinition(slug, spec, pinned.body, pinned.number, "team")
    return found


def agent_capped(definition: AgentDefinition, *, activation: Activation) -> AgentDefinition:
    """An agent the run wrote for itself, with no tool or MCP server its creator lacks.

    Its file is model output (spawn_agent, vfs_write, vfs_edit), which a prompt
    injection may have written: it gets at most what the agent that spawned or
    delegated to it holds, up the tree to a team agent; with no creator, the
    safe default tools. Team agents are returned as they are.
    """
    if definition.source != "workspace":
        return definition
    tools, mcp, approval = _grant(activation.parent_id)
    own = definition.spec.tools if definition.spec.tools is not None else list(SAFE_DEFAULT_TOOLS)
    spec = definition.spec.model_copy(update={
        "tools": [name for name in own if name in tools],
        "mcp_servers": [server for server in definition.spec.mcp_servers if server in mcp],
        # and no fewer approvals: what its creator may only do with a person's approval, it may not do without
        "approval": [*definition.spec.approval, *(entry for entry in approval if entry not in definition.spec.approval)],
    })
    return AgentDefinition(definition.slug, spec, definition.body, definition.version, definition.source)


def _grant(activation_id) -> tuple[set[str], list, list]:
    """The tools, MCP servers and approvals of the agent of ``activation_id`` (its creator's cap applied)."""
    if activation_id is None:
        return set(SAFE_DEFAULT_TOOLS), [], []
    activation = Activation.objects.select_related("run").get(pk=activation_id)
    if activation.context.get("worker"):
        return set(), [], []  # a custom tool's worker holds no tools
    spec = agent_capped(agent_resolve(run=activation.run, slug=activation.agent), activation=activation).spec
    return (set(spec.tools if spec.tools is not None else SAFE_DEFAULT_TOOLS), list(spec.mcp_servers),
            list(spec.approval))


# Validated team agents by (team, slug, version, content hash): a saved change is a new key.
_validated: dict[tuple, AgentDefinition] = {}


def worker_definition_resolve(worker: dict[str, Any]) -> AgentDefinition:
    """The agent behind a custom tool call, as kept in its activation's context."""
    spec = AgentSpec(name=worker["name"], model=worker.get("model"), tools=[])
    return AgentDefinition(worker["name"], spec, worker["body"], None, "tool")


def tool_worker_activation(*, activation_id, tool_call_id: str, worker: dict[str, Any], prompt: str) -> Activation:
    """The activation that answers one custom tool call; the same one again after a crash."""
    with transaction.atomic():
        parent = Activation.objects.select_related("run").get(pk=activation_id)
        existing = parent.children.filter(kind="tool", context__tool_call=tool_call_id).first()
        if existing is not None:
            return existing
        run = Run.objects.select_for_update().get(pk=parent.run_id)
        child = activation_create(run=run, agent=worker["name"], input=prompt, kind="tool", parent=parent,
                                  priority=parent.priority, context={"worker": worker, "tool_call": tool_call_id})
        # Run in the caller's process, never by the dispatcher.
        child.status, child.dispatched_at = ActivationStatus.DISPATCHED, timezone.now()
        child.save(update_fields=["status", "dispatched_at"])
    return child


def agent_register(*, run: Run, path: str, content: str) -> str:
    """Validate an agent file written under ``agents/``; returns its slug."""
    slug = path.removeprefix("agents/").removesuffix(".md")
    try:
        parse_definition(AGENT, content, path=path)
    except DefinitionError as error:
        raise RunError(f"{path} is not a valid agent definition: {error}") from None
    return slug


# -- starting and dispatching ------------------------------------------------------


@transaction.atomic
def run_start(
    *, team: Team, agent: str, input: str, user=None, limits: dict[str, Any] | None = None,
    budget: dict[str, Any] | None = None, provider: str = "", script: dict[str, Any] | None = None,
    approvals: list[Any] | None = None, versions: dict[str, int] | None = None, is_eval: bool = False,
) -> Run:
    """Create a run with its root activation and send that to a worker (after commit).

    ``approvals``: tool names or patterns whose calls wait for a person in this run, on top of what the
    definitions and the team ask for (agents_app.approvals.policy). ``versions`` pins definitions at other
    versions than their current ones (``{"agent:writer": 2}``: an eval of an older version); ``is_eval``
    marks a case of an eval.
    """
    from agents_app.approvals.policy import entries_check

    script_check(team=team, script=script, agents=[] if is_eval else [agent])
    try:
        approvals = entries_check(approvals)
    except ValueError as error:
        raise RunError(f"approvals: {error}") from None
    run = Run(
        team=team, agent=agent, input=input, created_by=user if getattr(user, "pk", None) else None,
        limits={**DEFAULT_LIMITS, **(limits or {})}, budget=budget or {}, provider=provider, script=script,
        approvals=approvals, versions=dict(versions or {}), is_eval=is_eval,
    )
    agent_resolve(run=run, slug=agent)  # exists? (pins it: the run is not saved yet, so at its current version)
    run.save(force_insert=True)
    event_emit(run_id=run.id, type="run_start", agent=agent,
               data={"agent": agent, "input": input, "limits": run.limits, "budget": run.budget,
                     **({"approvals": approvals} if approvals else {})})
    # The root is the run's only activation: it goes straight to a worker, no dispatch round.
    root = activation_create(run=run, agent=agent, input=input, kind="root", parent=None,
                             status=ActivationStatus.DISPATCHED)
    transaction.on_commit(lambda: _send([str(root.id)]))
    return run


def activation_create(*, run: Run, agent: str, input: str, kind: str, parent: Activation | None,
                      priority: int = DEFAULT_PRIORITY, context: dict[str, Any] | None = None,
                      status: str = ActivationStatus.QUEUED) -> Activation:
    activation = Activation.objects.create(
        run=run, agent=agent, input=input, kind=kind, parent=parent, status=status,
        dispatched_at=timezone.now() if status == ActivationStatus.DISPATCHED else None,
        depth=(parent.depth + 1) if parent and kind in {"spawn", "delegate"} else (parent.depth if parent else 0),
        priority=priority, context=context or {},
    )
    event_emit(run_id=run.id, type="activation_queued", agent=agent,
               data={"activation": str(activation.id), "kind": kind, "priority": priority,
                     "parent": str(parent.id) if parent else None, "depth": activation.depth})
    return activation


def run_dispatch_async(*, run_id, countdown: float = 0) -> None:
    from agents_app.tasks import dispatch_run

    dispatch_run.apply_async((str(run_id),), countdown=countdown or None)


def run_dispatch(*, run_id) -> list[str]:
    """Send the run's queued activations to workers, up to ``max_concurrency``; finish an idle run.

    Returns the ids of the activations sent.
    """
    with transaction.atomic():
        return _dispatch(_run_locked(run_id))


def _run_locked(run_id) -> Run:
    # Raw SQL: the hottest lock of the kernel, without the ORM's query compilation.
    return Run.objects.raw("SELECT * FROM agents_app_run WHERE id = %s FOR UPDATE", [run_id])[0]


def _dispatch(run: Run) -> list[str]:
    """:func:`run_dispatch` on a run whose row this transaction has locked."""
    if run.status in FINISHED_RUN_STATUSES:
        return []
    now = timezone.now()
    if run.status == RunStatus.QUEUED:
        run.status, run.started_at = RunStatus.RUNNING, now
        run.save(update_fields=["status", "started_at"])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE status = ANY(%s)), count(*) FILTER (WHERE status = %s), "
            "count(*) FILTER (WHERE status = %s) FROM agents_app_activation WHERE run_id = %s",
            [list(ACTIVE_ACTIVATION_STATUSES), ActivationStatus.QUEUED, ActivationStatus.WAITING, run.id],
        )
        active, waiting, suspended = cursor.fetchone()
    room = max(0, int(run.limits.get("max_concurrency", DEFAULT_LIMITS["max_concurrency"])) - active)
    ids: list = []
    if waiting and room:
        due = run.activations.filter(status=ActivationStatus.QUEUED).filter(
            Q(not_before__isnull=True) | Q(not_before__lte=now))
        ids = list(due.order_by("priority", "created_at").values_list("id", flat=True)[:room])
        if ids:
            Activation.objects.filter(pk__in=ids).update(status=ActivationStatus.DISPATCHED, dispatched_at=now)
    if not ids and active == 0:
        later = (run.activations.filter(status=ActivationStatus.QUEUED).exclude(not_before__isnull=True)
                 .order_by("not_before").values_list("not_before", flat=True).first() if waiting else None)
        if later is None:
            if not suspended:  # a suspended session is resumed by what it waits for, not by dispatch
                _run_finish(run)
        else:  # only backed-off retries are left: come back when the first is due
            delay = max(0.0, (later - now).total_seconds())
            transaction.on_commit(lambda: run_dispatch_async(run_id=run.id, countdown=delay))
        return []
    ids = [str(activation_id) for activation_id in ids]
    transaction.on_commit(lambda: _send(ids))
    return ids


def _send(activation_ids: list[str]) -> None:
    """Hand dispatched activations to workers (after commit); what the broker refuses is queued again.

    With the broker down the activation goes back to ``queued``: the reaper's
    sweep (``runs_unstick``) dispatches it once the broker is back.
    """
    from agents_app.tasks import execute_activation

    for index, activation_id in enumerate(activation_ids):
        try:
            execute_activation.delay(activation_id)
        except Exception:
            logger.warning("dispatch failed: the broker refused the task; queued again",
                           extra={"activations": activation_ids[index:]}, exc_info=True)
            Activation.objects.filter(pk__in=activation_ids[index:], status=ActivationStatus.DISPATCHED).update(
                status=ActivationStatus.QUEUED, dispatched_at=None)
            return


def _run_finish(run: Run) -> None:
    """All work is done: the run's outcome is its root agent's last result (or its workflow's)."""
    from mas_project import telemetry
    from workflows_app.services import workflow_finish

    if workflow_finish(run):
        run_end_notify(run)
        telemetry.record_run(run)
        return
    root = run.activations.filter(parent__isnull=True).order_by("created_at").first()
    last = run.activations.filter(agent=run.agent, kind__in=["root", "signal"]).order_by("-created_at").first()
    failed = root is None or (last or root).status != ActivationStatus.DONE
    run.status = RunStatus.FAILED if failed else RunStatus.SUCCEEDED
    run.result = (last or root).result if root else ""
    run.finished_at = timezone.now()
    if failed and not run.error:
        run.error = f"the root agent {run.agent} did not finish"
    run.save(update_fields=["status", "result", "finished_at", "error"])
    duration = (run.finished_at - (run.started_at or run.created_at)).total_seconds()
    event_emit(run_id=run.id, type="run_complete", agent=run.agent, data={
        "status": run.status, "result": run.result[:2000], "error": run.error,
        "prompt_tokens": run.prompt_tokens, "completion_tokens": run.completion_tokens,
        "cost_usd": money_str(run.cost_usd), "duration_s": round(duration, 3),
    })
    run_end_notify(run)
    telemetry.record_run(run)


def run_end_notify(run: Run) -> None:
    """The team's webhook hears of the run's end (after commit; nothing when the team has none)."""
    from agents_app.approvals.webhooks import webhook_notify

    webhook_notify(team_id=run.team_id, event="run_end", data={
        "run": str(run.id), "agent": run.agent, "workflow": run.workflow, "status": run.status,
        "result": run.result[:2000], "error": run.error})


@transaction.atomic
def run_cancel(*, run: Run, user=None) -> Run:
    """Mark the run and its waiting activations cancelled; running sessions stop within a second."""
    run = Run.objects.select_for_update().get(pk=run.pk)
    if run.status in FINISHED_RUN_STATUSES:
        return run
    run.status, run.finished_at = RunStatus.CANCELLED, timezone.now()
    run.error = f"cancelled by {user}" if user else "cancelled"
    run.save(update_fields=["status", "finished_at", "error"])
    # Waiting work is cancelled now; running sessions stop within a second (their worker's monitor).
    run.activations.filter(status__in=[ActivationStatus.QUEUED, ActivationStatus.DISPATCHED,
                                       ActivationStatus.WAITING]).update(status=ActivationStatus.CANCELLED)
    for session in Session.objects.filter(run=run, status=SessionStatus.WAITING):
        # Suspended sessions hold no worker: they end here, keeping their partial result.
        session.status, session.finished_at = SessionStatus.CANCELLED, timezone.now()
        session.save(update_fields=["status", "finished_at"])
        event_emit(run_id=run.id, type="session_end", agent=session.agent, session_id=session.id,
                   data={"status": "cancelled", "result": session.result[:2000], "meta": session.meta,
                         "failure": None})
    from agents_app.approvals.services import approvals_cancel
    from workflows_app.services import workflow_cancelled

    approvals_cancel(run=run)
    workflow_cancelled(run)
    event_emit(run_id=run.id, type="run_complete", agent=run.agent,
               data={"status": "cancelled", "error": run.error})
    run_end_notify(run)
    return run


# -- sessions -----------------------------------------------------------------------


@dataclass
class SessionStart:
    session: Session
    activation: Activation
    run: Run
    agent: AgentDefinition
    resumed: bool


def session_begin(*, activation_id, worker: str) -> SessionStart | None:
    """Claim an activation: resume its running session (a worker died) or start a new attempt.

    Returns None when there is nothing to do (done, cancelled, or claimed by a live worker).
    """
    with transaction.atomic():
        # The run's row first, then the activation's: the order every writer of a run locks in.
        run = Run.objects.raw("SELECT r.* FROM agents_app_run r JOIN agents_app_activation a ON a.run_id = r.id "
                              "WHERE a.id = %s FOR UPDATE OF r", [activation_id])[0]
        activation = Activation.objects.raw("SELECT * FROM agents_app_activation WHERE id = %s FOR UPDATE",
                                            [activation_id])[0]
        activation.run = run
        if activation.status not in OPEN_ACTIVATION_STATUSES or run.status in FINISHED_RUN_STATUSES:
            if run.status == RunStatus.CANCELLED and activation.status in OPEN_ACTIVATION_STATUSES:
                activation.status = ActivationStatus.CANCELLED
                activation.save(update_fields=["status"])
            return None
        session = next(iter(Session.objects.raw(
            "SELECT * FROM agents_app_session WHERE activation_id = %s AND status = ANY(%s) "
            "ORDER BY attempt DESC LIMIT 1", [activation_id, [SessionStatus.RUNNING, SessionStatus.WAITING]])), None)
        if session is not None and session.status == SessionStatus.RUNNING and not _stale(session):
            # A live worker has it — maybe this very process, when a message came twice (a dispatch
            # sent again by the sweep while the first waited in the queue): never run one session twice.
            # (A suspended session, waiting, holds no worker: it is resumed.)
            return None
        resumed = session is not None
        worker_agent = activation.context.get("worker")
        definition = (worker_definition_resolve(worker_agent) if worker_agent
                      else agent_capped(agent_resolve(run=run, slug=activation.agent), activation=activation))
        now = timezone.now()
        if session is None:
            activation.attempts += 1  # the row is locked
            session = Session.objects.create(
                run=run, activation=activation, agent=activation.agent, attempt=activation.attempts,
                tier=nominal_tier(definition.spec, activation.context), worker=worker,
                heartbeat_at=now,
            )
        else:
            session.worker, session.heartbeat_at, session.status = worker, now, SessionStatus.RUNNING
            session.save(update_fields=["worker", "heartbeat_at", "status"])
        activation.status = ActivationStatus.RUNNING
        activation.save(update_fields=["status", "attempts"])
        changed: dict[str, Any] = {}
        if run.status == RunStatus.QUEUED:
            changed |= {"status": RunStatus.RUNNING, "started_at": now}
        if changed:
            Run.objects.filter(pk=run.pk).update(**changed)
            for field, value in changed.items():
                setattr(run, field, value)
        event_emit(run_id=run.id, type="session_start", agent=activation.agent, session_id=session.id, data={
            "activation": str(activation.id), "attempt": session.attempt, "tier": session.tier,
            "resumed": resumed, "kind": activation.kind, "depth": activation.depth,
            "parent": str(activation.parent_id) if activation.parent_id else None,
        })
    return SessionStart(session=session, activation=activation, run=run, agent=definition, resumed=resumed)


def nominal_tier(spec: AgentSpec, context: dict[str, Any]) -> str:
    """The tier a session starts from: its escalation rung's, the agent's ``tier``, a tier named as its
    ``model``, else medium. The session's tier becomes its model's once the model is resolved."""
    return (context.get("tier") or spec.tier or (spec.model if spec.model in TIERS else None)
            or "medium")


def execution_context(*, activation: Activation) -> ExecutionContext:
    """The execution context of an activation's first session: its task, what its parent passed along,
    the results of the workflow steps it depends on, and the run's files so far (path, size, author)."""
    context = activation.context or {}
    passed = context.get("parent_context")
    if passed is not None and not isinstance(passed, str):
        passed = json.dumps(passed, ensure_ascii=False, indent=2)
    parent = (Activation.objects.filter(pk=activation.parent_id).values_list("agent", flat=True).first()
              if activation.parent_id and activation.kind in CHILD_KINDS else "")
    files = (WorkspaceFile.objects.filter(run_id=activation.run_id).order_by("path")
             .annotate(size=Func(F("content"), function="octet_length")).values_list("path", "size", "author"))
    return ExecutionContext(
        task=activation.input, output_dir=f"out/{activation.agent}/", parent_context=passed or "",
        parent=parent or "", dependency_results=dict(context.get("dependencies") or {}),
        files=[WorkspaceEntry(path, size, author) for path, size, author in files],
    )


def session_stale_after_s() -> float:
    return float(getattr(settings, "MAS_SESSION_STALE_S", 30))


def _stale(session: Session) -> bool:
    if session.heartbeat_at is None:
        return True
    return (timezone.now() - session.heartbeat_at).total_seconds() > session_stale_after_s()


def sessions_reap() -> list[str]:
    """Re-queue activations whose running session lost its worker (no heartbeat); returns their ids.

    The session stays ``running``: the next worker that claims the activation
    resumes it from its last checkpoint. A session whose worker has died
    ``MAS_MAX_RESUMES`` times is failed instead, with that reason (a session
    that kills its worker must not take worker after worker down).

    Only an activation still ``running`` (claimed by the dead worker) is
    reaped: once queued again it waits for a worker to claim it, however many
    sweeps pass meanwhile (each would otherwise count one more death); if
    that dispatch is lost, ``runs_unstick`` sends it again.
    """
    cutoff = timezone.now() - timedelta(seconds=session_stale_after_s())
    max_resumes = int(getattr(settings, "MAS_MAX_RESUMES", 3))
    reaped: list[str] = []
    stale_sessions = Session.objects.filter(status=SessionStatus.RUNNING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True))
    stale = (stale_sessions.filter(run__status__in=[RunStatus.RUNNING, RunStatus.WAITING],
                                   activation__status=ActivationStatus.RUNNING)
             .values_list("activation_id", "run_id", "agent", "id", "worker"))
    for activation_id, run_id, agent, session_id, worker in stale:
        reason = f"worker {worker or '?'} stopped answering"
        with transaction.atomic():
            run = _run_locked(run_id)  # a claim (session_begin) locks the run first too: none is under way
            activation = Activation.objects.select_for_update().filter(
                pk=activation_id, status=ActivationStatus.RUNNING).first()
            if activation is None or not stale_sessions.filter(pk=session_id).exists():
                continue
            resumes = int(activation.context.get("resumes", 0))
            if resumes >= max_resumes:
                failure = {"kind": "unknown", "last_tool_calls": [], "suggested_retry": False,
                           "message": f"{reason}; the session was resumed {resumes} time(s) and its worker "
                                      f"died each time, so it is not resumed again"}
                end = _session_finish(run=run, session_id=session_id, status=SessionStatus.FAILED, result="",
                                      meta={}, failure=failure, ladder=[])
                _settled_hooks(run, end.activation, tier=end.tier, failure=failure)
                _dispatch(run)
                reaped.append(str(activation_id))
                continue
            activation.status = ActivationStatus.QUEUED
            activation.context = {**activation.context, "resumes": resumes + 1}
            activation.save(update_fields=["status", "context"])
            event_emit(run_id=run_id, type="retry", agent=agent, session_id=session_id, data={
                "what": "session_resume", "reason": reason, "delay_s": 0, "resume": resumes + 1,
            })
            reaped.append(str(activation_id))
            transaction.on_commit(lambda run_id=run_id: run_dispatch_async(run_id=run_id))
    if reaped:
        logger.warning("sessions reaped", extra={"activations": reaped})
    return reaped


def runs_unstick() -> list[str]:
    """Find work that nothing will pick up again, and dispatch it; returns the ids of the runs concerned.

    - An activation sent to a worker that no worker took within the stale
      time (its task message was lost: a broker restarted without its data)
      is queued again.
    - A queued or running run with nothing running (its dispatch message, or
      a retry's delayed dispatch, was lost; or the broker refused its root)
      is dispatched: that sends what is due, schedules what waits, or
      finishes the run. Dispatching is idempotent.
    """
    cutoff = timezone.now() - timedelta(seconds=session_stale_after_s())
    # A session of the activation may still be ``running`` when its worker died and the reaper queued
    # it again: that dispatch can be lost too. Only a session with a recent heartbeat means a worker has it.
    live = Session.objects.filter(activation=OuterRef("pk"), status=SessionStatus.RUNNING, heartbeat_at__gte=cutoff)
    lost = (Activation.objects.filter(status=ActivationStatus.DISPATCHED, dispatched_at__lt=cutoff,
                                      run__status__in=ACTIVE_RUN_STATUSES)
            .exclude(kind="tool").exclude(Exists(live))
            .values_list("id", "run_id", "agent"))
    runs: dict[str, None] = {}
    for activation_id, run_id, agent in lost:
        with transaction.atomic():
            _run_locked(run_id)
            if Activation.objects.filter(pk=activation_id, status=ActivationStatus.DISPATCHED,
                                         dispatched_at__lt=cutoff).update(status=ActivationStatus.QUEUED,
                                                                          dispatched_at=None):
                event_emit(run_id=run_id, type="retry", agent=agent, data={
                    "what": "dispatch", "activation": str(activation_id), "delay_s": 0,
                    "reason": f"no worker took it within {session_stale_after_s():g} s (its task message was lost)"})
                runs[str(run_id)] = None
    # A run waiting for a person is left alone, unless a decision queued work whose dispatch was lost.
    idle = (Run.objects.filter(Q(status__in=[RunStatus.QUEUED, RunStatus.RUNNING])
                               | Q(status=RunStatus.WAITING, activations__status=ActivationStatus.QUEUED),
                               created_at__lt=cutoff)
            .exclude(activations__status__in=ACTIVE_ACTIVATION_STATUSES).values_list("id", flat=True).distinct())
    runs.update((str(run_id), None) for run_id in idle)
    for run_id in runs:
        run_dispatch_async(run_id=run_id)
    if runs:
        logger.info("runs dispatched again", extra={"runs": list(runs)})
    return list(runs)


def budget_check(*, run_id, tier: str, agent: str, session_id) -> str | None:
    """The reason another model call is refused by the run's budget, or None.

    Emits ``budget_warning`` once when the warning threshold is crossed.
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().only("cost_usd", "budget", "budget_warned", "large_tier_uses").get(
            pk=run_id)
        budget = run.budget or {}
        if (budget.get("warn_cost_usd") is not None and not run.budget_warned
                and run.cost_usd >= Decimal(str(budget["warn_cost_usd"]))):
            Run.objects.filter(pk=run_id).update(budget_warned=True)
            event_emit(run_id=run_id, type="budget_warning", agent=agent, session_id=session_id,
                       data={"cost_usd": money_str(run.cost_usd), "warn_cost_usd": money_str(budget["warn_cost_usd"])})
        if budget.get("max_cost_usd") is not None and run.cost_usd >= Decimal(str(budget["max_cost_usd"])):
            return f"the run's budget of {money_display(budget['max_cost_usd'])} is spent ({money_display(run.cost_usd)})"
        if (tier == "large" and budget.get("max_large_tier_uses") is not None
                and run.large_tier_uses >= int(budget["max_large_tier_uses"])):
            return f"the run may use the large tier {budget['max_large_tier_uses']} time(s)"
    return None


@dataclass
class SessionEnd:
    retry_in_s: float | None = None  # the activation was re-queued after this delay
    escalation: Escalation | None = None  # where a retry escalates to (the kernel's, or a workflow step's)
    activation: Activation | None = None
    tier: str = ""


def _session_finish(*, run: Run, session_id, status: str, result: str, meta: dict[str, Any],
                    failure: dict[str, Any] | None, ladder: list[str]) -> SessionEnd:
    """Record the outcome; retry with backoff, escalate up the ladder, or settle the activation.

    ``run``'s row is locked by the caller's transaction.
    """
    session = Session.objects.raw("SELECT * FROM agents_app_session WHERE id = %s FOR UPDATE", [session_id])[0]
    activation = Activation.objects.raw("SELECT * FROM agents_app_activation WHERE id = %s FOR UPDATE",
                                        [session.activation_id])[0]
    end = SessionEnd(activation=activation, tier=session.tier)
    session.status, session.result, session.meta = status, result, meta
    session.failure, session.finished_at = failure, timezone.now()
    session.save(update_fields=["status", "result", "meta", "failure", "finished_at"])
    event_emit(run_id=run.id, type="session_end", agent=session.agent, session_id=session.id, data={
        "status": status, "result": result[:2000], "meta": meta, "failure": failure,
    })
    max_retries = int(run.limits.get("max_retries", DEFAULT_LIMITS["max_retries"]))
    if status == SessionStatus.OK:
        activation.status, activation.result = ActivationStatus.DONE, result
    elif status == SessionStatus.CANCELLED or run.status == RunStatus.CANCELLED:
        activation.status = ActivationStatus.CANCELLED
    elif (failure and failure.get("suggested_retry") and activation.attempts <= max_retries
          and activation.kind not in {"tool", "step"}):  # a tool's caller (a step's workflow) decides
        end.retry_in_s = settings.MAS_RETRY_BACKOFF_S * 2 ** (activation.attempts - 1)
        end.escalation = escalation_next(run=run, session=session, activation=activation, ladder=ladder)
        if end.escalation:
            activation.context = {**activation.context, **end.escalation.context}
            event_emit(run_id=run.id, type="escalation", agent=session.agent, session_id=session.id,
                       data=end.escalation.data)
        activation.status = ActivationStatus.QUEUED
        activation.not_before = timezone.now() + timedelta(seconds=end.retry_in_s)
        event_emit(run_id=run.id, type="retry", agent=session.agent, session_id=session.id, data={
            "what": "session", "attempt": activation.attempts + 1, "delay_s": end.retry_in_s,
            "reason": failure.get("kind"),
        })
    else:
        activation.status, activation.result = ActivationStatus.FAILED, result
        if activation.kind == "step":  # its workflow may retry it, escalated
            end.escalation = escalation_next(run=run, session=session, activation=activation, ladder=ladder)
        if activation.parent_id is None and activation.kind != "step" and not run.error:
            run.error = f"{failure.get('kind') if failure else 'failed'}: {failure.get('message') if failure else ''}"
            run.save(update_fields=["error"])
    activation.save(update_fields=["status", "result", "context", "not_before"])
    return end


def session_settle(*, run_id, session_id, status: str, result: str, meta: dict[str, Any],
                   failure: dict[str, Any] | None, ladder: list[str]) -> SessionEnd:
    """Record a session's outcome and dispatch what comes next in its run, in one transaction."""
    with transaction.atomic():
        run = _run_locked(run_id)
        end = _session_finish(run=run, session_id=session_id, status=status, result=result, meta=meta,
                              failure=failure, ladder=ladder)
        _settled_hooks(run, end.activation, tier=end.tier, meta=meta, failure=failure, ladder=ladder,
                       escalation=end.escalation)
        _dispatch(run)
    return end


def _settled_hooks(run: Run, activation: Activation, *, tier: str = "", meta: dict[str, Any] | None = None,
                   failure: dict[str, Any] | None = None, ladder: list[str] | None = None,
                   escalation: Escalation | None = None) -> None:
    if activation.kind in CHILD_KINDS and activation.status in SETTLED_ACTIVATION_STATUSES:
        _child_settled(run, activation)
    if activation.kind in {"step", "plan"}:  # only workflows create these
        from workflows_app.services import workflow_activation_settled

        workflow_activation_settled(run=run, activation=activation, tier=tier, meta=meta or {}, failure=failure,
                                    ladder=ladder or [], escalation=escalation)


CHILD_KINDS = frozenset({"spawn", "delegate"})
SETTLED_ACTIVATION_STATUSES = (ActivationStatus.DONE, ActivationStatus.FAILED, ActivationStatus.CANCELLED)


OUTCOME_KEYS = ("agent", "status", "result", "outputs", "files", "failure")


def child_outcome_of(run: Run, activation: Activation) -> dict[str, Any]:
    """What a settled child hands back: status, result, named outputs, files it wrote, failure report."""
    failure = (Session.objects.filter(activation=activation).order_by("-attempt")
               .values_list("failure", flat=True).first())
    files = (WorkspaceFile.objects.filter(run=run, session__activation=activation).order_by("path")
             .annotate(size=Func(F("content"), function="octet_length")).values_list("path", "size"))
    status = {ActivationStatus.DONE: "ok", ActivationStatus.FAILED: "failed"}.get(activation.status, "cancelled")
    return {"agent": activation.agent, "status": status, "result": activation.result,
            "outputs": activation.context.get("outputs", {}),
            "files": [{"path": path, "bytes": size} for path, size in files],
            "failure": failure if status == "failed" else None}


def _child_settled(run: Run, child: Activation) -> None:
    """A spawned or delegated child has its outcome: wake the parent waiting for it, or send it as a signal.

    The caller holds the run's lock, so a parent suspending at the same
    moment either sees this child settled or is woken here — never neither.
    """
    outcome = child_outcome_of(run, child)
    child.context = {**child.context, "outcome": outcome}
    Activation.objects.filter(pk=child.pk).update(context=child.context)
    parent = Activation.objects.select_for_update().get(pk=child.parent_id)
    if child.context.get("wait"):
        if parent.status == ActivationStatus.WAITING and not _awaited(parent):
            parent.status = ActivationStatus.QUEUED
            parent.save(update_fields=["status"])
    elif child.context.get("notify") and parent.status not in {ActivationStatus.CANCELLED}:
        signal = activation_create(
            run=run, agent=parent.agent, kind="signal", parent=parent, priority=parent.priority,
            input=(f"The {child.kind} to {child.agent} you started (activation {child.id}) has ended:\n\n"
                   f"{json.dumps(outcome, ensure_ascii=False)}\n\n(Your original task: {parent.input})"),
        )
        sender = Session.objects.filter(activation=child).order_by("-attempt").values_list("id", flat=True).first()
        event_emit(run_id=run.id, type="signal", agent=child.agent, session_id=sender, data={
            "from": child.agent, "to": parent.agent, "activation": str(signal.id),
            "message": f"{child.kind} ended: {outcome['status']}"})


def _awaited(parent: Activation) -> list[str]:
    """What the parent's suspended session still waits for: its children, and requests pending for a person."""
    from agents_app.models import ApprovalRequest

    session_id = (Session.objects.filter(activation=parent, status__in=[SessionStatus.WAITING, SessionStatus.RUNNING])
                  .order_by("-attempt").values_list("id", flat=True).first())
    if session_id is None:
        return []
    children = [str(pk) for pk in parent.children.filter(
        context__wait=True, context__tool_call__startswith=f"{session_id}:",
        status__in=UNSETTLED_ACTIVATION_STATUSES).values_list("id", flat=True)]
    requests = [str(pk) for pk in ApprovalRequest.objects.filter(session_id=session_id, status="pending")
                .values_list("id", flat=True)]
    return children + requests


def session_suspend(*, run_id, session_id, result: str, meta: dict[str, Any]) -> list[str]:
    """The session checkpointed with calls whose results come later: it ends holding nothing.

    Its activation waits until every child it waits for has settled (then it
    is queued and the same session resumes from its checkpoint) — at once if
    they all settled already. Returns the ids of the children it waits for.
    """
    with transaction.atomic():
        run = _run_locked(run_id)
        session = Session.objects.raw("SELECT * FROM agents_app_session WHERE id = %s FOR UPDATE", [session_id])[0]
        activation = Activation.objects.raw("SELECT * FROM agents_app_activation WHERE id = %s FOR UPDATE",
                                            [session.activation_id])[0]
        if run.status in FINISHED_RUN_STATUSES:  # cancelled meanwhile
            session.status, session.finished_at = SessionStatus.CANCELLED, timezone.now()
            session.save(update_fields=["status", "finished_at"])
            Activation.objects.filter(pk=activation.pk).update(status=ActivationStatus.CANCELLED)
            return []
        session.status, session.result, session.meta = SessionStatus.WAITING, result, meta
        session.save(update_fields=["status", "result", "meta"])
        awaited = _awaited(activation)
        activation.status = ActivationStatus.WAITING if awaited else ActivationStatus.QUEUED
        activation.save(update_fields=["status"])
        people = set(map(str, session.approval_requests.filter(status="pending").values_list("id", flat=True)))
        event_emit(run_id=run.id, type="session_suspended", agent=session.agent, session_id=session.id,
                   data={"waiting_for": awaited, "reason": "approval" if people & set(awaited) else "children"})
        _dispatch(run)
    return awaited


# -- what tools ask of the kernel -----------------------------------------------------------


def child_for_call(*, activation_id, call_key: str) -> Activation | None:
    """The child that tool call ``call_key`` of ``activation_id`` started, if it did (a resumed call)."""
    return Activation.objects.filter(parent_id=activation_id, context__tool_call=call_key).first()


def child_spawn(*, activation_id, agent: str, task: str, kind: str, priority: int = DEFAULT_PRIORITY,
                context: dict[str, Any] | None = None, call_key: str = "", wait: bool = False) -> Activation:
    """A child activation of ``activation_id`` (spawn or delegate), within depth and fan-out limits.

    ``call_key`` identifies the tool call that asks for it: asked again (the
    session resumed), the same child is returned and nothing new starts.
    With ``wait`` the parent's session waits for its outcome (the tool's
    result); without, the outcome reaches the parent's agent as a signal.
    """
    with transaction.atomic():
        parent = Activation.objects.select_related("run").get(pk=activation_id)
        run = Run.objects.select_for_update().get(pk=parent.run_id)
        if call_key:
            existing = child_for_call(activation_id=activation_id, call_key=call_key)
            if existing is not None:
                return existing
        max_depth = int(run.limits.get("max_depth", DEFAULT_LIMITS["max_depth"]))
        max_fanout = int(run.limits.get("max_fanout", DEFAULT_LIMITS["max_fanout"]))
        if parent.depth + 1 > max_depth:
            raise LimitExceeded(f"spawn depth limit reached: {parent.agent} is at depth {parent.depth} "
                                f"and the run allows {max_depth}")
        if parent.children.filter(kind__in=["spawn", "delegate"]).count() >= max_fanout:
            raise LimitExceeded(f"fan-out limit reached: {parent.agent} already has {max_fanout} children")
        agent_resolve(run=run, slug=agent)  # exists?
        marks = {"tool_call": call_key, "wait": True} if wait else {"tool_call": call_key, "notify": True}
        child = activation_create(run=run, agent=agent, input=task, kind=kind, parent=parent, priority=priority,
                                  context={**(context or {}), **(marks if call_key else {})})
        event_emit(run_id=run.id, type=kind, agent=parent.agent, data={
            "from": parent.agent, "to": agent, "activation": str(child.id), "task": task[:2000],
            "priority": priority, "wait": wait,
        })
    transaction.on_commit(lambda: run_dispatch_async(run_id=run.id))
    return child


def parent_signal(*, activation_id, message: str) -> Activation:
    """Re-activate the parent's agent with ``message`` (an error for a root agent)."""
    with transaction.atomic():
        activation = Activation.objects.select_related("run", "parent").get(pk=activation_id)
        parent = activation.parent
        if parent is None:
            raise RunError("signal_parent: this agent is the root of the run and has no parent")
        run = Run.objects.select_for_update().get(pk=activation.run_id)
        signal = activation_create(
            run=run, agent=parent.agent, kind="signal", parent=parent,
            input=f"Message from {activation.agent}:\n\n{message}\n\n(Your original task: {parent.input})",
            priority=parent.priority,
        )
        event_emit(run_id=run.id, type="signal", agent=activation.agent, data={
            "from": activation.agent, "to": parent.agent, "activation": str(signal.id), "message": message[:2000],
        })
    transaction.on_commit(lambda: run_dispatch_async(run_id=run.id))
    return signal


def output_set(*, activation_id, name: str, value: Any) -> None:
    """Set a workflow step's named output; :class:`InvalidOutput` when the step's schema for it refuses it."""
    with transaction.atomic():
        activation = Activation.objects.select_for_update().get(pk=activation_id)
        schema = (activation.context.get("output_schemas") or {}).get(name)
        errors = value_errors(schema, value) if schema is not None else []
        if errors:
            raise InvalidOutput(f"Output {name} was not set: its value does not match the output's schema:\n"
                                f"{describe(errors)}\n\nCall set_output again with a value that matches this JSON "
                                f"Schema (this is your one chance to correct it):\n{schema_text(schema)}")
        activation.context = {**activation.context, "outputs": {**activation.context.get("outputs", {}), name: value}}
        activation.save(update_fields=["context"])


def workspace_write(*, run_id, path: str, content: str, agent: str, session_id) -> WorkspaceFile:
    """Write a run's file and its ``file_change`` event; WorkspaceFull when the workspace would pass its limit."""
    with transaction.atomic():
        list(Run.objects.select_for_update().filter(pk=run_id).values_list("pk"))  # one writer of the run at a time
        file, created = WorkspaceFile.objects.select_for_update().get_or_create(
            run_id=run_id, path=path,
            defaults={"content": content, "author": agent, "session_id": session_id},
        )
        if not created:
            file.content, file.author, file.session_id = content, agent, session_id
            file.version += 1
            file.save(update_fields=["content", "author", "session", "version", "updated_at"])
        changed = event_emit(run_id=run_id, type="file_change", agent=agent, session_id=session_id, data={
            "path": path, "version": file.version, "action": "created" if created else "updated",
            "bytes": len(content.encode("utf-8")),
        })
        file_version_keep(run_id=run_id, seq=changed["seq"], files={path: content})
        with connection.cursor() as cursor:
            cursor.execute(USED_SQL, [run_id])
            workspace_check(path=path, used=cursor.fetchone()[0])
    return file


def workspace_delete(*, run_id, path: str, agent: str, session_id) -> bool:
    with transaction.atomic():
        deleted, _ = WorkspaceFile.objects.filter(run_id=run_id, path=path).delete()
        if deleted:
            changed = event_emit(run_id=run_id, type="file_change", agent=agent, session_id=session_id,
                                 data={"path": path, "action": "deleted"})
            file_version_keep(run_id=run_id, seq=changed["seq"], files={path: None})
    return bool(deleted)
