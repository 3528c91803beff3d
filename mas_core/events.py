"""Events of runs: their JSON, their live channels, and pushing them live.

An event is committed first and published after: a websocket client never
sees an event the database does not have. Writing them is
:mod:`mas_core.eventlog`'s job.

A run's events travel on the Redis pub/sub channel :func:`run_channel` (one
``PUBLISH`` of a JSON list per commit), not through the Channels layer: a
Channels ``group_send`` costs four Redis round trips and each message received
three more, one message at a time per process, which under load made the
web process's receive loop the queue events waited in (``bench/load.py``,
bench/RESULTS.md). A web process subscribes once per run its sockets follow
(``agents_app.ws_rooms``) and reads every message on one connection. Pub/sub
keeps nothing for a subscriber that is away: a push lost that way is a gap
the rooms read back from the database, as before. A team's run list hears
which of its runs changed on :func:`team_runs_channel`, in the same round trip.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from django.conf import settings

from mas_core import jsontext
from mas_core.loops import loop_local
from mas_core.models import Event

logger = logging.getLogger(__name__)

MAX_EVENT_DATA_CHARS = 64_000


def live_prefix() -> str:
    """The pub/sub channels' prefix: the Channels layer's (pub/sub channels are global to a Redis server,
    not per database, so the demo, the tests and the benches need their own)."""
    return settings.CHANNEL_LAYERS["default"].get("CONFIG", {}).get("prefix", "mas")


def run_channel(run_id) -> str:
    """The Redis pub/sub channel of a run's live events: a JSON list of events per message, in seq order."""
    return f"{live_prefix()}:run.{run_id}"


def live_redis_url() -> str:
    """The Redis server of the live channels: the Channels layer's."""
    host = settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]
    return host["address"] if isinstance(host, dict) else host


def team_runs_channel(team_id) -> str:
    """The pub/sub channel of a team's run list (``/ws/runs/``): told which run changed (its id), not how."""
    return f"{live_prefix()}:team.{team_id}.runs"


# Events after which a run's row (status, totals) has changed.
RUN_CHANGES = frozenset({"run_start", "run_complete", "session_start", "session_end", "llm_response"})


def event_to_dict(event: Event) -> dict[str, Any]:
    """The JSON of an event: the same for the REST API and websockets."""
    return event_json(event.run_id, event.seq, event.type, event.agent, event.session_id, event.data,
                       event.created_at)


def event_json(run_id, seq, type, agent, session_id, data, created_at) -> dict[str, Any]:
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
    return [event_json(*row) for row in rows.order_by("seq").values_list(*EVENT_FIELDS)[:limit]]


def bounded(data: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """An event's data kept well under the channel layer's 1 MB message limit, and its JSON text (encoded once:
    the database and the live push both take the text)."""
    text = jsontext.dumps(data)
    if len(text) <= MAX_EVENT_DATA_CHARS:
        return data, text
    data = {key: (value[:2000] + "…[truncated]" if isinstance(value, str) and len(value) > 2000 else value)
            for key, value in data.items()} | {"truncated": True}
    return data, jsontext.dumps(data)


_sync_client = None


def _sync_redis():
    global _sync_client
    if _sync_client is None:
        import redis

        _sync_client = redis.Redis.from_url(live_redis_url(), socket_timeout=5, socket_connect_timeout=2)
    return _sync_client


def _publishes(run_id: str, events: list[str], team_id: int | None) -> list[tuple[str, str]]:
    # The run's events (one JSON array), and the run's id to its team's run list when they changed it.
    out = [(run_channel(run_id), "[" + ",".join(events) + "]")]
    if team_id is not None:
        out.append((team_runs_channel(team_id), run_id))
    return out


def events_push(run_id: str, events: list[str], *, team_id: int | None = None) -> None:
    """Publish committed events of one run (each the JSON text of :func:`event_to_dict`'s object) from sync
    code: one round trip, no hop to an event loop.

    With ``team_id`` (the caller's to give when the events changed the run's status or totals, see
    :data:`RUN_CHANGES`), the team's run list hears of the run too. A failed push is logged: the sockets
    read the events back from the database.
    """
    if not events:
        return
    try:
        pipe = _sync_redis().pipeline(transaction=False)
        for channel, text in _publishes(run_id, events, team_id):
            pipe.publish(channel, text)
        pipe.execute()
    except Exception:
        logger.warning("event push failed", extra={"run": run_id, "events": len(events)}, exc_info=True)


class Publisher:
    """One event loop's pushes, sent together: whatever was committed while the last batch was on its way
    goes out in one write of ``PUBLISH`` commands and one read of their replies (one round trip), in the
    order it was pushed.

    It speaks Redis's protocol on a stream of its own: a ``PUBLISH`` only needs its integer reply read,
    and redis-py's asyncio pipeline cost about 0.15 ms of the loop's CPU per push (its connection pool,
    command packing and RESP3 parser), a few times this. A connection that fails is dropped and made again
    by the next push; the pushes of the failed round trip are logged and lost, as before (the sockets read
    the events back from the database).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.outbox: list[tuple[str, str]] = []
        self.waiters: list[asyncio.Future] = []
        self.sending: asyncio.Task | None = None

    def push(self, run_id: str, events: list[str], team_id: int | None) -> asyncio.Future:
        done = self.loop.create_future()
        self.outbox += _publishes(run_id, events, team_id)
        self.waiters.append(done)
        if self.sending is None:
            self.sending = asyncio.ensure_future(self.send())
        return done

    async def send(self) -> None:
        try:
            while self.outbox:
                batch, self.outbox = self.outbox, []
                waiters, self.waiters = self.waiters, []
                try:
                    await self.round_trip(batch)
                except Exception:
                    logger.warning("event push failed", extra={"publishes": len(batch)}, exc_info=True)
                    self.close()
                for done in waiters:
                    if not done.done():
                        done.set_result(None)
        finally:
            self.sending = None

    async def round_trip(self, batch: list[tuple[str, str]]) -> None:
        """``PUBLISH`` each (channel, text) of ``batch``: one write, then their replies."""
        async with asyncio.timeout(PUSH_TIMEOUT_S):
            if self.writer is None or self.writer.is_closing():
                await self._connect()
            self.writer.write(b"".join(_publish_command(channel, text) for channel, text in batch))
            for _ in batch:
                reply = await self.reader.readline()
                if not reply.startswith(b":"):  # "-ERR ..." or the connection's end
                    raise ConnectionError(f"Redis answered a PUBLISH with {reply[:200]!r}")

    async def _connect(self) -> None:
        from redis.connection import SSLConnection, parse_url

        options = parse_url(live_redis_url())  # the URL read as redis-py reads it for the subscribers
        if "path" in options:
            self.reader, self.writer = await asyncio.open_unix_connection(options["path"])
        else:
            self.reader, self.writer = await asyncio.open_connection(
                options.get("host", "localhost"), options.get("port", 6379),
                ssl=True if options.get("connection_class") is SSLConnection else None)
        if options.get("password"):
            user = [options["username"]] if options.get("username") else []
            self.writer.write(_command("AUTH", *user, options["password"]))
            reply = await self.reader.readline()
            if not reply.startswith(b"+"):
                self.close()
                raise ConnectionError(f"Redis refused the live channels' credentials: {reply[:200]!r}")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


# A push that takes longer is given up (and its connection with it): redis-py's socket timeout before.
PUSH_TIMEOUT_S = 5.0


def _command(*parts: str) -> bytes:
    encoded = [part.encode() for part in parts]
    return b"*%d\r\n" % len(encoded) + b"".join(b"$%d\r\n%b\r\n" % (len(part), part) for part in encoded)


def _publish_command(channel: str, text: str) -> bytes:
    channel_bytes, text_bytes = channel.encode(), text.encode()
    return b"*3\r\n$7\r\nPUBLISH\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (
        len(channel_bytes), channel_bytes, len(text_bytes), text_bytes)


_publishers: dict[int, Publisher] = {}


async def events_push_async(run_id: str, events: list[str], *, team_id: int | None = None) -> None:
    """Publish committed events of one run (JSON texts, as :func:`events_push`) from an event loop; returns
    once they are sent.

    The pushes of a loop share one pipeline per round trip (:class:`Publisher`), in the order they came.
    With ``team_id``, the team's run list hears of the run too.
    """
    if not events:
        return
    await loop_local(_publishers, Publisher).push(run_id, events, team_id)


def event_emit(*, run_id, type: str, data: dict[str, Any] | None = None, agent: str = "",
               session_id=None) -> dict[str, Any]:
    """Record an event of a run (inside the caller's transaction); pushed once it commits.

    See :mod:`mas_core.eventlog` for how it is numbered and written.
    """
    from mas_core.eventlog import event_append

    return event_append(run_id=run_id, type=type, agent=agent, session_id=session_id, data=data)
