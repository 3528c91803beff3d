"""GET /api/health against the real database, Redis, a real Celery worker and the model."""

import pytest
from django.test import Client

pytestmark = [pytest.mark.django_db, pytest.mark.worker]


def test_health_all_ok_with_a_real_worker(celery_worker_process):
    response = Client().get("/api/health")
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "ok"
    assert body["failed"] == []
    assert list(body["checks"]) == ["database", "pgvector", "redis", "celery", "embeddings"]
    assert all(check["ok"] for check in body["checks"].values())
    assert body["checks"]["pgvector"]["detail"].startswith("pgvector 0.")
    assert body["checks"]["database"]["detail"].startswith("PostgreSQL ")
    assert celery_worker_process["name"] in body["checks"]["celery"]["detail"]
    assert body["checks"]["embeddings"]["detail"] == "all-MiniLM-L6-v2, 384 dimensions"


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
    assert body["checks"]["celery"]["detail"] == "RuntimeError: no Celery worker answered a ping within 1 s"


def test_health_needs_no_authentication_and_exposes_no_settings(celery_worker_process, settings):
    response = Client().get("/api/health")
    assert response.status_code == 200
    assert settings.SECRET_KEY not in response.content.decode()
    assert "password" not in response.content.decode().lower()
