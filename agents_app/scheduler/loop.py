"""The scheduler's side in each worker process: claim ready work when a slot is free, run it, beat.

One coroutine per process, on the process's session loop (``mas_core.runner``):
it claims as many ready activations as the process has free slots
(``MAS_WORKER_SLOTS``) and runs each session as a task on the same loop — no
broker message, no thread per session. A process whose database threads are
backed up, or whose sessions wait for turns at its loop (more of them than it has
turns), claims only the work of teams it runs nothing of, whose calls wait
in lanes of their own there (``mas_core.lanes``); the rest would only queue
behind its own backlog. Each session's task runs in its team's lane. It wakes when a NOTIFY on
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
from agents_app.scheduler.claim import Claimed, claim, claims_return
from agents_app.scheduler.workers import worker_beat, worker_gone, workers_dead, workers_reap
from mas_core import lanes
from mas_core.lanes import lane
from mas_core.runner import db, runner

logger = logging.getLogger(__name__)

# At most this many activations per claim: a burst is taken in steps, so other workers get their part.
CLAIM_BATCH = 50
# A claim that found another under way tries again after this long.
CLAIM_RETRY_S = 0.005
# No claim while more than this many database calls per thread wait for the loop's threads; look again after.
BACKLOG_PER_THREAD = 2
BUSY_WAIT_S = 0.02
# A session that failed (its database connection broke as it began) gives its slot up after this long, and
# what it did not begin is handed back: not claimed again at once while the database may still be away.
FAILED_WAIT_S = 0.5


class WorkerLoop:
    def __init__(self, *, name: str, queue: str, slots: int) -> None:
        self.name, self.queue, self.slots = name, queue, slots
        self.sessions: dict[asyncio.Task, Claimed] = {}  # each running session's task, and what it runs
        self.strays = False  # a claim of this worker may be running nowhere: hand it back before claiming more
        self.left = True  # the last claim left ready work behind (Claims.left): a slot freed here may take it
        self.wake = asyncio.Event()  # look again: a session ended, or news
        self.news = asyncio.Event()  # new ready work may be there
        self.stopping = False
        self.tasks: list[asyncio.Task] = []

    async def serve(self) -> None:
        await db(worker_beat)(name=self.name, queue=self.queue, slots=self.slots, running=0)
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._listen())]
        self.beat = threading.Thread(target=self._beat, args=(loop,), name="mas-beat", daemon=True)
        self.beat.start()
        poll_s = float(settings.MAS_SCHEDULER_POLL_S)
        claimed_at = 0.0
        while not self.stopping:
            self.wake.clear()
            if self.strays and not await self._strays_return():
                await self._nap(poll_s)  # the database is still away: try again in a moment
                continue
            free = self.slots - len(self.sessions)
            waiting, turns = lanes.turns_waiting()
            busy = runner.db_backlog() > BACKLOG_PER_THREAD * runner.db_threads or waiting > turns
            since = time.monotonic() - claimed_at
            if not self.news.is_set() and since < poll_s:
                if busy:
                    # Saturated, and no new work since the last look: nothing to take. Look again in a moment.
                    await self._nap(BUSY_WAIT_S)
                    continue
                if not self.left:
                    # A session ended, and the last claim left nothing ready behind: a claim now would find
                    # nothing (a database hop and three statements a run). New work wakes the loop (news).
                    await self._nap(poll_s - since)
                    continue
            claimed = []
            if free > 0:
                self.news.clear()
                claimed_at = time.monotonic()
                # Saturated, the process takes only teams with no session here: their calls stand in lanes of
                # their own (mas_core.lanes), ahead of nothing; the running teams' new work would only queue
                # behind their backlog here, while a worker with room (or this one, in a moment) starts it.
                skip = {item.team_id for item in self.sessions.values()} if busy else set()
                try:
                    claimed = await db(claim)(worker=self.name, queue=self.queue, free=min(free, CLAIM_BATCH),
                                              running=len(self.sessions), skip_teams=skip)
                except Exception:
                    logger.warning("scheduler claim failed", exc_info=True)
                    self.strays = True  # its commit may have been lost with the connection, not made
                    await asyncio.sleep(poll_s)
                    continue
                if claimed is None:  # another worker is claiming: its turn, then ours
                    self.news.set()
                    await asyncio.sleep(CLAIM_RETRY_S)
                    continue
                self.left = claimed.left
            for item in claimed:
                task = loop.create_task(self._run(item))
                self.sessions[task] = item
                task.add_done_callback(self._ended)
            if claimed and len(claimed) == min(free, CLAIM_BATCH):
                self.news.set()  # more may be ready: claim again, after the sessions just started get going
                await asyncio.sleep(0)
                continue
            await self._nap(BUSY_WAIT_S if busy else poll_s)

    async def _nap(self, timeout_s: float) -> None:
        try:
            await asyncio.wait_for(self.wake.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass

    def _ended(self, task: asyncio.Task) -> None:
        self.sessions.pop(task, None)
        self.wake.set()

    async def _run(self, item: Claimed) -> None:
        from agents_app.execution.session import execute_activation

        lane.set(item.team_id)  # this task's (and its children's) turn at the process's shared resources
        try:
            await execute_activation(item.activation_id)
        except Exception:
            # Recorded where it could be; what could not (the database was away) the sweep finds again. Not a
            # session that could not begin: its activation is claimed by this worker, alive, which hands it back.
            logger.exception("session failed on the worker", extra={"activation": item.activation_id})
            await asyncio.sleep(FAILED_WAIT_S)
            self.strays = True

    async def _strays_return(self) -> bool:
        """Hand back what this worker claimed and runs no session of: ready again, for the next claim. False
        when that failed too (the database is still away; it is tried again at the next turn).

        No claim is under way meanwhile (this loop makes them), so what is claimed and not in a running task
        is running nowhere.
        """
        self.strays = False  # first: a session failing while this runs says so again
        running = [item.activation_id for task, item in self.sessions.items() if not task.done()]
        try:
            handed = await db(claims_return)(worker=self.name, keep=running)
        except Exception:
            logger.warning("could not hand back claims not begun", exc_info=True)
            self.strays = True
            return False
        if handed:
            logger.warning("claims not begun handed back", extra={"activations": handed})
            self.news.set()
        return True

    def _news(self) -> None:
        """New ready work may be there (a NOTIFY, a dead worker's work handed back): claim at the next turn."""
        self.news.set()
        self.wake.set()

    async def _listen(self) -> None:
        """Set ``wake`` on every NOTIFY of ready work; reconnect when the connection drops."""
        while not self.stopping:
            try:
                async with await psycopg.AsyncConnection.connect(_conninfo(), autocommit=True) as conn:
                    await conn.execute(f"LISTEN {admission.READY_CHANNEL}")
                    self._news()  # anything made ready while it was not listening
                    async for _ in conn.notifies():
                        self._news()
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
                        loop.call_soon_threadsafe(self._news)
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
