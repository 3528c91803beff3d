"""The sweeps: sessions whose worker died are resumed or failed, runs that lost their dispatch are sent again.

A dead worker's sessions are handed over as soon as the scheduler sees it
stop beating (``worker_sessions_requeue``, from ``agents_app.scheduler``);
``sessions_reap`` is the slower backstop for a session whose own heartbeat
stopped while its worker still beats. Celery beat runs the sweeps
(``agents_app.tasks``); so does every worker (``recovery``).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agents_app.execution.lifecycle import _session_finish, _settled_hooks, session_stale_after_s
from agents_app.models import Activation, Run, Session, Worker
from agents_app.models.runs import (
    ADMITTED_ACTIVATION_STATUSES,
    ACTIVE_RUN_STATUSES,
    ActivationStatus,
    RunStatus,
    SessionStatus,
)
from agents_app.scheduler import claims_return, dispatch, dispatch_run, ready_notify, run_locked, workers_dead
from mas_core.eventlog import event_append as event_emit

logger = logging.getLogger(__name__)


def sessions_reap() -> list[str]:
    """Re-queue activations whose running session stopped its heartbeat (``MAS_SESSION_STALE_S``) while its
    worker beats (or is unknown); returns their ids. The session stays ``running``: the worker that claims the activation next resumes it from
    its last checkpoint.

    Only an activation still ``running`` (claimed by the dead worker) is
    reaped: once queued again it waits for a worker to claim it, however many
    sweeps pass meanwhile (each would otherwise count one more death).
    """
    cutoff = timezone.now() - timedelta(seconds=session_stale_after_s())
    # A session of a worker that stopped beating is the scheduler's: the living hand a dead worker's work over
    # whole (workers_reap, within MAS_WORKER_DEAD_S) and say it died.
    stale_sessions = Session.objects.filter(status=SessionStatus.RUNNING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True)).exclude(worker__in=workers_dead())
    reaped = _sessions_requeue(stale_sessions, reason=lambda worker: f"worker {worker or '?'} stopped answering")
    if reaped:
        logger.warning("sessions reaped", extra={"activations": reaped})
    return reaped


def worker_sessions_requeue(*, worker: str) -> list[str]:
    """The worker ``worker`` is dead: what it claimed is ready again, and its running sessions are queued to
    resume elsewhere from their checkpoints. Returns the ids of the activations concerned."""
    handed = claims_return(worker=worker)
    return handed + _sessions_requeue(Session.objects.filter(status=SessionStatus.RUNNING, worker=worker),
                                      reason=lambda name: f"worker {name} died")


def _sessions_requeue(sessions, *, reason) -> list[str]:
    """Queue again the activations of ``sessions`` (running ones whose worker is gone), each in its own
    transaction under its run's lock; a session whose worker died ``MAS_MAX_RESUMES`` times is failed
    instead (a session that kills its worker must not take worker after worker down)."""
    max_resumes = int(getattr(settings, "MAS_MAX_RESUMES", 3))
    reaped: list[str] = []
    # A custom tool's worker runs inline in its caller's session, never on its own: its caller, resumed,
    # resumes it (or, failed, cancels it). Sent to a worker by itself, its caller would find it taken.
    rows = (sessions.filter(run__status__in=[RunStatus.RUNNING, RunStatus.WAITING],
                            activation__status=ActivationStatus.RUNNING)
            .exclude(activation__kind="tool")
            .values_list("activation_id", "run_id", "agent", "id", "worker"))
    for activation_id, run_id, agent, session_id, worker in rows:
        why = reason(worker)
        with transaction.atomic():
            run = run_locked(run_id)  # a claim (session_begin) locks the run first too: none is under way
            activation = Activation.objects.select_for_update().filter(
                pk=activation_id, status=ActivationStatus.RUNNING).first()
            if activation is None or not sessions.filter(pk=session_id).exists():
                continue
            resumes = activation.ctx.resumes
            if resumes >= max_resumes:
                failure = {"kind": "unknown", "last_tool_calls": [], "suggested_retry": False,
                           "message": f"{why}; the session was resumed {resumes} time(s) and its worker "
                                      f"died each time, so it is not resumed again"}
                end = _session_finish(run=run, session_id=session_id, status=SessionStatus.FAILED, result="",
                                      meta={}, failure=failure, ladder=[])
                _settled_hooks(run, end.activation, tier=end.tier, failure=failure)
                dispatch(run)
                reaped.append(str(activation_id))
                continue
            # Stale at once: the worker that claims it next resumes it rather than waiting for it to age.
            Session.objects.filter(pk=session_id).update(heartbeat_at=None)
            activation.status = ActivationStatus.QUEUED
            activation.ctx = activation.ctx.replace(resumes=resumes + 1)
            activation.save(update_fields=["status", "context"])
            event_emit(run_id=run_id, type="retry", agent=agent, session_id=session_id, data={
                "what": "session_resume", "reason": why, "delay_s": 0, "resume": resumes + 1,
            })
            dispatch(run)
            reaped.append(str(activation_id))
    return reaped


def runs_unstick() -> list[str]:
    """Find work that nothing will pick up again, and dispatch it; returns the ids of the runs concerned.

    - An activation claimed by a worker that has no row any more (it was
      reaped, or never registered) and did not begin within the stale time
      is ready again.
    - A queued or running run with nothing admitted (a retry's delayed
      dispatch was lost with the broker) is dispatched: that admits what is
      due, schedules what waits, or finishes the run. Dispatching is
      idempotent.
    """
    cutoff = timezone.now() - timedelta(seconds=session_stale_after_s())
    live_workers = Worker.objects.values("name")
    lost = (Activation.objects.filter(status=ActivationStatus.DISPATCHED, dispatched_at__lt=cutoff,
                                      run__status__in=ACTIVE_RUN_STATUSES)
            .exclude(kind="tool").exclude(worker__in=live_workers)
            .values_list("id", "run_id", "agent", "worker"))
    runs: dict[str, None] = {}
    for activation_id, run_id, agent, worker in lost:
        with transaction.atomic():
            run_locked(run_id)
            if Activation.objects.filter(pk=activation_id, status=ActivationStatus.DISPATCHED,
                                         dispatched_at__lt=cutoff).update(status=ActivationStatus.READY,
                                                                          worker="", ready_at=timezone.now()):
                ready_notify()
                event_emit(run_id=run_id, type="retry", agent=agent, data={
                    "what": "dispatch", "activation": str(activation_id), "delay_s": 0,
                    "reason": f"worker {worker or '?'} took it and is gone"})
                runs[str(run_id)] = None
    # A run waiting for a person is left alone, unless a decision queued work whose dispatch was lost.
    idle = (Run.objects.filter(Q(status__in=[RunStatus.QUEUED, RunStatus.RUNNING])
                               | Q(status=RunStatus.WAITING, activations__status=ActivationStatus.QUEUED),
                               created_at__lt=cutoff)
            .exclude(activations__status__in=ADMITTED_ACTIVATION_STATUSES).values_list("id", flat=True).distinct())
    runs.update((str(run_id), None) for run_id in idle)
    for run_id in runs:
        dispatch_run(run_id=run_id)
    if runs:
        logger.info("runs dispatched again", extra={"runs": list(runs)})
    return list(runs)
