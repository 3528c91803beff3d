"""Turns between teams at a worker process's shared resources: its loop, database threads and connections.

The scheduler hands a team's sessions their share of the workers' slots, but
inside one process every session then meets the others at the same few
resources: the database threads (``mas_core.runner``) and the session loop's
connections (``agents_app.execution.store``). Served first come, first
served, a team with 150 sessions in a process keeps a queue there that
another team's one session waits behind at every step. Here each waiting
call stands in its team's lane (``lane``, set by the scheduler for each
session's task and inherited by what it starts) and the resource serves the
lanes in turn, one call each: a team's calls wait behind its own, and behind
at most one call of each other team. Work outside any session (the
scheduler's claims, the sweeps) has a lane of its own, served first.

The loop itself is the third: it runs the callbacks of every session that
has something to do in the order they became ready, so 150 busy sessions of
one team make each step of another's wait for all of theirs. A session holds
one of the process's ``MAS_WORKER_TURNS`` turns (``turn``) while it works,
and gives it up while it waits for something slow (``away``: a model's
answer, a tool's): the sessions beyond that many wait for a turn in their
team's lane, costing the loop nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import threading
from collections import deque
from collections.abc import Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, AsyncIterator, Callable

from mas_core.loops import loop_local

# The team whose session this is (its id); in a web process, ("web", the request's caller: mas_core.webgate);
# None outside any session.
lane: contextvars.ContextVar[Hashable | None] = contextvars.ContextVar("mas_lane", default=None)


class Lanes:
    """Waiting items by lane, taken one lane at a time in turn (the lane of no session first)."""

    def __init__(self) -> None:
        self._lanes: dict[Hashable | None, deque] = {}
        self._turns: deque[Hashable | None] = deque()
        self.waiting = 0

    def put(self, key: Hashable | None, item: Any) -> None:
        queue = self._lanes.get(key)
        if queue is None:
            queue = self._lanes[key] = deque()
            if key is None:
                self._turns.appendleft(key)
            else:
                self._turns.append(key)
        queue.append(item)
        self.waiting += 1

    def take(self) -> Any:
        """The next lane's first item (the lane goes to the back of the turns if it has more)."""
        key = self._turns.popleft()
        queue = self._lanes[key]
        item = queue.popleft()
        self.waiting -= 1
        if queue:
            self._turns.append(key)
        else:
            del self._lanes[key]
        return item

    def __bool__(self) -> bool:
        return bool(self._turns)


class FairExecutor(ThreadPoolExecutor):
    """Up to ``threads`` threads taking the submitted calls lane by lane in turn (``lane`` of the submitter).

    Like ThreadPoolExecutor, a thread starts only when no idle one is there; unlike it, the thread idle the
    shortest takes the next call, so a quiet process keeps using the few connections it has warm (after a
    database restart, only those few find theirs broken). A ThreadPoolExecutor only in name, for
    ``loop.set_default_executor``, which takes nothing else: its own queue and threads are never used.
    """

    def __init__(self, threads: int, *, name: str) -> None:
        super().__init__(threads, thread_name_prefix=name)
        self.threads, self._name = threads, name
        self._waiting = Lanes()
        self._lock = threading.Lock()
        self._idle: list[threading.Event] = []  # a stack: the last thread to go idle is woken first
        self._workers: list[threading.Thread] = []
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new calls after shutdown")
            self._waiting.put(lane.get(), (future, fn, args, kwargs))
            if self._idle:
                self._idle.pop().set()
            elif len(self._workers) < self.threads:
                worker = threading.Thread(target=self._work, name=f"{self._name}_{len(self._workers)}", daemon=True)
                self._workers.append(worker)
                worker.start()
        return future

    @property
    def backlog(self) -> int:
        """Calls waiting for a thread now."""
        return self._waiting.waiting

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while self._waiting:
                    self._waiting.take()[0].cancel()
            while self._idle:
                self._idle.pop().set()
            workers = list(self._workers)
        if wait:
            for worker in workers:
                if worker is not threading.current_thread():
                    worker.join()

    def _work(self) -> None:
        woken = threading.Event()
        while True:
            with self._lock:
                if self._waiting:
                    future, fn, args, kwargs = self._waiting.take()
                elif self._shutdown:
                    return
                else:
                    woken.clear()
                    self._idle.append(woken)
                    fn = None
            if fn is None:
                woken.wait()
                continue
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # handed to the caller, as ThreadPoolExecutor does
                future.set_exception(exc)
            else:
                future.set_result(result)
            del future, fn, args, kwargs


class FairSemaphore:
    """An asyncio semaphore whose freed permits go to the waiting lanes in turn (``lane`` of the waiter)."""

    def __init__(self, value: int, *, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.size = value
        self._free = value
        self._waiting = Lanes()
        self.loop = loop  # the loop its waiters wait on (else the first waiter's)

    @property
    def waiting(self) -> int:
        """Waiters now (a cancelled one counts until its turn comes)."""
        return self._waiting.waiting

    async def acquire(self) -> None:
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return
        loop = asyncio.get_running_loop()
        if self.loop is None:
            self.loop = loop
        elif self.loop is not loop:  # as asyncio.Semaphore: an error, not a wait no other loop could end
            raise RuntimeError(f"{self!r} is bound to a different event loop")
        granted = loop.create_future()
        self._waiting.put(lane.get(), granted)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release()  # handed over just as the waiter was cancelled: pass it on
            raise  # (a cancelled waiter left in its lane is skipped when its turn comes)

    def release(self) -> None:
        while self._waiting:
            granted = self._waiting.take()
            if not granted.done():
                granted.set_result(None)
                return
        self._free += 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()


# -- the loop's turns --------------------------------------------------------------------


class _Holding:
    """One block's place: held, or given up while ``away`` > 0 of its waits are under way."""

    def __init__(self, semaphore: FairSemaphore, loop: asyncio.AbstractEventLoop) -> None:
        self.semaphore, self.loop, self.held, self.away, self.done = semaphore, loop, True, 0, False


class Places:
    """A loop's places, taken in turn by lane: a block holds one while it works (``held``) and gives it up
    while it waits for something slow (``away``), taking it again in turn after.

    A worker's sessions hold its loop's turns (``turn`` and ``away`` below); a web process's requests hold
    its places (``mas_core.webgate``).
    """

    def __init__(self, name: str, semaphore: Callable[[], FairSemaphore]) -> None:
        self._holding: contextvars.ContextVar[_Holding | None] = contextvars.ContextVar(name, default=None)
        self.semaphore = semaphore  # the running loop's

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """Hold one place at the running loop for the block (in the block already: nothing more)."""
        if self._holding.get() is not None:
            yield
            return
        semaphore = self.semaphore()
        await semaphore.acquire()
        holding = _Holding(semaphore, asyncio.get_running_loop())
        token = self._holding.set(holding)
        try:
            yield
        finally:
            self._holding.reset(token)
            holding.done = True
            if holding.held:
                holding.held = False
                semaphore.release()

    @contextlib.asynccontextmanager
    async def away(self) -> AsyncIterator[None]:
        """Give the place up while the block waits for something slow; take it again (in turn) after.

        Outside a held place, or on another loop than the one it is held at, nothing is given up.
        """
        holding = self._holding.get()
        if holding is None or holding.done or holding.loop is not asyncio.get_running_loop():
            yield
            return
        holding.away += 1
        if holding.held:
            holding.held = False
            holding.semaphore.release()
        try:
            yield
        finally:
            holding.away -= 1
            if holding.away == 0 and not holding.held and not holding.done:
                await holding.semaphore.acquire()
                holding.held = True
                if holding.away or holding.done:  # gone away again (another wait of the block), or ended, meanwhile
                    holding.held = False
                    holding.semaphore.release()


_turns: dict[int, FairSemaphore] = {}


def _semaphore() -> FairSemaphore:
    return loop_local(_turns, lambda loop: FairSemaphore(int(os.environ.get("MAS_WORKER_TURNS", "16")), loop=loop))


_session_turns = Places("mas_turn", _semaphore)

# Hold one of the process's turns at its loop for the block (in the block already: nothing more).
turn = _session_turns.held

# Give the turn up while the block waits for something slow; take it again (in turn) after. Never around a
# wait that holds a connection of the pool: a session waiting for its turn with a connection could hold up
# the sessions that have a turn and wait for one.
away = _session_turns.away


def turns_waiting() -> tuple[int, int]:
    """How many sessions wait for a turn at the running loop now, and how many turns it has."""
    semaphore = _semaphore()
    return semaphore.waiting, semaphore.size
