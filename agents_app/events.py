"""Recording events (one row each, numbered per run without gaps) and pushing them live.

An event is committed first and sent to the Channels group ``run.<id>``
after: a websocket client never sees an event the database does not have.
"""

from __future__ import annotations

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


def event_push(payload: dict[str, Any]) -> None:
    """Send a committed event to its run's websocket group (from sync code)."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(run_group(payload["run"]), {"type": "run.event", "event": payload})
    except Exception:  # the row is the truth; a client that missed a push replays it
        logger.warning("event push failed", extra={"run": payload["run"], "seq": payload["seq"]}, exc_info=True)


async def event_push_async(payload: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        await layer.group_send(run_group(payload["run"]), {"type": "run.event", "event": payload})
    except Exception:
        logger.warning("event push failed", extra={"run": payload["run"], "seq": payload["seq"]}, exc_info=True)


def event_emit(*, run_id, type: str, data: dict[str, Any] | None = None, agent: str = "", session_id=None) -> Event:
    """Record an event and push it once the surrounding transaction commits."""
    event = event_record(run_id=run_id, type=type, data=data, agent=agent, session_id=session_id)
    payload = event_to_dict(event)
    transaction.on_commit(lambda: event_push(payload))
    return event
