"""One asyncio loop per worker process, carrying every session that process runs.

Sessions spend their lives waiting for models, so a process runs many of
them as coroutines on one loop; database work goes to a small, bounded pool
of threads (each with its own connection), which serve the teams' calls in
turn (``mas_core.lanes``).
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import types
from typing import Any, Awaitable, Callable, Coroutine, TypeVar

from asgiref.sync import sync_to_async
from django.db import InterfaceError, OperationalError, connection

from mas_core import phases
from mas_core.lanes import FairExecutor

T = TypeVar("T")


class LoopRunner:
    def __init__(self, *, db_threads: int) -> None:
        self._db_threads = db_threads
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._pid: int | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
        # A forked child gets its own loop; the parent's thread did not survive the fork.
        if self._loop is None or self._pid != os.getpid():
            with self._lock:
                if self._loop is None or self._pid != os.getpid():
                    loop = asyncio.new_event_loop()
                    self._executor = FairExecutor(self._db_threads, name="mas-db")
                    loop.set_default_executor(self._executor)
                    threading.Thread(target=loop.run_forever, name="mas-sessions", daemon=True).start()
                    self._loop, self._pid = loop, os.getpid()
        return self._loop

    def db_backlog(self) -> int:
        """Database calls waiting for one of the loop's threads now (0 before the loop starts)."""
        executor = getattr(self, "_executor", None)
        return executor.backlog if executor is not None else 0

    @property
    def db_threads(self) -> int:
        return self._db_threads

    def running_loop(self) -> asyncio.AbstractEventLoop | None:
        """This process's session loop if it was started (in a worker), else None."""
        if self._loop is not None and self._pid == os.getpid() and self._loop.is_running():
            return self._loop
        return None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the shared loop and wait for its result (from any thread but the loop's)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop()).result()


runner = LoopRunner(db_threads=int(os.environ.get("MAS_DB_THREADS", "12")))


def db(func: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """Run a sync ORM function on the loop's database threads.

    Connections are reused across calls without a health-check query each
    time (that round trip cost more than most calls); a call that finds its
    connection broken drops it, so the next call reconnects. A module's
    function is wrapped once (a session makes a dozen hops through a handful
    of them, and making the wrapper was most of a hop's own cost); a lambda,
    a closure or a method is wrapped at each call (kept, it would be kept
    for good: the wrapper holds it).
    """
    try:
        found = _hops.get(func)
    except TypeError:  # unhashable: wrapped each time
        return _hop(func)
    if found is None:
        found = _hop(func)
        if type(func) is types.FunctionType and "<" not in func.__qualname__:  # not <lambda>, not <locals>
            _hops[func] = found
    return found


_hops: dict[Callable, Callable] = {}


def _hop(func: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    @functools.wraps(func)
    def guarded(*args, **kwargs):
        try:
            if phases.ON:
                hop = getattr(func, '__name__', 'lambda')
                with phases.timed(f"db hop: {hop}"), connection.execute_wrapper(functools.partial(_counted, hop)):
                    return func(*args, **kwargs)
            return func(*args, **kwargs)
        except (InterfaceError, OperationalError):
            connection.close()
            raise

    return sync_to_async(guarded, thread_sensitive=False)


def _counted(hop: str, execute, sql, params, many, context):
    # In all, and by hop: what one hop costs the database is pinned (tests/agents_app/test_step_cost.py).
    phases.count("django query (db threads)")
    phases.count(f"django query: {hop}")
    return execute(sql, params, many, context)
