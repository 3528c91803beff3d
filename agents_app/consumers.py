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

Events travel in lists: one message carries whatever is ready for the socket
— a page of the replay, a committed batch, or all a busy socket has waiting —
up to ``MAX_MESSAGE_CHARS``. A quiet run costs one message per event; a busy
one does not cost one websocket frame per event and socket.

``/ws/runs/?team=<slug>&since=<unix seconds>`` sends the team's runs as they
change (started, status, totals); with ``since``, first every run that is
still going or was created or finished since then, so a page rendered at
``since`` misses no change made before its socket joined.

Messages are JSON objects with a ``message`` key:
``{"message": "events", "events": [<the REST events endpoint's JSON>, ...]}``
(in seq order, never empty), ``{"message": "replayed", "last_seq": n}`` once
the replay is done, ``{"message": "ping", "last_seq": n}``, and on ``/ws/runs/``
``{"message": "run", "run": <the run as GET /api/runs lists it>}``.

Close codes: 4401 not authenticated (a browser's session cookie counts only
from one of our own pages: its ``Origin`` must pass Django's CSRF origin
check, see ``mas_core/ws_security.py``), 4429 a wrong token from an
address past ``MAS_AUTH_FAILURES_PER_MIN`` failed token authentications this
minute (HTTP and websockets count together; the reason says when to retry),
4404 no such run in the caller's team (or no such team), 4400 a malformed
``after`` or ``since``, 1011 the channel layer could not be joined (the
client retries).
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

from mas_core.events import run_group, team_runs_group

REPLAY_PAGE = 500
MAX_MESSAGE_CHARS = 256_000  # events per message stop here (an event's data is bounded well below)
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


def _team_ids(scope) -> tuple[list[int], tuple[int, str] | None]:
    """The teams the connection may see — the bearer token's team, or the session user's — or the close
    code and reason that refuse it.

    A session counts only from one of our own pages (``ws_security.origin_allowed``). A wrong token is a
    failed token authentication of the socket's address, counted with those over HTTP: past the limit
    the socket is closed 4429 (the reason says how long to wait) instead of 4401. A right token is never
    refused for its address's failures.
    """
    from agents_app.models import Team
    from mas_core.permissions import memberships
    from mas_core.teams import api_token_authenticate
    from mas_core import ratelimit
    from mas_core.ws_security import client_address, origin_allowed

    token = _bearer(scope)
    if token is not None:
        row = api_token_authenticate(token)
        if row is not None:
            return [row.team_id], None
        wait = ratelimit.token_failure(client_address(scope))
        if wait is None:
            return [], (4401, "")
        return [], (4429, f"too many failed token authentications from your address; retry in {wait} s")
    user = scope.get("user")
    if user is None or not user.is_authenticated or not origin_allowed(scope):
        return [], (4401, "")
    if user.is_superuser:
        return list(Team.objects.values_list("id", flat=True)), None
    return [membership.team_id for membership in memberships(user)], None


def _run_team(run_id: str, team_ids: list[int]) -> int | None:
    from agents_app.models import Run

    try:
        return Run.objects.filter(pk=run_id, team_id__in=team_ids).values_list("team_id", flat=True).first()
    except Exception:  # not a UUID
        return None


def _events_after(run_id: str, after: int, limit: int, before: int | None = None) -> list[dict[str, Any]]:
    from mas_core.events import events_after

    return events_after(run_id=run_id, after=after, limit=limit, before=before)


def _run_summary(run_id: str, team_id: int) -> dict[str, Any] | None:
    from agents_app.api_runs import run_out
    from agents_app.models import Run
    from agents_app.schemas_runs import RunOut

    run = Run.objects.filter(pk=run_id, team_id=team_id).select_related("created_by").first()
    return RunOut.model_validate(run_out(run)).model_dump(mode="json") if run is not None else None


# -- one subscription per run and process ---------------------------------------------------------


def encoded(events: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """(seq, JSON) of each event: encoded once per process, whatever the number of sockets."""
    return [(event["seq"], json.dumps(event, default=str)) for event in events]


class Room:
    """The sockets of one process that follow one run, fed by a single channel-layer subscription.

    Fifty browsers on one run cost one Redis message and one JSON encoding
    per event, not fifty: the room reads the run's group once and hands each
    socket the frames, already encoded. A socket that falls behind (its
    queue full) drops what it cannot take and reads it back from the
    database.

    Pushes of one run can reach Redis out of order (its sessions push
    concurrently, after their own commits), and a busy process can lose some
    (the channel layer drops what overflows its capacity). A batch that comes
    before the one preceding it is held here, for at most ``HOLD_S``, until
    the gap fills; a gap still open then is read from the database once, for
    every socket — not by each socket, which under load would multiply the
    work by the number of sockets just when the process can least afford it.
    """

    HOLD_S = 0.05
    SETTLE_S = 0.25  # quiet this long after events came: check the database once for a lost last push

    def __init__(self, run_id: str, layer) -> None:
        self.run_id, self.layer = run_id, layer
        self.sockets: set[RunEventsConsumer] = set()
        self.channel: str | None = None
        self.reader: asyncio.Task | None = None
        self.ready = asyncio.Event()
        self.failed = False
        self.next_seq: int | None = None  # the first seq not handed out yet (None: nothing seen)
        self.held: dict[int, list[tuple[int, str]]] = {}  # batches waiting for a gap, by first seq
        self.hold_timer: asyncio.TimerHandle | None = None
        self.filler: asyncio.Task | None = None  # reading a gap from the database
        self.settle_timer: asyncio.TimerHandle | None = None

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
            frames = encoded(sorted(message["events"], key=lambda event: event["seq"]))
            if frames:
                self.arrive(frames)

    def expect(self, seq: int) -> None:
        """A socket has sent everything before ``seq``: the room starts from there if it has seen nothing."""
        if self.next_seq is None:
            self.next_seq = seq

    def arrive(self, frames: list[tuple[int, str]]) -> None:
        if self.filler is None and (self.next_seq is None or frames[0][0] <= self.next_seq):
            self.hand_out(frames)
            self.hand_out_held()
        else:
            self.held[frames[0][0]] = frames
            if self.hold_timer is None and self.filler is None:
                self.hold_timer = asyncio.get_running_loop().call_later(self.HOLD_S, self.fill)

    def hand_out_held(self) -> None:
        while self.held and min(self.held) <= self.next_seq:
            self.hand_out(self.held.pop(min(self.held)))
        if not self.held and self.hold_timer is not None:
            self.hold_timer.cancel()
            self.hold_timer = None

    def fill(self) -> None:
        self.hold_timer = None
        if self.filler is None:
            self.filler = asyncio.ensure_future(self.fill_from_database())

    async def fill_from_database(self) -> None:
        """Read from ``next_seq`` up to the first held batch (everything, when none is held) and hand it out.

        Batches arriving meanwhile are held, then handed out in order.
        """
        try:
            while True:
                until = min(self.held) if self.held else None
                if until is not None and until <= self.next_seq:
                    break  # the gap closed while the database was read
                events = await database_sync_to_async(_events_after)(self.run_id, self.next_seq - 1,
                                                                     REPLAY_PAGE, until)
                if events:
                    self.hand_out(encoded(events))
                if len(events) < REPLAY_PAGE:
                    if until is not None:
                        # Still missing is not in the database: go on (each socket checks again).
                        self.next_seq = max(self.next_seq, until)
                    break
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.warning("monitor room database read failed", extra={"run": self.run_id}, exc_info=True)
            for first in sorted(self.held):
                self.hand_out(self.held.pop(first))
        finally:
            self.filler = None
        self.hand_out_held()
        if self.held and self.hold_timer is None:  # a new gap opened while the database was read
            self.hold_timer = asyncio.get_running_loop().call_later(self.HOLD_S, self.fill)

    def hand_out(self, frames: list[tuple[int, str]]) -> None:
        self.next_seq = max(self.next_seq or 0, frames[-1][0] + 1)
        for socket in list(self.sockets):
            socket.offer(frames)
        if self.settle_timer is not None:
            self.settle_timer.cancel()
        self.settle_timer = asyncio.get_running_loop().call_later(self.SETTLE_S, self.settle)

    def settle(self) -> None:
        # The last pushes of a burst are the ones a busy process loses, and nothing after them shows
        # the gap: one read, a moment after the run went quiet, finds them (else the ping, 15 s later).
        self.settle_timer = None
        if self.filler is None and not self.held:
            self.filler = asyncio.ensure_future(self.fill_from_database())

    async def close(self) -> None:
        for timer in (self.hold_timer, self.settle_timer):
            if timer is not None:
                timer.cancel()
        if self.filler is not None:
            self.filler.cancel()
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


def room_expect(run_id: str, seq: int) -> None:
    room = _rooms.get((id(asyncio.get_running_loop()), run_id))
    if room is not None:
        room.expect(seq)


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
        team_ids, refused = await database_sync_to_async(_team_ids)(self.scope)
        if refused is not None:
            await self.close(*refused)
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
        room_expect(self.run_id, self.last_seq + 1)
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
            batches = [await self.inbox.get()]
            while not self.inbox.empty():  # all that waits goes out together
                batches.append(self.inbox.get_nowait())
            async with self.lock:
                ready: list[str] = []
                for frames in batches:
                    for seq, text in frames:
                        if seq > self.last_seq + 1:  # a gap: a lost push, or batches dropped above
                            await self.send_events(ready)
                            ready = []
                            await self._read_database(until=seq - 1)
                        if seq == self.last_seq + 1:
                            ready.append(text)
                            self.last_seq = seq
                await self.send_events(ready)
                if self.behind and self.inbox.empty():
                    # What was dropped may have been the run's last events: read them now, not at the next ping.
                    self.behind = False
                    await self._read_database()

    async def catch_up(self) -> None:
        async with self.lock:
            await self._read_database()

    async def _read_database(self, until: int | None = None) -> None:
        """Send the events after ``last_seq`` (up to ``until``) from the database, a page per query."""
        while True:
            page = await database_sync_to_async(_events_after)(
                self.run_id, self.last_seq, REPLAY_PAGE, None if until is None else until + 1)
            if page:
                await self.send_events([text for _, text in encoded(page)])
                self.last_seq = page[-1]["seq"]
            if len(page) < REPLAY_PAGE:
                return

    async def send_events(self, texts: list[str]) -> None:
        """Events (their JSON) in as few messages as ``MAX_MESSAGE_CHARS`` allows."""
        chunk: list[str] = []
        size = 0
        for text in texts:
            if chunk and size + len(text) > MAX_MESSAGE_CHARS:
                await self.send(text_data='{"message": "events", "events": [' + ", ".join(chunk) + "]}")
                chunk, size = [], 0
            chunk.append(text)
            size += len(text) + 2
        if chunk:
            await self.send(text_data='{"message": "events", "events": [' + ", ".join(chunk) + "]}")

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
        team_ids, refused = await database_sync_to_async(_team_ids)(self.scope)
        if refused is not None:
            await self.close(*refused)
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

    runs = (Run.objects.filter(team_id=team_id, is_eval=False)  # the cases of evals: on their eval's page
            .filter(Q(status__in=["queued", "running", "waiting"]) | Q(created_at__gte=since) | Q(finished_at__gte=since))
            .select_related("created_by").order_by("-created_at", "-pk")[:SINCE_LIMIT])
    return [RunOut.model_validate(run_out(run)).model_dump(mode="json") for run in reversed(list(runs))]


def _pick_team(team_ids: list[int], slug: str) -> int | None:
    from agents_app.models import Team

    if slug:
        return Team.objects.filter(id__in=team_ids, slug=slug).values_list("id", flat=True).first()
    return team_ids[0] if len(team_ids) == 1 else None
