"""Which ready activation runs next, across all runs and teams: the claim of a worker with free slots.

A claim takes the scheduler's advisory lock (claims are short, and one at a
time keeps each team's count of running sessions exact), then hands out the
worker's free slots one at a time, each to the team with ready work that
uses the least of its weighted share: the fewest sessions holding a slot per
unit of weight (``Team.weight``), never beyond its limit (the operator's cap
``Team.max_sessions`` or ``MAS_TEAM_MAX_SESSIONS``, or lower, the team's own
``Team.session_limit``). That is weighted round robin over the teams with
queued work: a team's burst takes its share of the workers and no more, and
another team's first activation gets the next free slot. Within a team, the
lowest priority number goes first, then the oldest.

Work is spread over the live workers too: a worker takes no more than its
even part of what runs and is ready (the others take theirs when they wake).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agents_app.scheduler.admission import ready_notify

# The claim's advisory lock ("MASCLAIM" in ASCII), unique among MAS's advisory locks.
CLAIM_LOCK = 0x4D4153434C41494D


@dataclass(frozen=True)
class Claimed:
    activation_id: str
    team_id: int
    waited_s: float  # from ready to claimed


class Claims(list):
    """What a claim took (:class:`Claimed`, in the order they should start), and whether it left ready work of
    the pool behind (``left``: a team at its limit, the worker's even part, teams skipped). A slot freed here
    may take what was left; when nothing was, only new ready work (its NOTIFY) gives a claim something."""

    def __init__(self, claimed: Iterable[Claimed] = (), *, left: bool) -> None:
        super().__init__(claimed)
        self.left = left


def team_limit(*, max_sessions: int | None, session_limit: int | None) -> int:
    """How many sessions of a team may hold a slot at once: the operator's cap, or the team's own lower one."""
    cap = max_sessions if max_sessions is not None else int(settings.MAS_TEAM_MAX_SESSIONS)
    return min(cap, session_limit) if session_limit is not None else cap


def claim(*, worker: str, queue: str, free: int, running: int, skip_teams: Collection[int] = ()) -> Claims | None:
    """Claim up to ``free`` ready activations of ``queue`` for ``worker`` (which carries ``running`` sessions
    now), none of the teams ``skip_teams``, and mark them dispatched to it; returns them in the order they
    should start, or None when another claim is under way (try again in a moment)."""
    if free <= 0:
        return Claims(left=True)  # not looked at
    dead_s = float(settings.MAS_WORKER_DEAD_S)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [CLAIM_LOCK])
        if not cursor.fetchone()[0]:
            return None
        # A team's sessions count against its limit in every pool; only this pool's ready work is handed out.
        # Each row carries the pool's other live workers too (what they run, how many they are).
        cursor.execute(_COUNTS_SQL, {"queue": queue, "worker": worker, "dead_s": dead_s})
        found = cursor.fetchall()
        ready_all = sum(row[1] for row in found)
        teams = [row[:6] for row in found if row[0] not in skip_teams]
        if not teams:
            return Claims(left=ready_all > 0)
        others_running, others = found[0][6:]
        ready_total = sum(ready for _, ready, *_ in teams)
        even = math.ceil((others_running + running + ready_total) / (others + 1))
        take = min(free, ready_total, max(even - running, 1 if others == 0 else 0))
        order = _shares(teams, take)
        picked: dict[int, list[Claimed]] = {}
        now = timezone.now()
        carried = running
        for team_id in dict.fromkeys(order):
            cursor.execute(_DISPATCH_SQL, {"worker": worker, "now": now, "queue": queue, "team": team_id,
                                           "limit": order.count(team_id), "carried": carried})
            rows = sorted(cursor.fetchall(), key=lambda row: row[1:3])
            picked[team_id] = [Claimed(activation_id, team_id, (now - (ready_at or created_at)).total_seconds())
                               for activation_id, _, created_at, ready_at in rows]
            carried += len(rows)
        # In the order the slots were handed out: the teams interleaved as their shares go.
        claimed = [picked[team_id].pop(0) for team_id in order if picked[team_id]]
    return Claims(claimed, left=ready_all > len(claimed))


# Per team with ready work in the pool: its ready activations there, its sessions holding a slot anywhere, its
# limits and weight; and beside each, the sum of what the pool's other live workers run and their number.
_COUNTS_SQL = """
SELECT a.team_id, count(*) FILTER (WHERE a.status = 'ready' AND a.queue = %(queue)s),
       count(*) FILTER (WHERE a.status <> 'ready'), t.max_sessions, t.session_limit, t.weight, w.running, w.workers
FROM agents_app_activation a JOIN agents_app_team t ON t.id = a.team_id,
     (SELECT coalesce(sum(running), 0) AS running, count(*) AS workers FROM agents_app_worker
      WHERE queue = %(queue)s AND name <> %(worker)s
        AND heartbeat_at >= now() - make_interval(secs => %(dead_s)s)) w
WHERE a.status IN ('ready', 'dispatched', 'running')
GROUP BY a.team_id, t.max_sessions, t.session_limit, t.weight, w.running, w.workers
HAVING count(*) FILTER (WHERE a.status = 'ready' AND a.queue = %(queue)s) > 0
"""

# A team's share of the claim: its oldest ready activations of the pool by priority, dispatched to the worker,
# whose row then counts what it carries with them (``carried``: before this team's), in the same statement.
_DISPATCH_SQL = """
WITH picked AS (
  UPDATE agents_app_activation a SET status = 'dispatched', worker = %(worker)s, dispatched_at = %(now)s
  FROM (SELECT id FROM agents_app_activation
        WHERE queue = %(queue)s AND team_id = %(team)s AND status = 'ready'
        ORDER BY priority, created_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED) ready
  WHERE a.id = ready.id
  RETURNING a.id::text, a.priority, a.created_at, a.ready_at
), carried AS (
  UPDATE agents_app_worker SET running = %(carried)s + (SELECT count(*) FROM picked)
  WHERE name = %(worker)s AND EXISTS (SELECT FROM picked)
)
SELECT * FROM picked
"""


def claims_return(*, worker: str, keep: Collection[str] = ()) -> list[str]:
    """Hand back what ``worker`` claimed and did not begin, but the activations ``keep`` (those it is about
    to begin): ready again, for the next claim of any worker. Returns their ids.

    For a dead worker, all of it; for a live one, what it claimed and runs no session of (its session could
    not begin because the database connection broke, or the commit of its claim was lost with it).
    """
    with transaction.atomic(), connection.cursor() as cursor:
        # A custom tool's worker runs inline in its caller's session, never claimed on its own.
        cursor.execute(
            "UPDATE agents_app_activation SET status = 'ready', worker = '', ready_at = %s "
            "WHERE status = 'dispatched' AND worker = %s AND kind <> 'tool' AND id <> ALL(%s::uuid[]) "
            "RETURNING id::text", [timezone.now(), worker, list(keep)])
        handed = [activation_id for (activation_id,) in cursor.fetchall()]
        if handed:
            ready_notify()
    return handed


def _shares(teams: list[tuple], slots: int) -> list[int]:
    """Hand ``slots`` out one at a time, each to the team using the least of its weighted share; returns the
    team of each slot in turn."""
    heap = []
    for team_id, ready, active, max_sessions, session_limit, weight in teams:
        room = min(ready, team_limit(max_sessions=max_sessions, session_limit=session_limit) - active)
        if room > 0:
            heap.append(((active + 1) / max(weight, 1), team_id, active, room, max(weight, 1)))
    heapq.heapify(heap)
    order: list[int] = []
    while slots > 0 and heap:
        _, team_id, active, room, weight = heapq.heappop(heap)
        order.append(team_id)
        slots -= 1
        active, room = active + 1, room - 1
        if room > 0:
            heapq.heappush(heap, ((active + 1) / weight, team_id, active, room, weight))
    return order
