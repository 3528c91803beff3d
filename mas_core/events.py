"""Events of runs: their JSON, their websocket groups, and pushing them live.

An event is committed first and sent to the Channels group ``run.<id>``
after: a websocket client never sees an event the database does not have.
Writing them is :mod:`mas_core.eventlog`'s job.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer

from mas_core.models import Event

logger = logging.getLogger(__name__)

MAX_EVENT_DATA_CHARS = 64_000


def run_group(run_id) -> str:
    return f"run.{run_id}"


def team_runs_group(team_id) -> str:
    """The group of a team's run list (``/ws/runs/``): told which run changed, not how."""
    return f"team.{team_id}.runs"


# Events after which a run's row (status, totals) has changed.
RUN_CHANGES = frozenset({"run_start", "run_complete", "session_start", "session_end", "llm_response"})


def event_to_dict(event: Event) -> dict[str, Any]:
    """The JSON of an event: the same for the REST API and websockets."""
    return _event_json(event.run_id, event.seq, event.type, event.agent, event.session_id, event.data,
                       event.created_at)


def _event_json(run_id, seq, type, agent, session_id, data, created_at) -> dict[str, Any]:
    return {
        "run": str(run_id),
        "seq": seq,
        "type": type,
        "agent": agent,
        "session": str(session_id) if session_id else None,
        "data": data,
        "created_at": created_at.isoformat(),
    }


EVENT_FIELDS = ("run_id", "seq", "type", "agent", "session_id", "data", "created_at")


def events_after(*, run_id, after: int, limit: int, before: int | None = None) -> list[dict[str, Any]]:
    """The run's events with ``after < seq < before``, in order, as :func:`event_to_dict` gives them.

    Read as plain rows, not model instances: websockets catching up call this often.
    The caller has checked that the run is its team's.
    """
    rows = Event.objects.filter(run_id=run_id, seq__gt=after)
    if before is not None:
        rows = rows.filter(seq__lt=before)
    return [_event_json(*row) for row in rows.order_by("seq").values_list(*EVENT_FIELDS)[:limit]]


def _bounded(data: dict[str, Any]) -> dict[str, Any]:
    # Payloads stay well under the channel layer's 1 MB message limit.
    import json

    text = json.dumps(data, default=str)
    if len(text) <= MAX_EVENT_DATA_CHARS:
        return data
    return {key: (value[:2000] + "…[truncated]" if isinstance(value, str) and len(value) > 2000 else value)
            for key, value in data.items()} | {"truncated": True}


def _message(payloads: list[dict[str, Any]]) -> dict[str, Any]:
    # One channel message per commit: {"type": "run.events", "events": [...]}, in seq order.
    return {"type": "run.events", "events": payloads}


async def events_push_async(payloads: list[dict[str, Any]], *, team_id: int | None = None) -> None:
    """Send committed events (of one run) to its websocket group, in one message.

    With ``team_id``, the team's run list hears of the run too when the
    events changed its status or totals.
    """
    layer = get_channel_layer()
    if layer is None or not payloads:
        return
    run_id = payloads[0]["run"]
    sends = [(run_group(run_id), _message(payloads))]
    if team_id is not None and any(payload["type"] in RUN_CHANGES for payload in payloads):
        sends.append((team_runs_group(team_id), {"type": "runs.changed", "run": run_id}))
    try:
        if isinstance(layer, RedisChannelLayer) and layer.ring_size == 1:
            await groups_send(layer, sends)
        else:
            for group, message in sends:
                await layer.group_send(group, message)
    except Exception:
        logger.warning("event push failed", extra={"run": run_id, "seq": payloads[0]["seq"]}, exc_info=True)


# channels_redis's group_send, for the channels of several groups at once (channels_redis 4.x).
_GROUP_SEND_LUA = """
local over_capacity = 0
local current_time = ARGV[#ARGV - 1]
local expiry = ARGV[#ARGV]
for i=1,#KEYS do
    if redis.call('ZCOUNT', KEYS[i], '-inf', '+inf') < tonumber(ARGV[i + #KEYS]) then
        redis.call('ZADD', KEYS[i], current_time, ARGV[i])
        redis.call('EXPIRE', KEYS[i], expiry)
    else
        over_capacity = over_capacity + 1
    end
end
return over_capacity
"""


async def groups_send(layer: RedisChannelLayer, sends: list[tuple[str, dict[str, Any]]]) -> None:
    """``layer.group_send`` of each (group, message), in one Redis round trip when no one listens and two
    when someone does (group_send takes two per group, then two more per group with members).

    The same Redis commands as channels_redis 4's ``group_send`` on a layer of one host: drop the
    groups' expired members and read the others (one pipeline), then drop each member channel's
    expired messages and add the message to it within its capacity (a second pipeline).
    """
    connection = layer.connection(0)
    now = int(time.time())
    reading = connection.pipeline(transaction=False)
    for group, _ in sends:
        key = layer._group_key(group)
        reading.zremrangebyscore(key, min=0, max=now - layer.group_expiry)
        reading.zrange(key, 0, -1)
    members = (await reading.execute())[1::2]
    if not any(members):
        return
    writing = connection.pipeline(transaction=False)
    for (group, message), names in zip(sends, members):
        if not names:
            continue
        keyed, messages, capacities = layer._map_channel_keys_to_connection(
            [name.decode("utf8") for name in names], message)
        keys = [key for channel_keys in keyed.values() for key in channel_keys]
        for key in keys:
            writing.zremrangebyscore(key, min=0, max=int(time.time()) - int(layer.expiry))
        writing.eval(_GROUP_SEND_LUA, len(keys), *keys, *[messages[key] for key in keys],
                     *[capacities[key] for key in keys], time.time(), layer.expiry)
    await writing.execute()


def event_emit(*, run_id, type: str, data: dict[str, Any] | None = None, agent: str = "",
               session_id=None) -> dict[str, Any]:
    """Record an event of a run (inside the caller's transaction); pushed once it commits.

    See :mod:`mas_core.eventlog` for how it is numbered and written.
    """
    from mas_core.eventlog import event_append

    return event_append(run_id=run_id, type=type, agent=agent, session_id=session_id, data=data)
