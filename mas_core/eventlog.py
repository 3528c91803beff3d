"""Appending to a run's event log: numbered, inserted and pushed in one statement per batch.

The run row's ``next_seq`` counter numbers the events; the ``UPDATE`` that
advances it holds the run's row lock until commit, so numbers are gap-free
and in commit order. The same SQL fragments serve the services (through
Django's connection) and the session store (through its async connection).
"""

from __future__ import annotations

import asyncio
import functools
import json
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction

from mas_core import jsontext
from mas_core.events import RUN_CHANGES, bounded, event_json, events_push, events_push_async

# Inserts the events of ``%(events)s`` (a JSON array of {i, type, agent, session, data, at}) numbered
# after ``r.base``; a statement using it defines ``r`` as the run's counter UPDATE ... RETURNING base.
INSERT_NUMBERED = """INSERT INTO agents_app_event (run_id, seq, type, agent, session_id, data, created_at)
  SELECT %(run)s::uuid, r.base + x.i, x.type, x.agent, x.session, x.data, x.at
  FROM r, jsonb_to_recordset(%(events)s::jsonb)
    AS x(i bigint, type text, agent text, session uuid, data jsonb, at timestamptz)"""

# Appends %(n)s events; returns their base number and the run's team (told of a change of the run, see
# :func:`events_appended`).
APPEND_SQL = f"""
WITH r AS (
  UPDATE agents_app_run SET next_seq = next_seq + %(n)s WHERE id = %(run)s::uuid
  RETURNING next_seq - %(n)s AS base, team_id
), e AS ({INSERT_NUMBERED})
SELECT r.base, r.team_id FROM r
"""

# type, agent, session id, data, time, and the data's JSON text: encoded once, for the insert and the push.
Entry = tuple[str, str, Any, dict[str, Any], datetime, str]


def entry(type: str, *, agent: str = "", session_id=None, data: dict[str, Any] | None = None) -> Entry:
    data, text = bounded(data or {})
    return (type, agent, session_id, data, datetime.now(UTC), text)


# An event's type or agent as a JSON string: a few dozen texts, each quoted at every event of every write twice
# (the insert and the push) before it was kept.
_quoted = functools.lru_cache(maxsize=4096)(json.dumps)


def events_param(entries: list[Entry]) -> str:
    """The ``%(events)s`` of :data:`INSERT_NUMBERED`: a JSON array, written around each event's data text."""
    return "[" + ",".join(
        '{"i": %d, "type": %s, "agent": %s, "session": %s, "data": %s, "at": "%s"}' % (
            i, _quoted(type_), _quoted(agent), f'"{session}"' if session else "null", text, at.isoformat())
        for i, (type_, agent, session, _, at, text) in enumerate(entries, start=1)) + "]"


def payloads(run_id, base: int, entries: list[Entry]) -> list[dict[str, Any]]:
    """The events as websockets and the REST API show them (see ``mas_core.events.event_to_dict``)."""
    return [event_json(run_id, base + i, type_, agent, session, data, at)
            for i, (type_, agent, session, data, at, _) in enumerate(entries, start=1)]


def pushed(run_id, base: int, entries: list[Entry]) -> list[str]:
    """The events as :func:`payloads` gives them, each as its JSON text (what the live push sends)."""
    run = jsontext.dumps(str(run_id))
    return [
        '{"run": %s, "seq": %d, "type": %s, "agent": %s, "session": %s, "data": %s, "created_at": "%s"}' % (
            run, base + i, _quoted(type_), _quoted(agent), f'"{session}"' if session else "null", text,
            at.isoformat())
        for i, (type_, agent, session, _, at, text) in enumerate(entries, start=1)
    ]


def changes_run(entries: list[Entry]) -> bool:
    """Whether the events change their run's status or totals (its team's run list hears of those)."""
    return any(entry[0] in RUN_CHANGES for entry in entries)


def events_append(*, run_id, entries: list[Entry]) -> list[dict[str, Any]]:
    """Append events to the run's log (inside the caller's transaction); pushed to websockets after commit."""
    if not entries:
        return []
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(APPEND_SQL, {"run": str(run_id), "n": len(entries), "events": events_param(entries)})
        base, team_id = cursor.fetchone()
    events_appended(run_id=run_id, base=base, team_id=team_id, entries=entries)
    return payloads(run_id, base, entries)


def events_appended(*, run_id, base: int, team_id: int, entries: list[Entry]) -> None:
    """Events a statement of the caller's numbered from ``base`` and inserted (:data:`INSERT_NUMBERED`), as
    :func:`events_append` does: pushed to websockets when the transaction commits, and the run's team
    (``team_id``, which the statement read with the counter) told when they change the run."""
    texts = pushed(run_id, base, entries)
    team = team_id if changes_run(entries) else None
    transaction.on_commit(lambda: _push(str(run_id), texts, team))


def event_append(*, run_id, type: str, agent: str = "", session_id=None,
                 data: dict[str, Any] | None = None) -> dict[str, Any]:
    """One event: see :func:`events_append`."""
    return events_append(run_id=run_id, entries=[entry(type, agent=agent, session_id=session_id, data=data)])[0]


def _push(run_id: str, events: list[str], team_id: int | None) -> None:
    # In a worker the push goes to the session loop and is not waited for; elsewhere it is published now.
    # Hundreds of sessions push at once in a worker: the loop's pushes go out together, one pipeline per
    # Redis round trip (``mas_core.events.Publisher``), on one connection.
    from mas_core.runner import runner

    loop = runner.running_loop()
    if loop is not None:
        asyncio.run_coroutine_threadsafe(events_push_async(run_id, events, team_id=team_id), loop)
    else:
        events_push(run_id, events, team_id=team_id)
