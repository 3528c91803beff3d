"""Appending to a run's event log: numbered, inserted and pushed in one statement per batch.

The run row's ``next_seq`` counter numbers the events; the ``UPDATE`` that
advances it holds the run's row lock until commit, so numbers are gap-free
and in commit order. The same SQL fragments serve the services (through
Django's connection) and the session store (through its async connection).
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction

from mas_core.events import RUN_CHANGES, _bounded, events_push, events_push_async

# Inserts the events of ``%(events)s`` (a JSON array of {i, type, agent, session, data, at}) numbered
# after ``r.base``; a statement using it defines ``r`` as the run's counter UPDATE ... RETURNING base.
INSERT_NUMBERED = """INSERT INTO agents_app_event (run_id, seq, type, agent, session_id, data, created_at)
  SELECT %(run)s::uuid, r.base + x.i, x.type, x.agent, x.session, x.data, x.at
  FROM r, jsonb_to_recordset(%(events)s::jsonb)
    AS x(i bigint, type text, agent text, session uuid, data jsonb, at timestamptz)"""

APPEND_SQL = f"""
WITH r AS (
  UPDATE agents_app_run SET next_seq = next_seq + %(n)s WHERE id = %(run)s::uuid RETURNING next_seq - %(n)s AS base
), e AS ({INSERT_NUMBERED})
SELECT r.base FROM r
"""

Entry = tuple[str, str, Any, dict[str, Any], datetime]  # type, agent, session id, data, time


def entry(type: str, *, agent: str = "", session_id=None, data: dict[str, Any] | None = None) -> Entry:
    return (type, agent, session_id, _bounded(data or {}), datetime.now(UTC))


def events_param(entries: list[Entry]) -> str:
    return json.dumps([
        {"i": i, "type": type_, "agent": agent, "session": str(session) if session else None, "data": data,
         "at": at.isoformat()}
        for i, (type_, agent, session, data, at) in enumerate(entries, start=1)
    ], default=str)


def payloads(run_id, base: int, entries: list[Entry]) -> list[dict[str, Any]]:
    """The events as websockets and the REST API show them (see ``mas_core.events.event_to_dict``)."""
    return [
        {"run": str(run_id), "seq": base + i, "type": type_, "agent": agent,
         "session": str(session) if session else None, "data": data, "created_at": at.isoformat()}
        for i, (type_, agent, session, data, at) in enumerate(entries, start=1)
    ]


def events_append(*, run_id, entries: list[Entry]) -> list[dict[str, Any]]:
    """Append events to the run's log (inside the caller's transaction); pushed to websockets after commit."""
    if not entries:
        return []
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(APPEND_SQL, {"run": str(run_id), "n": len(entries), "events": events_param(entries)})
        base = cursor.fetchone()[0]
    pushed = payloads(run_id, base, entries)
    team_id = _team_of(run_id) if any(entry[0] in RUN_CHANGES for entry in entries) else None
    transaction.on_commit(lambda: _push(pushed, team_id))
    return pushed


_teams: dict[str, int] = {}


def _team_of(run_id) -> int | None:
    # A run never changes team: remembered per process (bounded).
    key = str(run_id)
    if key not in _teams:
        if len(_teams) > 10_000:
            _teams.clear()
        # The run table by name, as APPEND_SQL uses it: runs are agents_app's, above the event log.
        with connection.cursor() as cursor:
            cursor.execute("SELECT team_id FROM agents_app_run WHERE id = %s::uuid", [str(run_id)])
            row = cursor.fetchone()
        team_id = row[0] if row else None
        if team_id is None:
            return None
        _teams[key] = team_id
    return _teams[key]


def event_append(*, run_id, type: str, agent: str = "", session_id=None,
                 data: dict[str, Any] | None = None) -> dict[str, Any]:
    """One event: see :func:`events_append`."""
    return events_append(run_id=run_id, entries=[entry(type, agent=agent, session_id=session_id, data=data)])[0]


def _push(pushed: list[dict[str, Any]], team_id: int | None) -> None:
    # In a worker the push goes to the session loop and is not waited for; elsewhere it is published now.
    from mas_core.runner import runner

    loop = runner.running_loop()
    if loop is not None:
        asyncio.run_coroutine_threadsafe(push_bounded(pushed, team_id=team_id), loop)
    else:
        events_push(pushed, team_id=team_id)


async def push_bounded(pushed: list[dict[str, Any]], *, team_id: int | None = None) -> None:
    """Push committed events from a worker's loop; returns once they are sent.

    Hundreds of sessions push at once: the loop's pushes go out together, one
    pipeline per Redis round trip (``mas_core.events.Publisher``), on one connection.
    """
    await events_push_async(pushed, team_id=team_id)
