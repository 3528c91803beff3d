"""Worker processes in the database: each beats every ``MAS_WORKER_BEAT_S``; one silent for
``MAS_WORKER_DEAD_S`` is dead, and its work goes to the others at once.

A dead worker's claimed activations are ready again, and its running
sessions are resumed from their checkpoints by whichever worker claims them
(``agents_app.execution.reaper.session_requeue``), each tool call still once.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import connection, transaction

logger = logging.getLogger(__name__)


def worker_beat(*, name: str, queue: str, slots: int, running: int) -> None:
    """Record that ``name`` (serving ``queue``) is alive with ``running`` of its ``slots`` in use (registering
    it if need be)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO agents_app_worker (name, queue, slots, running, started_at, heartbeat_at) "
            "VALUES (%s, %s, %s, %s, now(), now()) ON CONFLICT (name) DO UPDATE "
            "SET queue = EXCLUDED.queue, slots = EXCLUDED.slots, running = EXCLUDED.running, heartbeat_at = now()",
            [name, queue, slots, running])


def worker_gone(*, name: str) -> None:
    """``name`` stops: mark it dead now, so the others take its work at their next beat."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE agents_app_worker SET heartbeat_at = 'epoch' WHERE name = %s", [name])


def workers_dead() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM agents_app_worker WHERE heartbeat_at < now() - make_interval(secs => %s)",
                       [float(settings.MAS_WORKER_DEAD_S)])
        return [name for (name,) in cursor.fetchall()]


def workers_reap(names: list[str]) -> list[str]:
    """Hand the work of the dead workers ``names`` to the living; returns the activations concerned.

    The rows of the workers are deleted with their work handed over, one
    worker per transaction; a worker that beats again meanwhile (it was only
    slow) keeps its row and its work.
    """
    from agents_app.execution.reaper import worker_sessions_requeue

    handed: list[str] = []
    for name in names:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(
                    "DELETE FROM agents_app_worker WHERE name = %s AND heartbeat_at < now() - make_interval(secs => %s) "
                    "RETURNING name", [name, float(settings.MAS_WORKER_DEAD_S)])
                if cursor.fetchone() is None:
                    continue
            handed += worker_sessions_requeue(worker=name)
    if handed:
        logger.warning("a worker died: its sessions go to the others", extra={"workers": names, "activations": handed})
    return handed
