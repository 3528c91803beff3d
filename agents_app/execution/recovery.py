"""Crash recovery that needs no beat process.

Every worker sweeps for lost work when it starts and then every
``MAS_REAP_INTERVAL_S``: sessions whose worker died are resumed from their
checkpoint (``sessions_reap``) and work whose message was lost is
dispatched again (``runs_unstick``); the apps above add their own sweeps
(``sweep_hook_register``: evals_app restarts eval collections). A sweep at start-up alone is
not enough: a worker started right after another was killed finds the dead
session not yet stale, and nothing would look again.

Workers take turns through a PostgreSQL advisory lock — the database is the
one thing they all share — so one sweep runs at a time and the others skip
theirs. Beat's ``reap_sessions`` goes through the same lock, so deploying
beat only adds sweeps that find the lock taken or nothing to do.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection

from agents_app.execution.reaper import runs_unstick, sessions_reap
from mas_core.runner import db, runner

logger = logging.getLogger(__name__)

# The key of the sweep's advisory lock ("MASREAP" in ASCII): unique among MAS's advisory locks.
SWEEP_LOCK = 0x4D41535245415000


@dataclass(frozen=True)
class Sweep:
    resumed: list[str]  # activations whose session lost its worker, queued again
    dispatched: list[str]  # runs whose work nothing would have picked up, dispatched again
    expired: list[str] = field(default_factory=list)  # approval requests given their default outcome
    # What the sweeps of the apps above found and restarted, by sweep name (only those that found something).
    others: dict[str, list[str]] = field(default_factory=dict)


# Sweeps of the apps above this one (evals_app restarts eval collections whose task chain stopped), filled
# in their AppConfig.ready: agents_app imports none of them. Each returns the ids of what it restarted.
SWEEP_HOOKS: dict[str, Callable[[], list[str]]] = {}


def sweep_hook_register(name: str, sweep: Callable[[], list[str]]) -> None:
    """Run ``sweep`` in every recovery sweep, under the same lock (from an ``AppConfig.ready``)."""
    SWEEP_HOOKS[name] = sweep


def _other_sweeps() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, sweep in list(SWEEP_HOOKS.items()):
        try:
            ids = sweep()
        except Exception:
            # One app's sweep failing must not stop the others (nor the next sweep).
            logger.warning("recovery sweep hook failed", extra={"sweep": name}, exc_info=True)
            continue
        if ids:
            found[name] = ids
    return found


def recovery_sweep() -> Sweep | None:
    """Resume what dead workers left and dispatch lost work; None when another process is sweeping now.

    The lock is a session-level advisory lock on this thread's connection,
    taken and released within the call; a worker that dies holding it loses
    its connection, and PostgreSQL releases the lock with it.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [SWEEP_LOCK])
        (locked,) = cursor.fetchone()
    if not locked:
        return None
    try:
        from agents_app.approvals.services import approvals_expire

        return Sweep(resumed=sessions_reap(), dispatched=runs_unstick(),
                     expired=approvals_expire(), others=_other_sweeps())
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [SWEEP_LOCK])


async def sweep_forever(*, interval_s: float) -> None:
    """Sweep now, then every ``interval_s`` seconds (only now when it is 0), surviving failed sweeps."""
    while True:
        try:
            await db(recovery_sweep)()
        except Exception:
            # The database or the broker is away for a moment: the next sweep tries again.
            logger.warning("recovery sweep failed", exc_info=True)
        if interval_s <= 0:
            return
        await asyncio.sleep(interval_s)


def sweeper_start() -> Future:
    """Start this worker process's sweeps on its session loop (called once the worker is ready)."""
    interval_s = float(settings.MAS_REAP_INTERVAL_S)
    logger.info("recovery sweeps started", extra={"interval_s": interval_s})
    return asyncio.run_coroutine_threadsafe(sweep_forever(interval_s=interval_s), runner.loop())
