"""The scheduler's side in each worker process: claim ready work when a slot is free, run it, beat.

One coroutine per process, on the process's session loop (``mas_core.runner``):
it claims as many ready activations as the process has free slots
(``MAS_WORKER_SLOTS``) and runs each session as a task on the same loop — no
broker message, no thread per session. A process whose database threads are
backed up claims nothing until they catch up: what it would take would only
queue behind its own work, where no other team's run could overtake it. It wakes when a NOTIFY on
``admission.READY_CHANNEL`` says work is ready (a LISTEN connection of its
own), when one of its sessions ends, and at least every
``MAS_SCHEDULER_POLL_S``. Beside it, a beat every ``MAS_WORKER_BEAT_S``
records the process as alive and hands the work of dead workers to the
living (on a thread of its own: a saturated loop must not look dead).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import Future

import psycopg
from django.conf import settings
from django.db import connection

from agents_app.scheduler import admission
from agents_app.scheduler.claim import claim
from agents_app.scheduler.workers import worker_beat, worker_gone, workers_dead, workers_reap
from mas_core.runner import db, runner

logger = logging.getLogger(__name__)

# At most this many activations per claim: a burst is taken in steps, so other workers get their part.
CLAIM_BATCH = 50
# A claim that found another under way tries again after this long.
CLAIM_RETRY_S = 0.005
# No claim while more than this many database calls per thread wait for the loop's threads; look again after.
BACKLOG_PER_THREAD = 2
BUSY_WAIT_S = 0.02


class WorkerLoop:
    def __init__(self, *, name: str, queue: str, slots: int) -> None:
        self.name, self.queue, self.slots = name, queue, slots
        self.sessions: set[asyncio.Task] = set()
        self.wake = asyncio.Event()
        self.stopping = False
        self.tasks: list[asyncio.Task] = []

    async def serve(self) -> None:
        await db(worker_beat)(name=self.name, queue=self.queue, slots=self.slots, running=0)
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._listen())]
        self.beat = threading.Thread(target=self._beat, args=(loop,), name="mas-beat", daemon=True)
        self.beat.start()
        poll_s = float(settings.MAS_SCHEDULER_POLL_S)
        while not self.stopping:
            self.wake.clear()
            free = self.slots - len(self.sessions)
            if free > 0 and runner.db_backlog() > BACKLOG_PER_THREAD * runner.db_threads:
                # The process is saturated: work it claimed now would wait here behind its own backlog,
                # while a worker with room (or this one, in a moment) could start it at once.
                await asyncio.sleep(BUSY_WAIT_S)
                continue
            claimed = []
            if free > 0:
                try:
                    claimed = await db(claim)(worker=self.name, queue=self.queue, free=min(free, CLAIM_BATCH),
                                              running=len(self.sessions))
                except Exception:
                    logger.warning("scheduler claim failed", exc_info=True)
                    await asyncio.sleep(poll_s)
                    continue
                if claimed is None:  # another worker is claiming: its turn, then ours
                    await asyncio.sleep(CLAIM_RETRY_S)
                    continue
            for item in claimed:
                task = loop.create_task(self._run(item.activation_id))
                self.sessions.add(task)
                task.add_done_callback(self._ended)
            if claimed and len(claimed) == min(free, CLAIM_BATCH):
                await asyncio.sleep(0)  # more may be ready: claim again, after the sessions just started get going
                continue
            try:
                await asyncio.wait_for(self.wake.wait(), poll_s)
            except asyncio.TimeoutError:
                pass

    def _ended(self, task: asyncio.Task) -> None:
        self.sessions.discard(task)
        self.wake.set()

    async def _run(self, activation_id: str) -> None:
        from agents_app.execution.session import execute_activation

        try:
            await execute_activation(activation_id)
        except Exception:
            # Recorded where it could be; what could not (the database was away) the sweep finds again.
            logger.exception("session failed on the worker", extra={"activation": activation_id})

    async def _listen(self) -> None:
        """Set ``wake`` on every NOTIFY of ready work; reconnect when the connection drops."""
        while not self.stopping:
            try:
                async with await psycopg.AsyncConnection.connect(_conninfo(), autocommit=True) as conn:
                    await conn.execute(f"LISTEN {admission.READY_CHANNEL}")
                    self.wake.set()  # anything made ready while it was not listening
                    async for _ in conn.notifies():
                        self.wake.set()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.warning("scheduler LISTEN connection lost; polling until it is back", exc_info=True)
                await asyncio.sleep(1.0)

    def _beat(self, loop: asyncio.AbstractEventLoop) -> None:
        """Beat, and hand the work of dead workers to the living: on a thread of its own with its own
        connection, so a busy loop or backed-up database threads never make a live worker look dead."""
        from django.db import connections

        beat_s = float(settings.MAS_WORKER_BEAT_S)
        try:
            while not self.stopping:
                time.sleep(beat_s)
                if self.stopping:
                    break
                try:
                    worker_beat(name=self.name, queue=self.queue, slots=self.slots, running=len(self.sessions))
                    dead = workers_dead()
                    if dead and workers_reap(dead):
                        loop.call_soon_threadsafe(self.wake.set)
                except Exception:
                    logger.warning("worker beat failed", exc_info=True)
                    connections.close_all()
        finally:
            connections.close_all()


def _conninfo() -> str:
    params = connection.get_connection_params()
    keep = {key: value for key, value in params.items()
            if key in {"dbname", "user", "password", "host", "port", "sslmode", "options"} and value not in (None, "")}
    return psycopg.conninfo.make_conninfo(**keep)


_worker: WorkerLoop | None = None
_future: Future | None = None


def worker_start(*, name: str, queue: str) -> WorkerLoop:
    """Start this process's scheduler loop for the pool ``queue`` (from Celery's worker_ready); returns it."""
    global _worker, _future
    _worker = WorkerLoop(name=name, queue=queue, slots=int(settings.MAS_WORKER_SLOTS))
    logger.info("scheduler started", extra={"worker": name, "slots": _worker.slots})
    _future = asyncio.run_coroutine_threadsafe(_worker.serve(), runner.loop())
    return _worker


def worker_stop(*, drain_s: float | None = None) -> None:
    """Stop claiming; let running sessions end for up to ``drain_s`` (``MAS_WORKER_DRAIN_S``), then mark the
    process dead so the other workers resume what is left at once (from its checkpoints)."""
    if _worker is None:
        return
    _worker.stopping = True
    loop = runner.loop()
    loop.call_soon_threadsafe(_worker.wake.set)
    deadline = time.monotonic() + (float(settings.MAS_WORKER_DRAIN_S) if drain_s is None else drain_s)
    while _worker.sessions and time.monotonic() < deadline:
        time.sleep(0.1)
    for task in _worker.tasks:
        loop.call_soon_threadsafe(task.cancel)
    beat = getattr(_worker, "beat", None)
    if beat is not None:
        beat.join(float(settings.MAS_WORKER_BEAT_S) + 5)  # its last beat must not come after the mark below
    if _worker.sessions:
        # What is still running stops with the process, as in a crash; the others resume it now.
        loop.call_soon_threadsafe(loop.stop)
    try:
        from django.db import connections

        worker_gone(name=_worker.name)
        connections.close_all()
    except Exception:
        logger.warning("could not mark the worker gone; the others find it dead", exc_info=True)
