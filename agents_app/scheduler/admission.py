"""A run's side of dispatch: which of its queued activations are admitted (made ready), and its end.

A run admits activations up to its ``max_concurrency`` (retries only once
their backoff is over), lowest priority number first, then oldest. Admitted
work is ``ready``: the team queue of :mod:`agents_app.scheduler.claim` hands
it to a worker. A run with nothing left to do finishes here.

Every function takes (or is given) the run's row lock, so concurrent
sessions of one run never admit twice or finish it twice.
"""

from __future__ import annotations

import logging

from django.db import connection, transaction
from django.utils import timezone

from agents_app.execution.hooks import RUN_HOOKS
from agents_app.models import Run
from agents_app.models.runs import (  # noqa: F401  (current_queue: re-exported)
    current_queue,
    ADMITTED_ACTIVATION_STATUSES,
    FINISHED_RUN_STATUSES,
    ActivationStatus,
    RunStatus,
)
from agents_app.money import money_str
from mas_core.eventlog import event_append as event_emit

logger = logging.getLogger(__name__)

# The channel workers LISTEN on: a NOTIFY on it (delivered when its transaction commits) says work is ready.
READY_CHANNEL = "mas_ready"

DEFAULT_MAX_CONCURRENCY = 8


def run_locked(run_id) -> Run:
    """Lock the run's row (the first lock every writer of a run takes) and return it."""
    # Raw SQL: the hottest lock of the kernel, without the ORM's query compilation.
    return Run.objects.raw("SELECT * FROM agents_app_run WHERE id = %s FOR UPDATE", [run_id])[0]


def ready_notify() -> None:
    """Tell the workers work is ready, when this transaction commits (outside one: at once)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, '')", [READY_CHANNEL])


def dispatch_run(*, run_id) -> list[str]:
    """:func:`dispatch` in its own transaction, taking the run's lock."""
    with transaction.atomic():
        return dispatch(run_locked(run_id))


def dispatch_later(*, run_id, delay_s: float = 0) -> None:
    """:func:`dispatch_run` after ``delay_s`` seconds (a retry's backoff), from a Celery task."""
    from agents_app.tasks import dispatch_run as task

    task.apply_async((str(run_id),), countdown=delay_s or None)


def dispatch(run: Run) -> list[str]:
    """Admit the run's due queued activations, up to ``max_concurrency`` admitted at once; finish an idle
    run. ``run``'s row is locked by the caller's transaction. Returns the ids admitted."""
    if run.status in FINISHED_RUN_STATUSES:
        return []
    now = timezone.now()
    if run.status == RunStatus.QUEUED:
        run.status, run.started_at = RunStatus.RUNNING, now
        Run.objects.filter(pk=run.pk).update(status=run.status, started_at=now)
    limit = int(run.limits.get("max_concurrency", DEFAULT_MAX_CONCURRENCY))
    with connection.cursor() as cursor:
        # One statement: admit what is due and has room, and count what is left.
        cursor.execute(
            """
            WITH counts AS (
                SELECT count(*) FILTER (WHERE status = ANY(%(admitted)s)) AS admitted,
                       count(*) FILTER (WHERE status = 'queued') AS queued,
                       count(*) FILTER (WHERE status = 'suspended') AS suspended,
                       min(not_before) FILTER (WHERE status = 'queued' AND not_before > %(now)s) AS later
                FROM agents_app_activation WHERE run_id = %(run)s
            ), due AS (
                SELECT id FROM agents_app_activation
                WHERE run_id = %(run)s AND status = 'queued' AND (not_before IS NULL OR not_before <= %(now)s)
                ORDER BY priority, created_at
                LIMIT GREATEST(0, %(limit)s - (SELECT admitted FROM counts))
                FOR UPDATE
            ), admitted AS (
                UPDATE agents_app_activation a SET status = 'ready', ready_at = %(now)s, worker = ''
                FROM due WHERE a.id = due.id RETURNING a.id
            )
            SELECT (SELECT array_agg(id::text) FROM admitted), admitted, queued, suspended, later FROM counts
            """,
            {"admitted": list(ADMITTED_ACTIVATION_STATUSES), "now": now, "run": run.id, "limit": limit},
        )
        ids, admitted, queued, suspended, later = cursor.fetchone()
    if ids:
        ready_notify()
        return ids
    if admitted == 0:
        if later is not None:  # only backed-off retries are left: come back when the first is due
            delay = max(0.0, (later - now).total_seconds())
            transaction.on_commit(lambda: dispatch_later(run_id=run.id, delay_s=delay))
        elif not suspended and not queued:  # a suspended session is resumed by what it waits for
            run_finish(run)
    return []


def run_finish(run: Run) -> None:
    """All work is done: the run's outcome is its root agent's last result (or its workflow's)."""
    from mas_core import telemetry
    if RUN_HOOKS.run_finish(run):
        run_end_notify(run)
        telemetry.record_run(run)
        return
    with connection.cursor() as cursor:
        # The root activation (the first without a parent) and the root agent's last one (its own or a
        # signal's), in one statement: (status, result) of each, or NULL.
        cursor.execute(
            """
            SELECT (SELECT ARRAY[status, result] FROM agents_app_activation
                    WHERE run_id = %(run)s AND parent_id IS NULL ORDER BY created_at LIMIT 1),
                   (SELECT ARRAY[status, result] FROM agents_app_activation
                    WHERE run_id = %(run)s AND agent = %(agent)s AND kind IN ('root', 'signal')
                    ORDER BY created_at DESC LIMIT 1)
            """, {"run": run.id, "agent": run.agent})
        root, last = cursor.fetchone()
    failed = root is None or (last or root)[0] != ActivationStatus.DONE
    run.status = RunStatus.FAILED if failed else RunStatus.SUCCEEDED
    run.result = (last or root)[1] if root else ""
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
