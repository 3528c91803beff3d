"""``/metrics``: what MAS is doing, in Prometheus' text format, read from the database and Redis at scrape time.

Counts come from the rows every worker writes (runs, sessions, events), so they
are right across processes and restarts without a metrics store. Access: with
``MAS_METRICS_TOKEN`` set, ``Authorization: Bearer <that token>``; without it,
only from the machine itself (127.0.0.1 / ::1).
"""

from __future__ import annotations

import hmac
from datetime import datetime, timezone

import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse

from agents_app.scheduler import WAIT_WINDOW_S, team_queues
from mas_core import looplag

LOCAL = {"127.0.0.1", "::1"}


def _allowed(request: HttpRequest) -> bool:
    token = settings.MAS_METRICS_TOKEN
    if token:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        return hmac.compare_digest(given.encode(), token.encode())
    return request.META.get("REMOTE_ADDR") in LOCAL


def _scalar(sql: str, params=()) -> float:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        value = cursor.fetchone()[0]
    return float(value or 0)


def _queue_depth() -> float | None:
    try:
        client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=0.5, socket_connect_timeout=0.5)
        return float(client.llen(settings.CELERY_TASK_DEFAULT_QUEUE))
    except redis.RedisError:
        return None


def render() -> str:
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            lines.append(f"{name}{labels} {value:g}")

    with connection.cursor() as cursor:
        cursor.execute("SELECT status, count(*) FROM agents_app_run GROUP BY status")
        by_status = dict(cursor.fetchall())
    statuses = ("queued", "running", "waiting", "succeeded", "failed", "cancelled")
    metric("mas_runs", "gauge", "Runs by status.",
           [(f'{{status="{status}"}}', float(by_status.get(status, 0))) for status in statuses])
    metric("mas_sessions_in_flight", "gauge", "Agent sessions running now.",
           [("", _scalar("SELECT count(*) FROM agents_app_session WHERE status = 'running'"))])
    metric("mas_model_calls_total", "counter", "Model calls made by sessions (finished sessions' steps).",
           [("", _scalar("SELECT coalesce(sum((meta->>'steps')::bigint), 0) FROM agents_app_session "
                         "WHERE meta ? 'steps'"))])
    metric("mas_tokens_total", "counter", "Model tokens, by kind.", [
        ('{kind="prompt"}', _scalar("SELECT coalesce(sum(prompt_tokens), 0) FROM agents_app_run")),
        ('{kind="completion"}', _scalar("SELECT coalesce(sum(completion_tokens), 0) FROM agents_app_run"))])
    metric("mas_cost_usd_total", "counter", "Model cost in US dollars.",
           [("", _scalar("SELECT coalesce(sum(cost_usd), 0) FROM agents_app_run"))])
    metric("mas_tool_errors_total", "counter", "Tool calls that returned an error.",
           [("", _scalar("SELECT count(*) FROM agents_app_event WHERE type = 'tool_result' "
                         "AND data->>'ok' = 'false'"))])
    queues = team_queues()
    metric("mas_scheduler_ready", "gauge", "Activations admitted by their runs and waiting for a worker, by team.",
           [(f'{{team="{q.team}"}}', q.ready) for q in queues])
    metric("mas_scheduler_running", "gauge", "Sessions holding a worker's slot, by team.",
           [(f'{{team="{q.team}"}}', q.running) for q in queues])
    metric("mas_scheduler_limit", "gauge", "Sessions a team may run at once.",
           [(f'{{team="{q.team}"}}', q.limit) for q in queues])
    metric("mas_scheduler_wait_seconds", "gauge",
           f"Wait from ready to claimed by a worker over the last {WAIT_WINDOW_S} s, by team and quantile.",
           [(f'{{team="{q.team}",quantile="{name}"}}', round(value, 4)) for q in queues
            for name, value in (("0.5", q.wait_p50_s), ("0.95", q.wait_p95_s)) if value is not None])
    metric("mas_scheduler_oldest_ready_seconds", "gauge", "How long the oldest ready activation has waited, by team.",
           [(f'{{team="{q.team}"}}', round(q.oldest_ready_s, 3)) for q in queues if q.ready])
    depth = _queue_depth()
    if depth is not None:
        metric("mas_queue_depth", "gauge", "Tasks waiting in the Celery queue.",
               [(f'{{queue="{settings.CELERY_TASK_DEFAULT_QUEUE}"}}', depth)])
    blocked = looplag.totals()
    metric("mas_loop_blocked_total", "counter",
           f"Tool handler slices that held a worker's event loop longer than {looplag.BLOCKED_S * 1000:g} ms, by tool.",
           [(f'{{tool="{tool}"}}', count) for tool, (count, _) in blocked.items()])
    metric("mas_loop_blocked_seconds_total", "counter", "Seconds those slices held the event loop, by tool.",
           [(f'{{tool="{tool}"}}', round(seconds, 3)) for tool, (_, seconds) in blocked.items()])
    with connection.cursor() as cursor:
        cursor.execute("SELECT min(last) FROM (SELECT max(e.created_at) AS last FROM agents_app_event e "
                       "JOIN agents_app_run r ON r.id = e.run_id WHERE r.status = 'running' GROUP BY e.run_id) t")
        oldest = cursor.fetchone()[0]
    lag = (datetime.now(timezone.utc) - oldest).total_seconds() if oldest else 0.0
    metric("mas_event_lag_seconds", "gauge",
           "Longest time since a running run's last event (a stuck run shows here).", [("", round(lag, 3))])
    return "\n".join(lines) + "\n"


def metrics_view(request: HttpRequest) -> HttpResponse:
    if not _allowed(request):
        return HttpResponse("metrics: send the MAS_METRICS_TOKEN as a bearer token\n", status=401,
                            content_type="text/plain")
    return HttpResponse(render(), content_type="text/plain; version=0.0.4; charset=utf-8")
