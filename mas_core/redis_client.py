"""The process's one Redis client for the foundation's small counters (sign-in limits, loop lag).

Made on first use from ``CELERY_BROKER_URL``, with short timeouts: the counters guard and report, they
never gate, so a slow or absent Redis must cost a caller half a second at most.
"""

from __future__ import annotations

import redis
from django.conf import settings

_client: redis.Redis | None = None


def broker_redis() -> redis.Redis:
    """The shared client (thread-safe: redis-py pools its connections)."""
    global _client
    if _client is None:
        _client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=0.5, socket_connect_timeout=0.5)
    return _client
