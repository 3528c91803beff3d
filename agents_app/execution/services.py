"""Runs in the database: start, dispatch, spawn/delegate/signal, finish, cancel.

Plain synchronous ORM functions (the session coroutine calls them through
``runner.db``). Every state change takes the run's row lock, so concurrent
sessions of one run never double-dispatch or double-finish it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from agents_app.definitions.kinds import AGENT
from agents_app.definitions.markdown import DefinitionError, parse_definition
from agents_app.execution.eventlog import event_append as event_emit
from agents_app.models import Activation, Agent, Run, Session, Team, WorkspaceFile
from agents_app.models.runs import (
    ACTIVE_ACTIVATION_STATUSES,
    FINISHED_RUN_STATUSES,
    OPEN_ACTIVATION_STATUSES,
    ActivationStatus,
    RunStatus,
    SessionStatus,
)
from agents_app.specs import AgentSpec
from tools_app.catalog import SAFE_DEFAULT_TOOLS

logger = logging.getLogger(__name__)

DEFAULT_LIMITS = {"max_depth": 3, "max_fanout": 5, "max_concurrency": 8, "max_retries": 2}


class RunError(ValueError):
    """A request the kernel refuses, with a message for the caller."""


class LimitExceeded(RunError):
    pass


# -- agents of a run -------------------------------------------------------------


@dataclass(frozen=True)
class AgentDefinition:
    slug: str
    spec: AgentSpec
    body: str
    version: int | None  # None for agents written into the run's workspace
    source: str  # "team" | "workspace"


def agent_resolve(*, run: Run, slug: str) -> AgentDefinition:
    """The run's own agent (``agents/<slug>.md`` in its workspace) or the team's."""
    local = WorkspaceFile.objects.filter(run=run, path=f"agents/{slug}.md").values_list("content", flat=True).first()
    if local is not None:
        parsed = parse_definition(AGENT, local, path=f"agents/{slug}.md")
        return AgentDefinition(slug, parsed.spec, parsed.body, None, "workspace")
    row = Agent.objects.filter(team_id=run.team_id, slug=slug).values_list(
        "id", "version", "content_hash", "spec", "body").first()
    if row is None:
        raise RunError(f"agent {slug!r} does not exist in this team or run")
    key = (row[0], row[1], row[2])
    found = _validated.get(key)
    if found is None:
        spec = AgentSpec.model_validate(row[3], context={"known_tools": _team_tool_names(run.team_id)})
        if len(_validated) > 1000:
            _validated.clear()
        found = _validated[key] = AgentDefinition(slug, spec, row[4], row[1], "team")
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
    tools, mcp = _grant(activation.parent_id)
    own = definition.spec.tools if definition.spec.tools is not None else list(SAFE_DEFAULT_TOOLS)
    spec = definition.spec.model_copy(update={
        "tools": [name for name in own if name in tools],
        "mcp_servers": [server for server in definition.spec.mcp_servers if server in mcp],
    })
    return AgentDefinition(definition.slug, spec, definition.body, definition.version, definition.source)


def _grant(activation_id) -> tuple[set[str], list]:
    """The tools and MCP servers the agent of ``activation_id`` holds (its creator's cap applied)."""
    if activation_id is None:
        return set(SAFE_DEFAULT_TOOLS), []
    activation = Activation.objects.select_related("run").get(pk=activation_id)
    if activation.context.get("worker"):
        return set(), []  # a custom tool's worker holds no tools
    spec = agent_capped(agent_resolve(run=activation.run, slug=activation.agent), activation=activation).spec
    return set(spec.tools if spec.tools is not None else SAFE_DEFAULT_TOOLS), list(spec.mcp_servers)


# Validated team agents by (id, version, content hash): a saved change is a new key.
_validated: dict[tuple, AgentDefinition] = {}


def _team_tool_names(team_id: int) -> set[str]:
    from tools_app.models import CustomTool

    return set(CustomTool.objects.filter(team_id=team_id).values_list("name", flat=True))


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
) -> Run:
    """Create a run with its root activation and send that to a worker (after commit)."""
    run = Run(
        team=team, agent=agent, input=input, created_by=user if getattr(user, "pk", None) else None,
        limits={**DEFAULT_LIMITS, **(limits or {})}, budget=budget or {}, provider=provider, script=script,
    )
    definition = agent_resolve(run=run, slug=agent)
    run.versions = {f"agent:{agent}": definition.version}
    run.save(force_insert=True)
    event_emit(run_id=run.id, type="run_start", agent=agent,
               data={"agent": agent, "input": input, "limits": run.limits, "budget": run.budget})
    # The root is the run's only activation: it goes straight to a worker, no dispatch round.
    root = activation_create(run=run, agent=agent, input=input, kind="root", parent=None,
                             status=ActivationStatus.DISPATCHED)
    transaction.on_commit(lambda: _send([str(root.id)]))
    return run


def activation_create(*, run: Run, agent: str, input: str, kind: str, parent: Activation | None,
                      priority: int = 100, context: dict[str, Any] | None = None,
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
            "SELECT count(*) FILTER (WHERE status = ANY(%s)), count(*) FILTER (WHERE status = %s) "
            "FROM agents_app_activation WHERE run_id = %s",
            [list(ACTIVE_ACTIVATION_STATUSES), ActivationStatus.QUEUED, run.id],
        )
        active, waiting = cursor.fetchone()
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
        "cost_usd": str(run.cost_usd), "duration_s": round(duration, 3),
    })
    telemetry.record_run(run)


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
    run.activations.filter(status__in=[ActivationStatus.QUEUED, ActivationStatus.DISPATCHED]).update(
        status=ActivationStatus.CANCELLED)
    from workflows_app.services import workflow_cancelled

    workflow_cancelled(run)
    event_emit(run_id=run.id, type="run_complete", agent=run.agent,
               data={"status": "cancelled", "error": run.error})
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
            "SELECT * FROM agents_app_session WHERE activation_id = %s AND status = %s ORDER BY attempt DESC LIMIT 1",
            [activation_id, SessionStatus.RUNNING])), None)
        if session is not None and session.worker != worker and not _stale(session):
            # A live worker has it (a redelivered message): never run one session twice.
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
                tier=activation.context.get("tier") or definition.spec.tier or "medium", worker=worker,
                heartbeat_at=now,
            )
        else:
            session.worker, session.heartbeat_at = worker, now
            session.save(update_fields=["worker", "heartbeat_at"])
        activation.status = ActivationStatus.RUNNING
        activation.save(update_fields=["status", "attempts"])
        changed: dict[str, Any] = {}
        if run.status == RunStatus.QUEUED:
            changed |= {"status": RunStatus.RUNNING, "started_at": now}
        key = f"agent:{definition.slug}"
        if definition.version is not None and (run.versions or {}).get(key) != definition.version:
            changed["versions"] = _merged(run.versions, key, definition.version)
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
    """
    cutoff = timezone.now() - timedelta(seconds=session_stale_after_s())
    max_resumes = int(getattr(settings, "MAS_MAX_RESUMES", 3))
    reaped: list[str] = []
    stale = (Session.objects.filter(status=SessionStatus.RUNNING, run__status=RunStatus.RUNNING)
             .filter(Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True))
             .values_list("activation_id", "run_id", "agent", "id", "worker"))
    for activation_id, run_id, agent, session_id, worker in stale:
        reason = f"worker {worker or '?'} stopped answering"
        with transaction.atomic():
            run = _run_locked(run_id)
            activation = Activation.objects.select_for_update().filter(
                pk=activation_id, status__in=ACTIVE_ACTIVATION_STATUSES).first()
            if activation is None:
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
    lost = (Activation.objects.filter(status=ActivationStatus.DISPATCHED, dispatched_at__lt=cutoff,
                                      run__status__in=[RunStatus.QUEUED, RunStatus.RUNNING])
            .exclude(kind="tool").exclude(sessions__status=SessionStatus.RUNNING)
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
    idle = (Run.objects.filter(status__in=[RunStatus.QUEUED, RunStatus.RUNNING], created_at__lt=cutoff)
            .exclude(activations__status__in=ACTIVE_ACTIVATION_STATUSES).values_list("id", flat=True))
    runs.update((str(run_id), None) for run_id in idle)
    for run_id in runs:
        run_dispatch_async(run_id=run_id)
    if runs:
        logger.info("runs dispatched again", extra={"runs": list(runs)})
    return list(runs)


def _merged(data: dict, key: str, value: Any) -> dict:
    return {**(data or {}), key: value}


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
                       data={"cost_usd": str(run.cost_usd), "warn_cost_usd": str(budget["warn_cost_usd"])})
        if budget.get("max_cost_usd") is not None and run.cost_usd >= Decimal(str(budget["max_cost_usd"])):
            return f"the run's budget of ${budget['max_cost_usd']} is spent (${run.cost_usd})"
        if (tier == "large" and budget.get("max_large_tier_uses") is not None
                and run.large_tier_uses >= int(budget["max_large_tier_uses"])):
            return f"the run may use the large tier {budget['max_large_tier_uses']} time(s)"
    return None


@dataclass
class SessionEnd:
    retry_in_s: float | None = None  # the activation was re-queued after this delay
    escalated_to: str | None = None
    activation: Activation | None = None
    tier: str = ""


def _session_finish(*, run: Run, session_id, status: str, result: str, meta: dict[str, Any],
                    failure: dict[str, Any] | None, ladder: list[str]) -> SessionEnd:
    """Record the outcome; retry with backoff, escalate up the tier ladder, or settle the activation.

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
        next_tier = _next_tier(session.tier, ladder)
        if next_tier:
            end.escalated_to = next_tier
            activation.context = {**activation.context, "tier": next_tier}
            event_emit(run_id=run.id, type="escalation", agent=session.agent, session_id=session.id,
                       data={"from": session.tier, "to": next_tier})
        activation.status = ActivationStatus.QUEUED
        activation.not_before = timezone.now() + timedelta(seconds=end.retry_in_s)
        event_emit(run_id=run.id, type="retry", agent=session.agent, session_id=session.id, data={
            "what": "session", "attempt": activation.attempts + 1, "delay_s": end.retry_in_s,
            "reason": failure.get("kind"),
        })
    else:
        activation.status, activation.result = ActivationStatus.FAILED, result
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
        _settled_hooks(run, end.activation, tier=end.tier, meta=meta, failure=failure, ladder=ladder)
        _dispatch(run)
    return end


def _settled_hooks(run: Run, activation: Activation, *, tier: str = "", meta: dict[str, Any] | None = None,
                   failure: dict[str, Any] | None = None, ladder: list[str] | None = None) -> None:
    if activation.kind in {"step", "plan"}:  # only workflows create these
        from workflows_app.services import workflow_activation_settled

        workflow_activation_settled(run=run, activation=activation, tier=tier, meta=meta or {}, failure=failure,
                                    ladder=ladder or [])


def _next_tier(tier: str, ladder: list[str]) -> str | None:
    if tier in ladder:
        index = ladder.index(tier)
        return ladder[index + 1] if index + 1 < len(ladder) else None
    return ladder[0] if ladder and ladder[0] != tier else None


# -- what tools ask of the kernel -----------------------------------------------------------


def child_spawn(*, activation_id, agent: str, task: str, kind: str, priority: int = 100,
                context: dict[str, Any] | None = None) -> Activation:
    """A child activation of ``activation_id`` (spawn or delegate), within depth and fan-out limits."""
    with transaction.atomic():
        parent = Activation.objects.select_related("run").get(pk=activation_id)
        run = Run.objects.select_for_update().get(pk=parent.run_id)
        max_depth = int(run.limits.get("max_depth", DEFAULT_LIMITS["max_depth"]))
        max_fanout = int(run.limits.get("max_fanout", DEFAULT_LIMITS["max_fanout"]))
        if parent.depth + 1 > max_depth:
            raise LimitExceeded(f"spawn depth limit reached: {parent.agent} is at depth {parent.depth} "
                                f"and the run allows {max_depth}")
        if parent.children.filter(kind__in=["spawn", "delegate"]).count() >= max_fanout:
            raise LimitExceeded(f"fan-out limit reached: {parent.agent} already has {max_fanout} children")
        agent_resolve(run=run, slug=agent)  # exists?
        child = activation_create(run=run, agent=agent, input=task, kind=kind, parent=parent, priority=priority,
                                  context=context)
        event_emit(run_id=run.id, type=kind, agent=parent.agent, data={
            "from": parent.agent, "to": agent, "activation": str(child.id), "task": task[:2000],
            "priority": priority,
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
    with transaction.atomic():
        activation = Activation.objects.select_for_update().get(pk=activation_id)
        activation.context = {**activation.context, "outputs": {**activation.context.get("outputs", {}), name: value}}
        activation.save(update_fields=["context"])


def workspace_write(*, run_id, path: str, content: str, agent: str, session_id) -> WorkspaceFile:
    with transaction.atomic():
        file, created = WorkspaceFile.objects.select_for_update().get_or_create(
            run_id=run_id, path=path,
            defaults={"content": content, "author": agent, "session_id": session_id},
        )
        if not created:
            file.content, file.author, file.session_id = content, agent, session_id
            file.version += 1
            file.save(update_fields=["content", "author", "session", "version", "updated_at"])
        event_emit(run_id=run_id, type="file_change", agent=agent, session_id=session_id, data={
            "path": path, "version": file.version, "action": "created" if created else "updated",
            "bytes": len(content.encode("utf-8")),
        })
    return file


def workspace_delete(*, run_id, path: str, agent: str, session_id) -> bool:
    with transaction.atomic():
        deleted, _ = WorkspaceFile.objects.filter(run_id=run_id, path=path).delete()
        if deleted:
            event_emit(run_id=run_id, type="file_change", agent=agent, session_id=session_id,
                       data={"path": path, "action": "deleted"})
    return bool(deleted)
