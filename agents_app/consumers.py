"""Websockets of the live monitor: a run's events, and a team's run list.

``/ws/runs/<id>/?after=<seq>`` sends every event of the run with ``seq >
after`` from the database, then the live ones — in order, each once. The
socket joins its run's :class:`Room` (one channel-layer subscription per run
and process) before it reads the database, so an event committed during the
replay waits in its inbox and is dropped if the replay already sent it; a
live batch that skips numbers (a push lost, or batches dropped because this
client was slow and its inbox full) is filled in from the database. Every
``MAS_WS_PING_S`` the socket pings and also catches up from the database, so
even a lost last push reaches the client. The kernel never waits for a
client: pushes go to the channel layer, and a slow socket only loses live
copies it then reads back.

``/ws/runs/?team=<slug>&since=<unix seconds>`` sends the team's runs as they
change (started, status, totals); with ``since``, first every run that is
still going or was created or finished since then, so a page rendered at
``since`` misses no change made before its socket joined.

Messages are JSON objects with a ``message`` key:
``{"message": "event", "event": <the REST events endpoint's JSON>}``,
``{"message": "replayed", "last_seq": n}`` once the replay is done,
``{"message": "ping"}``, and on ``/ws/runs/``
``{"message": "run", "run": <the run as GET /api/runs lists it>}``.

Close codes: 4401 not authenticated (a browser's session cookie counts only
from one of our own pages: its ``Origin`` must be an allowed host), 4404 no
such run in the caller's team (or no such team), 4400 a malformed ``after``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from agents_app.events import run_group, team_runs_group

REPLAY_PAGE = 500
SINCE_LIMIT = 100  # runs sent on connect to /ws/runs/?since=

logger = logging.getLogger(__name__)


def _ping_s() -> float:
    return float(getattr(settings, "MAS_WS_PING_S", 15))


# -- who is asking (small sync functions, run in a thread) -------------------------------------


def _bearer(scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def _same_site(scope) -> bool:
    """A cookie-authenticated socket must come from one of our own pages (no cross-site hijacking)."""
    from urllib.parse import urlparse

    from django.http.request import validate_host

    origin = next((value.decode("latin-1") for name, value in scope.get("headers", []) if name == b"origin"), "")
    if not origin:
        return False
    trusted = {urlparse(o).netloc for o in settings.CSRF_TRUSTED_ORIGINS}
    host = urlparse(origin).netloc
    return host in trusted or validate_host(host.rsplit(":", 1)[0] if host.count(":") == 1 else host,
                                            settings.ALLOWED_HOSTS)


def _team_ids(scope) -> list[int] | None:
    """The teams the connection may see: the bearer token's team, or the session user's teams; None if anonymous."""
    from agents_app.models import Team
    from agents_app.permissions import memberships
    from agents_app.services import api_token_authenticate

    token = _bearer(scope)
    if token is not None:
        row = api_token_authenticate(token)
        return [row.team_id] if row is not None else None
    user = scope.get("user")
    if user is None or not user.is_authenticated or not _same_site(scope):
        return None
    if user.is_superuser:
        return list(Team.objects.values_list("id", flat=True))
    return [membership.team_id for membership in memberships(user)]


def _run_team(run_id: str, team_ids: list[int]) -> int | None:
    from agents_app.models import Run

    try:
        return Run.objects.filter(pk=run_id, team_id__in=team_ids).values_list("team_id", flat=True).first()
    except Exception:  # not a UUID
        return None


def _events_after(run_id: str, after: int, limit: int) -> list[dict[str, Any]]:
    from agents_app.events import event_to_dict
    from agents_app.models import Event

    rows = Event.objects.filter(run_id=run_id, seq__gt=after).order_by("seq")[:limit]
    return [event_to_dict(event) for event in rows]


def _run_summary(run_id: str, team_id: int) -> dict[str, Any] | None:
    from agents_app.api_runs import run_out
    from agents_app.models import Run
    from agents_app.schemas_runs import RunOut

    run = Run.objects.filter(pk=run_id, team_id=team_id).select_related("created_by").first()
    return RunOut.model_validate(run_out(run)).model_dump(mode="json") if run is not None else None


# -- one subscription per run and process ---------------------------------------------------------


class Room:
    """The sockets of one process that follow one run, fed by a single channel-layer subscription.

    Fifty browsers on one run cost one Redis message and one JSON encoding
    per event, not fifty: the room reads the run's group once and hands each
    socket the frames, already encoded. A socket that falls behind (its
    queue full) drops what it cannot take and reads it back from the
    database.
    """

    def __init__(self, run_id: str, layer) -> None:
        self.run_id, self.layer = run_id, layer
        self.sockets: set[RunEventsConsumer] = set()
        self.channel: str | None = None
        self.reader: asyncio.Task | None = None
        self.ready = asyncio.Event()
        self.failed = False

    async def open(self) -> None:
        try:
            self.channel = await self.layer.new_channel()
            await self.layer.group_add(run_group(self.run_id), self.channel)
        except Exception:
            self.failed = True
            raise
        finally:
            self.ready.set()  # sockets waiting to join learn the outcome either way
        self.reader = asyncio.ensure_future(self.read())

    async def read(self) -> None:
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                # Redis went away: keep trying; meanwhile the sockets' pings catch up from the database.
                logger.warning("monitor room receive failed", extra={"run": self.run_id}, exc_info=True)
                await asyncio.sleep(1)
                continue
            if message.get("type") != "run.events":
                continue
            frames = [(event["seq"], json.dumps({"message": "event", "event": event}, default=str))
                      for event in sorted(message["events"], key=lambda event: event["seq"])]
            for socket in list(self.sockets):
                socket.offer(frames)

    async def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
        if self.channel is not None:
            await self.layer.group_discard(run_group(self.run_id), self.channel)


_rooms: dict[tuple[int, str], Room] = {}


class RoomUnavailable(Exception):
    """The channel layer refused the run's subscription (Redis down)."""


async def room_join(run_id: str, socket: "RunEventsConsumer") -> None:
    key = (id(asyncio.get_running_loop()), run_id)
    room = _rooms.get(key)
    if room is None:
        room = _rooms[key] = Room(run_id, socket.channel_layer)
        room.sockets.add(socket)
        try:
            await room.open()
        except Exception as error:
            _rooms.pop(key, None)
            logger.warning("monitor room open failed", extra={"run": run_id}, exc_info=True)
            raise RoomUnavailable(str(error)) from error
    else:
        room.sockets.add(socket)
        await room.ready.wait()
        if room.failed:
            raise RoomUnavailable("the channel layer is unavailable")


async def room_leave(run_id: str, socket: "RunEventsConsumer") -> None:
    key = (id(asyncio.get_running_loop()), run_id)
    room = _rooms.get(key)
    if room is None:
        return
    room.sockets.discard(socket)
    if not room.sockets:
        del _rooms[key]
        await room.close()


# -- /ws/runs/<id>/ ---------------------------------------------------------------------------


class RunEventsConsumer(AsyncWebsocketConsumer):
    QUEUE = 1000  # live batches a socket may have waiting before it reads from the database instead

    async def connect(self) -> None:
        self.run_id = str(self.scope["url_route"]["kwargs"]["run_id"])
        self.last_seq = 0
        self.joined = False
        self.tasks: list[asyncio.Task] = []
        self.lock = asyncio.Lock()  # live batches and the pinger's catch-up take turns
        self.inbox: asyncio.Queue = asyncio.Queue(self.QUEUE)
        self.dropped = 0  # live batches dropped because the inbox was full (read back from the database)
        self.behind = False  # batches were dropped since the last read from the database
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        await self.accept()
        team_ids = await database_sync_to_async(_team_ids)(self.scope)
        if team_ids is None:
            await self.close(code=4401)
            return
        try:
            self.last_seq = max(0, int(query.get("after", ["0"])[0] or 0))
        except ValueError:
            await self.close(code=4400)
            return
        if await database_sync_to_async(_run_team)(self.run_id, team_ids) is None:
            await self.close(code=4404)
            return
        # Join first, replay second: what is committed meanwhile waits in the inbox.
        try:
            await room_join(self.run_id, self)
        except RoomUnavailable:
            await self.close(code=1011)  # the client retries; nothing was promised yet
            return
        self.joined = True
        await self.catch_up()
        await self.send_json({"message": "replayed", "last_seq": self.last_seq})
        self.tasks = [asyncio.ensure_future(self.deliver_forever()), asyncio.ensure_future(self.ping_forever())]

    async def disconnect(self, code) -> None:
        for task in self.tasks:
            task.cancel()
        if self.joined:
            await room_leave(self.run_id, self)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        return None  # the stream is one-way; clients reconnect with ?after= to resume

    def offer(self, frames: list[tuple[int, str]]) -> None:
        """A committed batch from the room; when the inbox is full it is dropped (read back later)."""
        try:
            self.inbox.put_nowait(frames)
        except asyncio.QueueFull:
            self.dropped += 1
            self.behind = True

    async def deliver_forever(self) -> None:
        while True:
            frames = await self.inbox.get()
            async with self.lock:
                for seq, frame in frames:
                    if seq > self.last_seq + 1:  # a gap: a lost push, or batches dropped above
                        await self._read_database(until=seq - 1)
                    if seq == self.last_seq + 1:
                        await self.send(text_data=frame)
                        self.last_seq = seq
                if self.behind and self.inbox.empty():
                    # What was dropped may have been the run's last events: read them now, not at the next ping.
                    self.behind = False
                    await self._read_database()

    async def catch_up(self) -> None:
        async with self.lock:
            await self._read_database()

    async def _read_database(self, until: int | None = None) -> None:
        while True:
            page = await database_sync_to_async(_events_after)(self.run_id, self.last_seq, REPLAY_PAGE)
            for event in page:
                if until is not None and event["seq"] > until:
                    return
                await self.send_event(event)
            if len(page) < REPLAY_PAGE:
                return

    async def send_event(self, event: dict[str, Any]) -> None:
        await self.send_json({"message": "event", "event": event})
        self.last_seq = event["seq"]

    async def ping_forever(self) -> None:
        while True:
            await asyncio.sleep(_ping_s())
            await self.send_json({"message": "ping", "last_seq": self.last_seq})
            await self.catch_up()

    async def send_json(self, content: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(content, default=str))


# -- /ws/runs/ --------------------------------------------------------------------------------


class TeamRunsConsumer(AsyncWebsocketConsumer):
    """The team's runs as they change; the team is the token's, or ``?team=<slug>`` among the user's."""

    FLUSH_S = 0.25

    async def connect(self) -> None:
        self.group = None
        self.pending: set[str] = set()
        self.flusher: asyncio.Task | None = None
        await self.accept()
        team_ids = await database_sync_to_async(_team_ids)(self.scope)
        if team_ids is None:
            await self.close(code=4401)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        since = None
        if query.get("since", [""])[0]:
            try:
                since = datetime.fromtimestamp(float(query["since"][0]), tz=UTC)
            except (ValueError, OverflowError, OSError):
                await self.close(code=4400)
                return
        self.team_id = await database_sync_to_async(_pick_team)(team_ids, query.get("team", [""])[0])
        if self.team_id is None:
            await self.close(code=4404)
            return
        # Subscribe first, then read what changed since the page was drawn: nothing falls in between.
        self.group = team_runs_group(self.team_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.send(text_data=json.dumps({"message": "subscribed", "team": self.team_id}))
        if since is not None:
            for summary in await database_sync_to_async(_runs_since)(self.team_id, since):
                await self.send(text_data=json.dumps({"message": "run", "run": summary}, default=str))

    async def disconnect(self, code) -> None:
        if self.flusher is not None:
            self.flusher.cancel()
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def runs_changed(self, message: dict[str, Any]) -> None:
        # Totals change with every model call: send each run at most every FLUSH_S.
        self.pending.add(message["run"])
        if self.flusher is None or self.flusher.done():
            self.flusher = asyncio.ensure_future(self.flush_soon())

    async def flush_soon(self) -> None:
        # Loops until nothing is pending: a change heard while a batch is being sent goes in the next one.
        while self.pending:
            await asyncio.sleep(self.FLUSH_S)
            runs, self.pending = self.pending, set()
            for run_id in sorted(runs):
                summary = await database_sync_to_async(_run_summary)(run_id, self.team_id)
                if summary is not None:
                    await self.send(text_data=json.dumps({"message": "run", "run": summary}, default=str))


def _runs_since(team_id: int, since: datetime) -> list[dict[str, Any]]:
    """The team's runs still going, or created or finished since ``since`` (oldest first, at most SINCE_LIMIT)."""
    from django.db.models import Q

    from agents_app.api_runs import run_out
    from agents_app.models import Run
    from agents_app.schemas_runs import RunOut

    runs = (Run.objects.filter(team_id=team_id)
            .filter(Q(status__in=["queued", "running"]) | Q(created_at__gte=since) | Q(finished_at__gte=since))
            .select_related("created_by").order_by("-created_at", "-pk")[:SINCE_LIMIT])
    return [RunOut.model_validate(run_out(run)).model_dump(mode="json") for run in reversed(list(runs))]


def _pick_team(team_ids: list[int], slug: str) -> int | None:
    from agents_app.models import Team

    if slug:
        return Team.objects.filter(id__in=team_ids, slug=slug).values_list("id", flat=True).first()
    return team_ids[0] if len(team_ids) == 1 else None
