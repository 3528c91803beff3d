"""GET /api/health: is every part of the stack answering? No authentication."""

from __future__ import annotations

import time
from typing import Any, Callable

from django.conf import settings
from django.db import connection
from ninja import Router, Schema, Status

router = Router(tags=["health"])


class Check(Schema):
    ok: bool
    detail: str
    ms: float


class HealthReport(Schema):
    status: str  # ok | failed
    failed: list[str]
    checks: dict[str, Check]


def check_database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('server_version')")
        return f"PostgreSQL {cursor.fetchone()[0]}"


def check_pgvector() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()
    if row is None:
        raise RuntimeError("the vector extension is not installed in this database")
    return f"pgvector {row[0]}"


def check_redis() -> str:
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1)
    try:
        client.ping()
        return f"redis {client.info('server')['redis_version']}"
    finally:
        client.close()


def check_celery() -> str:
    # Workers renew a key with a time-to-live (mas_project/heartbeat.py): reading them takes a
    # millisecond, where a broadcast ping waits its whole timeout for replies.
    from mas_project.heartbeat import heartbeats_read

    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    beats = heartbeats_read(queue=queue)
    if not beats:
        raise RuntimeError(f"no Celery worker of queue {queue!r} sent a heartbeat in the last "
                           f"{settings.MAS_WORKER_HEARTBEAT_TTL_S:g} s")
    return f"{len(beats)} worker(s): " + ", ".join(beat["name"] for beat in beats)


# When this process last embedded a text for the check (time.monotonic()); None: never.
embeddings_checked_at: float | None = None


def check_embeddings() -> str:
    # Embedding a sentence costs tens of milliseconds of CPU (hundreds on a busy machine): done once,
    # then again every MAS_HEALTH_EMBED_RECHECK_S while the model stays loaded in this process.
    from mas_core.embeddings import DIMENSIONS, embed, is_loaded

    global embeddings_checked_at
    now = time.monotonic()
    if (embeddings_checked_at is not None and is_loaded()
            and now - embeddings_checked_at < settings.MAS_HEALTH_EMBED_RECHECK_S):
        return f"all-MiniLM-L6-v2, {DIMENSIONS} dimensions"
    vector = embed(["health check"])[0]
    if len(vector) != DIMENSIONS:
        raise RuntimeError(f"embedding has {len(vector)} dimensions, expected {DIMENSIONS}")
    embeddings_checked_at = now
    return f"all-MiniLM-L6-v2, {DIMENSIONS} dimensions"


# When this process last started a sandbox for the check, and what it found (a sandbox costs a process).
sandbox_checked: tuple[float, str] | None = None


def check_sandbox() -> str:
    """bubblewrap starts a program as code_exec's sandbox does (rechecked every MAS_HEALTH_EMBED_RECHECK_S):
    without it code_exec and stdio MCP servers refuse to run."""
    import subprocess

    from tools_app.sandbox import Limits, command

    global sandbox_checked
    now = time.monotonic()
    if sandbox_checked is not None and now - sandbox_checked[0] < settings.MAS_HEALTH_EMBED_RECHECK_S:
        return sandbox_checked[1]
    argv = command(Limits(), 1024 * 1024)
    argv = argv[: argv.index("-I")] + ["-I", "-c", "print('ok')"]  # the sandbox's python, without the launcher
    done = subprocess.run(argv, capture_output=True, timeout=10, env={"PATH": "/usr/bin:/bin"})
    if done.returncode != 0 or done.stdout.strip() != b"ok":
        raise RuntimeError(f"bubblewrap did not run a program (exit {done.returncode}): "
                           f"{done.stderr.decode('utf-8', 'replace').strip()[:300]}; code_exec and stdio MCP "
                           "servers refuse to run")
    sandbox_checked = (now, "bubblewrap runs code_exec and stdio MCP servers")
    return sandbox_checked[1]


# Reported, but not part of the status: the rest of the stack works without a sandbox.
ADVISORY = {"sandbox"}

CHECKS: dict[str, Callable[[], str]] = {
    "database": check_database,
    "pgvector": check_pgvector,
    "redis": check_redis,
    "celery": check_celery,
    "embeddings": check_embeddings,
    "sandbox": check_sandbox,
}


def health_report() -> dict[str, Any]:
    checks: dict[str, dict[str, Any]] = {}
    for name, check in CHECKS.items():
        started = time.perf_counter()
        try:
            checks[name] = {"ok": True, "detail": check()}
        except Exception as error:  # a failing part is reported, never raised
            checks[name] = {"ok": False, "detail": f"{type(error).__name__}: {error}"[:500]}
        checks[name]["ms"] = round((time.perf_counter() - started) * 1000, 1)
    failed = [name for name, result in checks.items() if not result["ok"] and name not in ADVISORY]
    return {"status": "failed" if failed else "ok", "failed": failed, "checks": checks}


@router.get("/health", auth=None, response={200: HealthReport, 503: HealthReport}, summary="Health of every part")
def health(request):
    report = health_report()
    return Status(503 if report["failed"] else 200, report)
