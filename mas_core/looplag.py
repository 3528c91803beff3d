"""The loop-lag watchdog: how long a tool handler held its worker's event loop, each time it ran.

Every session of a worker process shares one event loop (``mas_core.runner``):
a handler that computes for a second between two ``await`` stalls every other
session for that second. :func:`watched` drives a handler's coroutine and
times each slice it runs before it next waits; a slice longer than
``BLOCKED_S`` (100 ms) is logged (``event loop blocked``, with the tool) and
counted in Redis, per tool, for ``/metrics``: ``mas_loop_blocked_total`` and
``mas_loop_blocked_seconds_total``. Counting happens on a thread of its own:
the watchdog never waits for Redis on the loop it watches.

A slice is what the handler held: its wall time less two pauses that are the
process's or the machine's, not the handler's. The time the loop's thread sat
runnable waiting for a CPU (other processes' work; Linux's schedstat for the
thread): on a busy machine it multiplies a slice's wall time. And full garbage
collections (generation 2), whichever thread ran them: one scans every object
of the process, so its length is the heap's, not the work of the allocation
that set it off (~400 ms in the suite's serial pytest process, which has
imported every test module). What the handler computes, its blocking calls
(``time.sleep``, a synchronous query) and the young collections of its own
allocations all count.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Coroutine, Generator, TypeVar

import redis
from django.conf import settings

from mas_core.redis_client import broker_redis

T = TypeVar("T")

BLOCKED_S = 0.1

logger = logging.getLogger(__name__)
_writer = ThreadPoolExecutor(1, thread_name_prefix="mas-looplag")


class _CpuWait:
    """Seconds the thread that made it has spent runnable, waiting for a CPU (the second field of Linux's
    ``/proc/thread-self/schedstat``, kept open for the thread's life: a read is ~1 µs); 0 where there is none."""

    __slots__ = ("_fd",)

    def __init__(self) -> None:
        try:
            self._fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self._fd = -1

    def seconds(self) -> float:
        if self._fd < 0:
            return 0.0
        try:
            return int(os.pread(self._fd, 64, 0).split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return 0.0

    def __del__(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)


_threads = threading.local()
# A forked child's thread is not its parent's: its first slice opens its own file.
os.register_at_fork(after_in_child=lambda: vars(_threads).pop("cpu_wait", None))


def _cpu_wait() -> _CpuWait:
    """The calling thread's :class:`_CpuWait`."""
    found = getattr(_threads, "cpu_wait", None)
    if found is None:
        found = _threads.cpu_wait = _CpuWait()
    return found


class _FullCollections:
    """Seconds this process has spent in full garbage collections so far, less the CPU waits of the threads that
    ran them (a slice's own CPU wait is taken off once, not twice). A ``gc.callbacks`` entry."""

    __slots__ = ("seconds", "_started", "_waited")

    def __init__(self) -> None:
        self.seconds = self._started = self._waited = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:  # young collections are the allocating handler's own cost
            return
        now, waited = time.perf_counter(), _cpu_wait().seconds()
        if phase == "start":
            self._started, self._waited = now, waited
        else:
            self.seconds += (now - self._started) - (waited - self._waited)


_full_collections = _FullCollections()
gc.callbacks.append(_full_collections)


def _key() -> str:
    # Per database, as the rate limits: two deployments (or test runs) sharing one Redis count apart.
    return f"mas:looplag:{settings.DATABASES['default']['NAME']}"


def _count(tool: str, seconds: float) -> None:
    try:
        pipe = broker_redis().pipeline()
        pipe.hincrby(_key(), f"count:{tool}", 1)
        pipe.hincrbyfloat(_key(), f"seconds:{tool}", seconds)
        pipe.execute()
    except redis.RedisError:
        logger.warning("loop-lag counters unreachable", exc_info=True)


def blocked(*, tool: str, seconds: float, run_id: str = "") -> None:
    """Report one slice of ``tool`` that held the loop ``seconds``: a log line now, the counters soon after."""
    logger.warning("event loop blocked", extra={"tool": tool, "blocked_ms": round(seconds * 1000), "run_id": run_id})
    _writer.submit(_count, tool, seconds)


def totals() -> dict[str, tuple[int, float]]:
    """Per tool: how many slices held a loop past ``BLOCKED_S``, and their seconds (all worker processes)."""
    try:
        raw = broker_redis().hgetall(_key())
    except redis.RedisError:
        logger.warning("loop-lag counters unreachable", exc_info=True)
        return {}
    found: dict[str, list[float]] = {}
    for field, value in raw.items():
        kind, _, tool = field.decode().partition(":")
        slot = found.setdefault(tool, [0, 0.0])
        slot[0 if kind == "count" else 1] = float(value)
    return {tool: (int(count), seconds) for tool, (count, seconds) in sorted(found.items())}


def flush(timeout: float = 5.0) -> None:
    """Wait until the counts reported so far are written (tests, and a worker shutting down)."""
    _writer.submit(lambda: None).result(timeout)


class _Watched:
    """An awaitable that runs ``coro`` slice by slice (each ``send``/``throw`` is one), timing each."""

    __slots__ = ("_coro", "_tool", "_run_id", "_cpu_wait")

    def __init__(self, coro: Coroutine[Any, Any, T], tool: str, run_id: str) -> None:
        self._coro, self._tool, self._run_id = coro, tool, run_id

    def _timed(self, started: float, waited: float, collected: float) -> None:
        held = time.perf_counter() - started
        if held > BLOCKED_S:  # less what was not the handler's (the module's docstring): read only past the bound
            held -= (self._cpu_wait.seconds() - waited) + (_full_collections.seconds - collected)
            if held > BLOCKED_S:
                blocked(tool=self._tool, seconds=held, run_id=self._run_id)

    def __await__(self) -> Generator[Any, Any, T]:
        coro = self._coro
        self._cpu_wait = _cpu_wait()  # the loop's thread: every slice runs on it
        value: Any = None
        error: BaseException | None = None
        while True:
            waited, collected = self._cpu_wait.seconds(), _full_collections.seconds
            started = time.perf_counter()
            try:
                yielded = coro.throw(error) if error is not None else coro.send(value)
            except StopIteration as done:
                self._timed(started, waited, collected)
                return done.value
            except BaseException:
                self._timed(started, waited, collected)
                raise
            self._timed(started, waited, collected)
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as thrown:  # cancellation, passed on to the handler
                value, error = None, thrown


async def watched(coro: Coroutine[Any, Any, T], *, tool: str, run_id: str = "") -> T:
    """Await ``coro`` (a tool handler's call), reporting every slice of it that holds the loop too long."""
    return await _Watched(coro, tool, run_id)


__all__ = ["BLOCKED_S", "blocked", "flush", "totals", "watched"]
