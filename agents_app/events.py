"""Recording events (one row each, numbered per run without gaps) and pushing them live.

An event is committed first and sent to the Channels group ``run.<id>``
after: a websocket client never sees an event the database does not have.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection, transaction

from agents_app.models import Event

logger = logging.getLogger(__name__)

MAX_EVENT_DATA_CHARS = 64_000


def run_group(run_id) -> str:
    return f"run.{run_id}"


def event_to_dict(event: Event) -> dict[str, Any]:
    """The JSON of an event: the same for the REST API and websockets."""
    return {
        "run": str(event.run_id),
        "seq": event.seq,
        "type": event.type,
        "agent": event.agent,
        "session": str(event.session_id) if event.session_id else None,
        "data": event.data,
        "created_at": event.created_at.isoformat(),
    }


def _bounded(data: dict[str, Any]) -> dict[str, Any]:
    # Payloads stay well under the channel layer's 1 MB message limit.
    import json

    text = json.dumps(data, default=str)
    if len(text) <= MAX_EVENT_DATA_CHARS:
        return data
    return {key: (value[:2000] + "…[truncated]" if isinstance(value, str) and len(value) > 2000 else value)
            for key, value in data.items()} | {"truncated": True}


def event_record(*, run_id, type: str, data: dict[str, Any] | None = None, agent: str = "",
                 session_id=None) -> Event:
    """Insert the run's next event. Must run inside a transaction (the seq is taken there)."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE agents_app_run SET next_seq = next_seq + 1 WHERE id = %s RETURNING next_seq", [run_id]
            )
            seq = cursor.fetchone()[0]
        return Event.objects.create(
            run_id=run_id, seq=seq, type=type, agent=agent, session_id=session_id, data=_bounded(data or {})
        )


def _message(payloads: list[dict[str, Any]]) -> dict[str, Any]:
    # One channel message per commit: {"type": "run.events", "events": [...]}, in seq order.
    return {"type": "run.events", "events": payloads}


def event_push(payload: dict[str, Any]) -> None:
    """Send a committed event to its run's websocket group (from sync code).

    In a worker, the push is handed to the process's session loop and not
    waited for; elsewhere (the web process) it is sent before returning.
    """
    from agents_app.runner import runner

    loop = runner.running_loop()
    if loop is not None:
        asyncio.run_coroutine_threadsafe(events_push_async([payload]), loop)
        return
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(run_group(payload["run"]), _message([payload]))
    except Exception:  # the row is the truth; a client that missed a push replays it
        logger.warning("event push failed", extra={"run": payload["run"], "seq": payload["seq"]}, exc_info=True)


async def events_push_async(payloads: list[dict[str, Any]]) -> None:
    """Send committed events (of one run) to its websocket group, in one message."""
    layer = get_channel_layer()
    if layer is None or not payloads:
        return
    try:
        await layer.group_send(run_group(payloads[0]["run"]), _message(payloads))
    except Exception:
        logger.warning("event push failed", extra={"run": payloads[0]["run"], "seq": payloads[0]["seq"]},
                       exc_info=True)


def events_insert(*, run_id, session_id, agent: str, events: list[tuple[str, dict[str, Any]]],
                  usage: tuple[int, int, str, int] | None = None) -> list[dict[str, Any]]:
    """Insert a batch of a session's events in one statement; add usage to the run in the same UPDATE.

    The hot path of the kernel: raw SQL, one round trip for the run row and
    one for the events. Must run inside a transaction.
    """
    import json

    from django.utils import timezone

    prompt, completion, cost, large = usage or (0, 0, "0", 0)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE agents_app_run SET next_seq = next_seq + %s, prompt_tokens = prompt_tokens + %s, "
            "completion_tokens = completion_tokens + %s, cost_usd = cost_usd + %s::numeric, "
            "large_tier_uses = large_tier_uses + %s WHERE id = %s RETURNING next_seq",
            [len(events), prompt, completion, cost, large, run_id],
        )
        last = cursor.fetchone()[0]
        if not events:
            return []
        now = timezone.now()
        first = last - len(events) + 1
        events = [(type_, _bounded(data)) for type_, data in events]
        rows, params = [], []
        for offset, (type_, data) in enumerate(events):
            rows.append("(%s, %s, %s, %s, %s, %s::jsonb, %s)")
            params += [run_id, first + offset, type_, agent, session_id, json.dumps(data, default=str), now]
        cursor.execute(
            "INSERT INTO agents_app_event (run_id, seq, type, agent, session_id, data, created_at) VALUES "
            + ", ".join(rows), params,
        )
    created = now.isoformat()
    return [
        {"run": str(run_id), "seq": first + offset, "type": type_, "agent": agent,
         "session": str(session_id) if session_id else None, "data": data, "created_at": created}
        for offset, (type_, data) in enumerate(events)
    ]


def event_emit(*, run_id, type: str, data: dict[str, Any] | None = None, agent: str = "", session_id=None) -> Event:
    """Record an event and push it once the surrounding transaction commits."""
    event = event_record(run_id=run_id, type=type, data=data, agent=agent, session_id=session_id)
    payload = event_to_dict(event)
    transaction.on_commit(lambda: event_push(payload))
    return event
