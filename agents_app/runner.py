"""One asyncio loop per worker process, carrying every session that process runs.

Sessions spend their lives waiting for models, so a process runs many of
them as coroutines on one loop; database work goes to a small, bounded pool
of threads (each with its own connection). A Celery task hands a session to
the loop and waits for it, so acks-late delivery still covers the session.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, Coroutine, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections

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
                    loop.set_default_executor(ThreadPoolExecutor(self._db_threads, thread_name_prefix="mas-db"))
                    threading.Thread(target=loop.run_forever, name="mas-sessions", daemon=True).start()
                    self._loop, self._pid = loop, os.getpid()
        return self._loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the shared loop and wait for its result (from any thread but the loop's)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop()).result()


runner = LoopRunner(db_threads=int(os.environ.get("MAS_DB_THREADS", "12")))


def db(func: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """Run a sync ORM function on the loop's database threads."""

    @functools.wraps(func)
    def fresh(*args, **kwargs):
        close_old_connections()
        return func(*args, **kwargs)

    return sync_to_async(fresh, thread_sensitive=False)
