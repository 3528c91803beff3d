"""Rate limits kept in Redis (fixed one-minute windows), so every web process counts the same hits.

- failed token authentications per client address (``MAS_AUTH_FAILURES_PER_MIN``, 10): past it every
  token request from that address is a 429 until the window ends — guessing tokens gets nowhere;
- run starts per team (``MAS_RUNS_PER_MIN``, 120) on the API.

When Redis cannot be reached the limits are not enforced (logged): they guard, they do not gate.
"""

from __future__ import annotations

import logging
import time

import redis
from django.conf import settings
from ninja.errors import HttpError

logger = logging.getLogger(__name__)
WINDOW_S = 60
_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=0.5, socket_connect_timeout=0.5)
    return _client


def _key(name: str) -> tuple[str, int]:
    window = int(time.time() // WINDOW_S)
    # Per database: two deployments (or test runs) sharing one Redis never count each other's hits.
    database = settings.DATABASES["default"]["NAME"]
    return f"mas:rl:{database}:{name}:{window}", WINDOW_S - int(time.time() % WINDOW_S)


def count(name: str) -> int:
    """Hits of ``name`` in the current window (0 when Redis is away)."""
    key, _ = _key(name)
    try:
        return int(_redis().get(key) or 0)
    except redis.RedisError:
        logger.warning("rate limit store unreachable", exc_info=True)
        return 0


def hit(name: str) -> int:
    """Count one hit of ``name``; returns the window's count."""
    key, left = _key(name)
    try:
        pipe = _redis().pipeline()
        pipe.incr(key)
        pipe.expire(key, left + 1)
        return int(pipe.execute()[0])
    except redis.RedisError:
        logger.warning("rate limit store unreachable", exc_info=True)
        return 0


def retry_after() -> int:
    return WINDOW_S - int(time.time() % WINDOW_S)


def client_address(request) -> str:
    return request.META.get("REMOTE_ADDR", "") or "unknown"


def auth_failures_check(request) -> None:
    """A 429 once this address has failed token authentication too often in this minute."""
    limit = settings.MAS_AUTH_FAILURES_PER_MIN
    if count(f"authfail:{client_address(request)}") >= limit:
        raise HttpError(429, f"too many failed token authentications from your address ({limit} a minute); "
                             f"retry in {retry_after()} s")


def auth_failure(request) -> None:
    hit(f"authfail:{client_address(request)}")


def run_start_check(team) -> None:
    """Count a run start of ``team``; a 429 past ``MAS_RUNS_PER_MIN`` in this minute."""
    limit = settings.MAS_RUNS_PER_MIN
    if hit(f"runs:{team.pk}") > limit:
        raise HttpError(429, f"team {team.slug} may start {limit} runs a minute; retry in {retry_after()} s")
