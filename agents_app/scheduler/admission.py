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
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from agents_app.execution.hooks import RUN_HOOKS
from agents_app.models import Run
from agents_app.models.runs import (  # noqa: F401  (current_queue: re-exported)
    current_queue,
    ADMITTED_ACTIVATION_STATUSES,
    FINISHED_RUN_STATUSES,
    RunStatus,
)
from agents_app.money import money_str
from mas_core.eventlog import Entry, entry, events_append

logger = logging.getLogger(__name__)

# The channel workers LISTEN on: a NOTIFY on it (delivered when its transaction commits) says work is ready.
READY_CHANNEL = "mas_ready"

DEFAULT_MAX_CONCURRENCY = 8

# Admit what is due and has room, and count what is left: the run's activations admitted, queued and suspended
# after it, and when its first backed-off retry is due.
ADMIT_SQL = """
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
"""

# An agent run's outcome, written: the (status, result) of its root agent's last activation (its own or a
# signal's), else of its root activation (the first without a parent); succeeded when that one is done,
# failed otherwise (and with no root at all, with no result). A failed run gets the error %(error)s (the
# run's as the caller holds it) or, with none, %(unfinished)s. Returns the outcome written, and the slug of
# the run's team when the team has a webhook to tell.
RUN_OUTCOME_SQL = """
WITH found AS (
    SELECT (SELECT ARRAY[status, result] FROM agents_app_activation
            WHERE run_id = %(run)s AND parent_id IS NULL ORDER BY created_at LIMIT 1) AS root,
           (SELECT ARRAY[status, result] FROM agents_app_activation
            WHERE run_id = %(run)s AND agent = %(agent)s AND kind IN ('root', 'signal')
            ORDER BY created_at DESC LIMIT 1) AS last
), outcome AS (
    SELECT root IS NULL OR (coalesce(last, root))[1] <> 'done' AS failed,
           CASE WHEN root IS NULL THEN '' ELSE (coalesce(last, root))[2] END AS result
    FROM found
)
UPDATE agents_app_run r
SET status = CASE WHEN failed THEN 'failed' ELSE 'succeeded' END, result = outcome.result,
    error = CASE WHEN failed AND %(error)s = '' THEN %(unfinished)s ELSE %(error)s END, finished_at = %(now)s
FROM outcome WHERE r.id = %(run)s
RETURNING r.status, r.result, r.error,
    (SELECT slug FROM agents_app_team t WHERE t.id = r.team_id AND t.webhook_url <> '')
"""


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


def dispatch(run: Run, *, root_ended: list[Entry] | None = None) -> list[str]:
    """Admit the run's due queued activations, up to ``max_concurrency`` admitted at once; finish an idle
    run. ``run``'s row is locked by the caller's transaction. Returns the ids admitted.

    ``root_ended``: the events of the run's root session, which settled in this transaction, not appended
    yet. The run is an agent's (no workflow decides its outcome); they are appended first, with the run's
    completion when it ends here.
    """
    pending = root_ended or []
    if run.status in FINISHED_RUN_STATUSES:
        events_append(run_id=run.id, entries=pending)
        return []
    now = timezone.now()
    if run.status == RunStatus.QUEUED:
        run.status, run.started_at = RunStatus.RUNNING, now
        Run.objects.filter(pk=run.pk).update(status=run.status, started_at=now)
    limit = int(run.limits.get("max_concurrency", DEFAULT_MAX_CONCURRENCY))
    with connection.cursor() as cursor:
        cursor.execute(ADMIT_SQL, {"admitted": list(ADMITTED_ACTIVATION_STATUSES), "now": now, "run": run.id,
                                   "limit": limit})
        ids, admitted, queued, suspended, later = cursor.fetchone()
    # A suspended session is resumed by what it waits for; backed-off retries by a dispatch when the first is due.
    if not ids and admitted == 0 and later is None and not suspended and not queued:
        run_finish(run, root_ended=root_ended)
        return []
    events_append(run_id=run.id, entries=pending)
    if ids:
        ready_notify()
        return ids
    if admitted == 0 and later is not None:  # only backed-off retries are left: come back when the first is due
        delay = max(0.0, (later - now).total_seconds())
        transaction.on_commit(lambda: dispatch_later(run_id=run.id, delay_s=delay))
    return []


def run_finish(run: Run, *, root_ended: list[Entry] | None = None) -> None:
    """All work is done: the run's outcome is its root agent's last result (or its workflow's).

    ``root_ended``: as :func:`dispatch` takes it (then no workflow is asked, and the run's completion is
    appended with these events, in one statement).
    """
    from agents_app.approvals.webhooks import webhook_send
    from mas_core import telemetry

    if root_ended is None and RUN_HOOKS.run_finish(run):
        run_end_notify(run)
        telemetry.record_run(run)
        return
    run.finished_at = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(RUN_OUTCOME_SQL, {"run": run.id, "agent": run.agent, "error": run.error,
                                         "unfinished": f"the root agent {run.agent} did not finish",
                                         "now": run.finished_at})
        run.status, run.result, run.error, webhook_team = cursor.fetchone()
    duration = (run.finished_at - (run.started_at or run.created_at)).total_seconds()
    events_append(run_id=run.id, entries=[*(root_ended or []), entry("run_complete", agent=run.agent, data={
        "status": run.status, "result": run.result[:2000], "error": run.error,
        "prompt_tokens": run.prompt_tokens, "completion_tokens": run.completion_tokens,
        "cost_usd": money_str(run.cost_usd), "duration_s": round(duration, 3),
    })])
    if webhook_team is not None:
        webhook_send(team_id=run.team_id, team=webhook_team, event="run_end", data=_run_end_data(run))
    telemetry.record_run(run)


def run_end_notify(run: Run) -> None:
    """The team's webhook hears of the run's end (after commit; nothing when the team has none)."""
    from agents_app.approvals.webhooks import webhook_notify

    webhook_notify(team_id=run.team_id, event="run_end", data=_run_end_data(run))


def _run_end_data(run: Run) -> dict[str, Any]:
    return {"run": str(run.id), "agent": run.agent, "workflow": run.workflow, "status": run.status,
            "result": run.result[:2000], "error": run.error}
