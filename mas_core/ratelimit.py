"""Rate limits kept in Redis (fixed one-minute windows), so every web process counts the same hits.

- failed token authentications per client address (``MAS_AUTH_FAILURES_PER_MIN``, 10), over HTTP and
  the websockets alike: past it a wrong token from that address is a 429 (a websocket closed 4429) until
  the window ends — guessing tokens gets nowhere. A right token still works: tokens are too long to guess,
  so refusing them would only lock out everyone behind the guesser's proxy, not the guesser;
- run starts per team (``MAS_RUNS_PER_MIN``, 120) on the API.

When Redis cannot be reached the limits are not enforced (logged): they guard, they do not gate.
"""

from __future__ import annotations

import logging
import time

import redis
from django.conf import settings

from mas_core.redis_client import broker_redis
from ninja.errors import HttpError

logger = logging.getLogger(__name__)
WINDOW_S = 60

def _key(name: str) -> tuple[str, int]:
    window = int(time.time() // WINDOW_S)
    # Per database: two deployments (or test runs) sharing one Redis never count each other's hits.
    database = settings.DATABASES["default"]["NAME"]
    return f"mas:rl:{database}:{name}:{window}", WINDOW_S - int(time.time() % WINDOW_S)


def hit(name: str) -> int:
    """Count one hit of ``name``; returns the window's count."""
    key, left = _key(name)
    try:
        pipe = broker_redis().pipeline()
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


class RateLimited(HttpError):
    """A 429; the API sends ``retry_after`` (seconds) as the ``Retry-After`` header."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(429, message)
        self.retry_after = retry_after


def token_failure(address: str) -> int | None:
    """Count a failed token authentication from ``address``: past the limit, the seconds left to wait."""
    if hit(f"authfail:{address}") > settings.MAS_AUTH_FAILURES_PER_MIN:
        return retry_after()
    return None


def auth_failure(request) -> None:
    """A wrong token over HTTP: counted, and a 429 once its address is past the limit (else the caller's 401)."""
    wait = token_failure(client_address(request))
    if wait is not None:
        limit = settings.MAS_AUTH_FAILURES_PER_MIN
        raise RateLimited(f"too many failed token authentications from your address ({limit} a minute); "
                          f"retry in {wait} s", retry_after=wait)


def run_start_check(team) -> None:
    """Count a run start of ``team``; a 429 past ``MAS_RUNS_PER_MIN`` in this minute."""
    limit = settings.MAS_RUNS_PER_MIN
    if hit(f"runs:{team.pk}") > limit:
        wait = retry_after()
        raise RateLimited(f"team {team.slug} may start {limit} runs a minute; retry in {wait} s", retry_after=wait)
