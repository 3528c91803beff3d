"""What each team's queue looks like now: for ``/metrics`` and the team's dashboard (read at request time
from the activation rows, so right across worker processes)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

from agents_app.scheduler.claim import team_limit

# Waits are summarised over the activations claimed in this window.
WAIT_WINDOW_S = 300


@dataclass(frozen=True)
class TeamQueue:
    team_id: int
    team: str
    ready: int  # admitted by their runs, waiting for a worker: the queue's depth
    running: int  # holding a worker's slot
    limit: int
    weight: int
    oldest_ready_s: float  # how long the oldest ready activation has waited so far
    wait_p50_s: float | None  # ready to claimed, over the activations claimed in the last WAIT_WINDOW_S
    wait_p95_s: float | None
    claimed: int  # how many were claimed in that window


def team_queues(*, team_ids: list[int] | None = None) -> list[TeamQueue]:
    """One row per team (of ``team_ids``, or every team with work or recent claims), by slug."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH live AS (
                SELECT team_id, count(*) FILTER (WHERE status = 'ready') AS ready,
                       count(*) FILTER (WHERE status IN ('dispatched', 'running')) AS running,
                       extract(epoch FROM now() - min(ready_at) FILTER (WHERE status = 'ready')) AS oldest
                FROM agents_app_activation WHERE status IN ('ready', 'dispatched', 'running')
                GROUP BY team_id
            ), waits AS (
                SELECT team_id, count(*) AS claimed,
                       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM dispatched_at - ready_at)) AS p50,
                       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM dispatched_at - ready_at)) AS p95
                FROM agents_app_activation
                WHERE dispatched_at >= now() - make_interval(secs => %(window)s) AND ready_at IS NOT NULL
                      AND dispatched_at >= ready_at
                GROUP BY team_id
            )
            SELECT t.id, t.slug, coalesce(l.ready, 0), coalesce(l.running, 0), t.max_sessions, t.session_limit,
                   t.weight, coalesce(l.oldest, 0), w.p50, w.p95, coalesce(w.claimed, 0)
            FROM agents_app_team t LEFT JOIN live l ON l.team_id = t.id LEFT JOIN waits w ON w.team_id = t.id
            WHERE (%(all)s AND (l.team_id IS NOT NULL OR w.team_id IS NOT NULL)) OR t.id = ANY(%(ids)s)
            ORDER BY t.slug
            """, {"window": WAIT_WINDOW_S, "all": team_ids is None, "ids": team_ids or []})
        rows = cursor.fetchall()
    return [TeamQueue(team_id=team_id, team=slug, ready=ready, running=running,
                      limit=team_limit(max_sessions=max_sessions, session_limit=session_limit), weight=weight,
                      oldest_ready_s=float(oldest), wait_p50_s=None if p50 is None else float(p50),
                      wait_p95_s=None if p95 is None else float(p95), claimed=claimed)
            for team_id, slug, ready, running, max_sessions, session_limit, weight, oldest, p50, p95, claimed in rows]
