"""The loop-lag watchdog: how long a tool handler held its worker's event loop, each time it ran.

Every session of a worker process shares one event loop (``mas_core.runner``):
a handler that computes for a second between two ``await`` stalls every other
session for that second. :func:`watched` drives a handler's coroutine and
times each slice it runs before it next waits; a slice longer than
``BLOCKED_S`` (100 ms) is logged (``event loop blocked``, with the tool) and
counted in Redis, per tool, for ``/metrics``: ``mas_loop_blocked_total`` and
``mas_loop_blocked_seconds_total``. Counting happens on a thread of its own:
the watchdog never waits for Redis on the loop it watches.
"""

from __future__ import annotations

import logging
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

    __slots__ = ("_coro", "_tool", "_run_id")

    def __init__(self, coro: Coroutine[Any, Any, T], tool: str, run_id: str) -> None:
        self._coro, self._tool, self._run_id = coro, tool, run_id

    def _timed(self, started: float) -> None:
        held = time.perf_counter() - started
        if held > BLOCKED_S:
            blocked(tool=self._tool, seconds=held, run_id=self._run_id)

    def __await__(self) -> Generator[Any, Any, T]:
        coro = self._coro
        value: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                yielded = coro.throw(error) if error is not None else coro.send(value)
            except StopIteration as done:
                self._timed(started)
                return done.value
            except BaseException:
                self._timed(started)
                raise
            self._timed(started)
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
