"""GET /api/health against the real database, Redis, a real Celery worker and the model."""

import os
import time

import pytest
from django.test import Client

pytestmark = [pytest.mark.django_db, pytest.mark.worker]


def test_health_all_ok_with_a_real_worker(celery_worker_process):
    response = Client().get("/api/health")
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "ok"
    assert body["failed"] == []
    assert list(body["checks"]) == ["database", "pgvector", "redis", "celery", "embeddings", "sandbox"]
    assert all(check["ok"] for check in body["checks"].values())
    assert body["checks"]["pgvector"]["detail"].startswith("pgvector 0.")
    assert body["checks"]["database"]["detail"].startswith("PostgreSQL ")
    assert celery_worker_process["name"] in body["checks"]["celery"]["detail"]
    assert body["checks"]["embeddings"]["detail"] == "all-MiniLM-L6-v2, 384 dimensions"
    assert body["checks"]["sandbox"]["detail"] == "bubblewrap runs code_exec and stdio MCP servers"


def test_health_reports_a_missing_sandbox_without_failing(celery_worker_process, monkeypatch):
    from mas_project import health

    monkeypatch.setattr(health, "sandbox_checked", None)
    monkeypatch.setenv("PATH", "/nonexistent")  # no bwrap to be found
    response = Client().get("/api/health")
    body = response.json()
    assert (response.status_code, body["status"], body["failed"]) == (200, "ok", [])
    assert body["checks"]["sandbox"]["ok"] is False
    assert body["checks"]["sandbox"]["detail"].startswith("SandboxUnavailable: code_exec needs bubblewrap")


def test_health_names_redis_when_it_does_not_answer(settings, celery_worker_process):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    response = Client().get("/api/health")
    body = response.json()
    assert response.status_code == 503
    assert body["status"] == "failed"
    assert body["failed"] == ["redis"]
    assert body["checks"]["redis"]["ok"] is False
    assert "ConnectionError" in body["checks"]["redis"]["detail"]


def test_health_names_celery_when_no_worker_listens(settings):
    # A broker database on which no worker of this run listens.
    settings.CELERY_BROKER_URL = settings.REDIS_URL.rsplit("/", 1)[0] + "/8"
    response = Client().get("/api/health")
    body = response.json()
    assert response.status_code == 503
    assert body["failed"] == ["celery"]
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    assert body["checks"]["celery"]["detail"] == (
        f"RuntimeError: no Celery worker of queue {queue!r} sent a heartbeat in the last 15 s")


def _beat(settings, queue, name):
    import redis

    from mas_project.heartbeat import heartbeat_key

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    try:
        key = heartbeat_key(queue=queue, name=name)
        return client.get(key), client.ttl(key)
    finally:
        client.close()


def test_a_worker_keeps_a_heartbeat_key_and_removes_it_when_it_stops(settings):
    import json

    from tests.workers import start_worker, stop_worker

    queue = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-beat"
    worker = start_worker(f"beat-{os.getpid()}", queue=queue, concurrency=2)
    try:
        deadline = time.monotonic() + 10
        while _beat(settings, queue, worker.name)[0] is None and time.monotonic() < deadline:
            time.sleep(0.1)
        value, ttl = _beat(settings, queue, worker.name)
        beat = json.loads(value)
        assert (beat["name"], beat["queue"]) == (worker.name, queue)
        assert 0 < ttl <= 15
        assert abs(beat["at"] - time.time()) < 10
        # Health of that queue: this worker, found without a ping.
        settings.CELERY_TASK_DEFAULT_QUEUE = queue
        body = Client().get("/api/health").json()
        assert body["checks"]["celery"] == {"ok": True, "detail": f"1 worker(s): {worker.name}",
                                            "ms": body["checks"]["celery"]["ms"]}
    finally:
        stop_worker(worker)
    assert _beat(settings, queue, worker.name) == (None, -2)  # removed at shutdown, not left to expire
    body = Client().get("/api/health").json()
    assert body["failed"] == ["celery"]


def test_a_killed_workers_heartbeat_expires(settings):
    import signal

    from tests.workers import start_worker, stop_worker

    queue = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-killed"
    worker = start_worker(f"killed-{os.getpid()}", queue=queue, concurrency=2,
                          env={"MAS_WORKER_HEARTBEAT_S": "0.5", "MAS_WORKER_HEARTBEAT_TTL_S": "2"})
    deadline = time.monotonic() + 10
    while _beat(settings, queue, worker.name)[0] is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert 0 < _beat(settings, queue, worker.name)[1] <= 2
    stop_worker(worker, sig=signal.SIGKILL)  # no shutdown handler runs
    deadline = time.monotonic() + 5
    while _beat(settings, queue, worker.name)[0] is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _beat(settings, queue, worker.name) == (None, -2)


def test_health_needs_no_authentication_and_exposes_no_settings(celery_worker_process, settings):
    response = Client().get("/api/health")
    assert response.status_code == 200
    assert settings.SECRET_KEY not in response.content.decode()
    assert "password" not in response.content.decode().lower()


def test_the_embedding_check_embeds_once_a_minute_not_per_request(settings):
    from mas_project import health

    health.check_embeddings()
    first = health.embeddings_checked_at
    assert health.check_embeddings() == "all-MiniLM-L6-v2, 384 dimensions"
    assert health.embeddings_checked_at == first  # the model was not asked again
    settings.MAS_HEALTH_EMBED_RECHECK_S = 0
    assert health.check_embeddings() == "all-MiniLM-L6-v2, 384 dimensions"
    assert health.embeddings_checked_at > first
