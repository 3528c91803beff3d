"""The scheduler: what runs next, across all runs and teams, and on which worker (SPEC §2, §8).

Work goes through three steps. A run *admits* its queued activations up to its
``max_concurrency`` (:func:`dispatch`); admitted work is *ready*. A worker with
a free slot *claims* ready work, fairly across teams (``claim``: per-team
limits, weighted round robin, then priority and age), and runs its session on
its loop (``loop``). Workers beat; a dead one's sessions are resumed by the
others within seconds (``workers``). A live worker hands back what it claimed
and could not begin (the database connection broke): :func:`claims_return`.

This module is the scheduler's public API; its submodules are private to it
(``lint-imports``, contract "scheduler-private"). What resumes a session — an
approval decided, a child settled, a workflow step done — calls :func:`dispatch`
on the run it holds locked (:func:`run_locked`), after :func:`wake` queued the
session's activation.
"""

from agents_app.scheduler.admission import (  # noqa: F401
    DEFAULT_MAX_CONCURRENCY,
    READY_CHANNEL,
    current_queue,
    dispatch,
    dispatch_later,
    dispatch_run,
    ready_notify,
    run_end_notify,
    run_finish,
    run_locked,
)
from agents_app.scheduler.claim import claims_return, team_limit  # noqa: F401
from agents_app.scheduler.stats import WAIT_WINDOW_S, TeamQueue, team_queues  # noqa: F401
from agents_app.scheduler.waits import awaited, wake  # noqa: F401
from agents_app.scheduler.workers import workers_dead  # noqa: F401


def worker_start(*, name: str, queue: str):
    """Start this worker process's scheduler loop, claiming the work of the pool ``queue`` (Celery's
    worker_ready)."""
    from agents_app.scheduler.loop import worker_start as start

    return start(name=name, queue=queue)


def worker_stop() -> None:
    """Stop it: no more claims, a short drain, then the other workers take what is left."""
    from agents_app.scheduler.loop import worker_stop as stop

    stop()
