"""The sweeps: sessions whose worker died are resumed or failed, runs that lost their dispatch are sent again.

Celery beat runs both (``agents_app.tasks``); so does a worker at start-up
(``recovery``).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

# run_dispatch_async through its module: tests hold the dispatch there (monkeypatch) while they age a run.
from agents_app.execution import runs as run_rows
from agents_app.execution.lifecycle import _session_finish, _settled_hooks, session_stale_after_s
from agents_app.execution.runs import _dispatch, _run_locked
from agents_app.models import Activation, Run, Session
from agents_app.models.runs import (
    ACTIVE_ACTIVATION_STATUSES,
    ACTIVE_RUN_STATUSES,
    ActivationStatus,
    RunStatus,
    SessionStatus,
)
from mas_core.eventlog import event_append as event_emit

logger = logging.getLogger(__name__)


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
    # A custom tool's worker runs inline in its caller's session, never on its own: its caller, resumed,
    # resumes it (or, failed, cancels it). Sent to a worker by itself, its caller would find it taken.
    stale = (stale_sessions.filter(run__status__in=[RunStatus.RUNNING, RunStatus.WAITING],
                                   activation__status=ActivationStatus.RUNNING)
             .exclude(activation__kind="tool")
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
            transaction.on_commit(lambda run_id=run_id: run_rows.run_dispatch_async(run_id=run_id))
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
        run_rows.run_dispatch_async(run_id=run_id)
    if runs:
        logger.info("runs dispatched again", extra={"runs": list(runs)})
    return list(runs)
