"""Workers say they are alive: a key with a time-to-live in the broker's Redis, renewed by a thread.

``GET /api/health`` reads these keys instead of pinging the workers over the
broker (a ping waits its whole timeout for replies, about a second); a worker
that stops renewing its key drops out of the report within
``MAS_WORKER_HEARTBEAT_TTL_S``. Keys are per queue, so a health check sees
only the workers that serve its own queue.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)

PREFIX = "mas:worker-heartbeat"
MAX_WORKERS_LISTED = 1000


def _client():
    import redis

    return redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_connect_timeout=1, socket_timeout=1)


def heartbeat_key(*, queue: str, name: str) -> str:
    return f"{PREFIX}:{queue}:{name}"


def heartbeat_write(*, queue: str, name: str, client=None) -> None:
    """Renew this worker's key (its value: name, queue, time of writing)."""
    own = client is None
    client = client or _client()
    try:
        ttl = max(1, round(settings.MAS_WORKER_HEARTBEAT_TTL_S))
        client.set(heartbeat_key(queue=queue, name=name),
                   json.dumps({"name": name, "queue": queue, "at": time.time()}), ex=ttl)
    finally:
        if own:
            client.close()


def heartbeat_clear(*, queue: str, name: str) -> None:
    client = _client()
    try:
        client.delete(heartbeat_key(queue=queue, name=name))
    finally:
        client.close()


def heartbeats_read(*, queue: str) -> list[dict[str, Any]]:
    """The workers of ``queue`` whose key has not expired, by name (at most 1,000)."""
    client = _client()
    try:
        keys = []
        for key in client.scan_iter(match=f"{PREFIX}:{queue}:*", count=500):
            keys.append(key)
            if len(keys) >= MAX_WORKERS_LISTED:
                break
        values = client.mget(keys) if keys else []
    finally:
        client.close()
    beats = []
    for value in values:
        if value is None:  # expired between the scan and the read
            continue
        try:
            beats.append(json.loads(value))
        except ValueError:
            continue
    return sorted(beats, key=lambda beat: beat.get("name", ""))


class Heartbeat:
    """A daemon thread renewing one worker's key every ``MAS_WORKER_HEARTBEAT_S`` until stopped."""

    def __init__(self, *, queues: list[str], name: str) -> None:
        self.queues, self.name = queues, name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="mas-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def _beat(self) -> None:
        client = _client()
        try:
            while not self._stop.is_set():
                for queue in self.queues:
                    try:
                        heartbeat_write(queue=queue, name=self.name, client=client)
                    except Exception as error:  # Redis away: try again at the next beat
                        logger.warning("heartbeat not written", extra={"worker": self.name, "error": str(error)})
                self._stop.wait(settings.MAS_WORKER_HEARTBEAT_S)
        finally:
            client.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for queue in self.queues:
            try:
                heartbeat_clear(queue=queue, name=self.name)
            except Exception:  # noqa: BLE001 - the key expires by itself
                pass
