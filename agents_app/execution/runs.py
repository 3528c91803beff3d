"""Runs in the database: start, dispatch, finish, cancel.

Plain synchronous ORM functions (the session coroutine calls them through
``runner.db``). Every state change takes the run's row lock, so concurrent
sessions of one run never double-dispatch or double-finish it. The rest of a
run's life is beside this module: sessions (``lifecycle``), parents and
children (``children``), what tools ask (``tool_requests``), the sweeps
(``reaper``).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from agents_app.execution.agents import agent_resolve
from agents_app.execution.errors import RunError, ScriptError
from agents_app.execution.hooks import RUN_HOOKS
from agents_app.models import Activation, Agent, Run, Session, Team
from agents_app.models.runs import (
    ACTIVE_ACTIVATION_STATUSES,
    FINISHED_RUN_STATUSES,
    ActivationStatus,
    RunStatus,
    SessionStatus,
)
from agents_app.money import money_str
from mas_core.eventlog import event_append as event_emit

logger = logging.getLogger(__name__)


logger = logging.getLogger(__name__)


DEFAULT_LIMITS = {"max_depth": 3, "max_fanout": 5, "max_concurrency": 8, "max_retries": 2}


# Activations are dispatched lowest priority number first (then oldest first): 0 before 100.
DEFAULT_PRIORITY = 100


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


@transaction.atomic
def run_start(
    *, team: Team, agent: str, input: str, user=None, limits: dict[str, Any] | None = None,
    budget: dict[str, Any] | None = None, provider: str = "", script: dict[str, Any] | None = None,
    approvals: list[Any] | None = None, versions: dict[str, int] | None = None, is_eval: bool = False,
    eval_real_models: bool = False,
) -> Run:
    """Create a run with its root activation and send that to a worker (after commit).

    ``approvals``: tool names or patterns whose calls wait for a person in this run, on top of what the
    definitions and the team ask for (agents_app.approvals.policy). ``versions`` pins definitions at other
    versions than their current ones (``{"agent:writer": 2}``: an eval of an older version); ``is_eval``
    marks a case of an eval, and ``eval_real_models`` lets its unscripted agents call the team's real models.
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
        eval_real_models=is_eval and eval_real_models,
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
    from mas_core import telemetry
    if RUN_HOOKS.run_finish(run):
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

    approvals_cancel(run=run)
    RUN_HOOKS.run_cancelled(run)
    event_emit(run_id=run.id, type="run_complete", agent=run.agent,
               data={"status": "cancelled", "error": run.error})
    run_end_notify(run)
    return run
