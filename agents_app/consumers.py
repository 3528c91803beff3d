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
check, see ``mas_core/ws_security.py``), or no longer (``AccessWatch``: the
token revoked, the member removed, signed out; within ``MAS_WS_ACCESS_CHECK_S``), 4429 a wrong token from an
address past ``MAS_AUTH_FAILURES_PER_MIN`` failed token authentications this
minute (HTTP and websockets count together; the reason says when to retry),
4404 no such run in the caller's team (or no such team, or a path under
``/ws/`` that names no socket), 4400 a malformed ``after`` or ``since``, or an
``after`` beyond the run's last event (the reason says which), 1011 the channel layer could not be joined (the
client retries).
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from agents_app import ws_reads
from agents_app.ws_rooms import REPLAY_PAGE, RoomUnavailable, encoded, room_expect, room_join, room_leave, subscriber
from mas_core.events import team_runs_channel
from mas_core.loops import loop_local

MAX_MESSAGE_CHARS = 256_000  # events per message stop here (an event's data is bounded well below)

logger = logging.getLogger(__name__)


def _ping_s() -> float:
    return float(getattr(settings, "MAS_WS_PING_S", 15))


def _access_check_s() -> float:
    return float(getattr(settings, "MAS_WS_ACCESS_CHECK_S", 1))


class Socket(AsyncWebsocketConsumer):
    """A MAS socket. Its events come from Redis pub/sub (``ws_rooms``), never through the channel layer, so it
    listens on none: Channels would give every socket a channel of the layer and a loop of blocking pops on
    Redis to read it — one more Redis connection per socket, for nothing, and a pop that, cancelled as its
    event loop ends, could keep the loop from closing (a test hung so in ``asyncio.run``'s task cancelling).
    """

    channel_layer_alias = None  # an alias with no layer: get_channel_layer answers None


ACCESS_GONE = "your access to this team ended (token revoked, membership removed or role lowered, or signed out)"


class AccessWatch:
    """Closes a socket 4401 once what let it in no longer holds (``ws_reads._access_holds``), checked every
    ``MAS_WS_ACCESS_CHECK_S``: a revoked token, a removed member, a token above its member's lowered role,
    a user signed out or deactivated. A role lowered but still allowed to view keeps its socket: every role
    may watch its team's runs. Consumers set ``team_id``, list their other tasks in ``tasks`` and call
    :meth:`watch_access` once in and :meth:`unwatch_access` on disconnect.

    The sockets of a process are checked together (:class:`AccessChecks`): one thread hop per period, and
    one check per credential and team however many sockets share it — fifty sockets on one token cost one
    check a second, not fifty."""

    team_id: int
    tasks: list

    def access_key(self) -> tuple:
        """What the check depends on: the bearer token, or the session user and session (and the team)."""
        token = ws_reads._bearer(self.scope)
        if token is not None:
            return ("token", token, self.team_id)
        user, session = self.scope.get("user"), self.scope.get("session")
        return ("session", getattr(user, "pk", None), getattr(session, "session_key", None), self.team_id)

    async def access_holds(self) -> bool:
        return await ws_reads.db_read(ws_reads._access_holds)(self.scope, self.team_id)

    def watch_access(self) -> None:
        access_checks().add(self)

    def unwatch_access(self) -> None:
        checks = _access_checks.get(id(asyncio.get_running_loop()))
        if checks is not None:
            checks.discard(self)

    async def close_for_access(self) -> None:
        self.unwatch_access()
        current = asyncio.current_task()
        for task in [*self.tasks, getattr(self, "flusher", None)]:
            if task is not None and task is not current:
                task.cancel()
        self.revoked = True
        await self.close(code=4401, reason=ACCESS_GONE)


class AccessChecks:
    """The access checks of one event loop's sockets: every ``MAS_WS_ACCESS_CHECK_S``, each distinct
    credential is checked once, in one thread hop for all, and the sockets whose access ended are closed.
    A socket is thus closed at most one period (plus the check) after its access ended, as when each socket
    checked on its own."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.sockets: set[AccessWatch] = set()
        self.task: asyncio.Task | None = None

    def add(self, socket: AccessWatch) -> None:
        self.sockets.add(socket)
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self.run())

    def discard(self, socket: AccessWatch) -> None:
        self.sockets.discard(socket)
        if not self.sockets and self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()
            self.task = None

    async def run(self) -> None:
        while self.sockets:
            await asyncio.sleep(_access_check_s())
            sockets = list(self.sockets)
            checks = {socket.access_key(): (socket.scope, socket.team_id) for socket in sockets}
            try:
                holds = await ws_reads.db_read(ws_reads._access_holds_all)(checks)
            except Exception:  # noqa: BLE001 - the database is away (a restart): asked again next period
                logger.warning("websocket access check failed", exc_info=True)
                continue
            for socket in sockets:
                if socket in self.sockets and not holds[socket.access_key()]:
                    self.sockets.discard(socket)
                    asyncio.ensure_future(socket.close_for_access())
        self.task = None


_access_checks: dict[int, AccessChecks] = {}


def access_checks() -> AccessChecks:
    return loop_local(_access_checks, AccessChecks)


# -- /ws/runs/<id>/ ---------------------------------------------------------------------------


class RunEventsConsumer(AccessWatch, Socket):
    QUEUE = 1000  # live batches a socket may have waiting before it reads from the database instead

    async def connect(self) -> None:
        self.run_id = str(self.scope["url_route"]["kwargs"]["run_id"])
        self.last_seq = 0
        self.joined = False
        self.tasks: list[asyncio.Task] = []
        self.revoked = False
        self.lock = asyncio.Lock()  # live batches and the pinger's catch-up take turns
        self.inbox: asyncio.Queue = asyncio.Queue(self.QUEUE)
        self.dropped = 0  # live batches dropped because the inbox was full (read back from the database)
        self.behind = False  # batches were dropped since the last read from the database
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        await self.accept()
        team_ids, refused = await ws_reads.db_read(ws_reads._team_ids)(self.scope)
        if refused is not None:
            await self.close(*refused)
            return
        try:
            self.last_seq = max(0, int(query.get("after", ["0"])[0] or 0))
        except ValueError:
            await self.close(code=4400, reason="after must be a whole number: the last seq the client has")
            return
        found = await ws_reads.db_read(ws_reads._run_team)(self.run_id, team_ids)
        if found is None:
            await self.close(code=4404)
            return
        self.team_id, last = found
        if self.last_seq > last:
            # Events the run never had: the client is confused (another run's seq, a typo); answering with the
            # events after it would silently skip everything up to that number once the run got there.
            await self.close(code=4400, reason=f"after={self.last_seq} is beyond this run's last event ({last})")
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
        self.watch_access()

    async def disconnect(self, code) -> None:
        self.unwatch_access()
        for task in self.tasks:
            task.cancel()
        if self.joined:
            await room_leave(self.run_id, self)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        return None  # the stream is one-way; clients reconnect with ?after= to resume

    def offer(self, frames: list[tuple[int, str]]) -> None:
        """A committed batch from the room; when the inbox is full it is dropped (read back later)."""
        if self.revoked:
            return
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
            page = await ws_reads.db_read(ws_reads._events_after)(
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


class TeamRunsConsumer(AccessWatch, Socket):
    """The team's runs as they change; the team is the token's, or ``?team=<slug>`` among the user's."""

    FLUSH_S = 0.25

    async def connect(self) -> None:
        self.group = None
        self.pending: set[str] = set()
        self.flusher: asyncio.Task | None = None
        self.tasks: list[asyncio.Task] = []
        self.revoked = False
        await self.accept()
        team_ids, refused = await ws_reads.db_read(ws_reads._team_ids)(self.scope)
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
        self.team_id = await ws_reads.db_read(ws_reads._pick_team)(team_ids, query.get("team", [""])[0])
        if self.team_id is None:
            await self.close(code=4404)
            return
        # Subscribe first, then read what changed since the page was drawn: nothing falls in between.
        try:
            await subscriber().subscribe(team_runs_channel(self.team_id), self)
        except Exception:  # noqa: BLE001 - Redis is away: the client retries
            logger.warning("run list subscription failed", exc_info=True)
            await self.close(code=1011)
            return
        self.group = team_runs_channel(self.team_id)
        await self.send(text_data=json.dumps({"message": "subscribed", "team": self.team_id}))
        if since is not None:
            for summary in await ws_reads.db_read(ws_reads._runs_since)(self.team_id, since):
                await self.send(text_data=json.dumps({"message": "run", "run": summary}, default=str))
        self.watch_access()

    async def disconnect(self, code) -> None:
        self.unwatch_access()
        for task in self.tasks:
            task.cancel()
        if self.flusher is not None:
            self.flusher.cancel()
        if self.group is not None:
            await subscriber().unsubscribe(self.group, self)

    def published(self, data: bytes) -> None:
        """A run of the team changed (its id, from ``ws_rooms.Subscriber``)."""
        # Totals change with every model call: send each run at most every FLUSH_S.
        if self.revoked:
            return
        self.pending.add(data.decode())
        if self.flusher is None or self.flusher.done():
            self.flusher = asyncio.ensure_future(self.flush_soon())

    def resubscribed(self, lost_at: float) -> None:
        """The subscription broke and is back: the runs that changed meanwhile (or still go) are sent again."""
        self.tasks.append(asyncio.ensure_future(self.send_since(datetime.fromtimestamp(lost_at - 1, tz=UTC))))

    async def send_since(self, since: datetime) -> None:
        for summary in await ws_reads.db_read(ws_reads._runs_since)(self.team_id, since):
            self.pending.add(summary["id"])
        if self.pending and (self.flusher is None or self.flusher.done()):
            self.flusher = asyncio.ensure_future(self.flush_soon())

    async def flush_soon(self) -> None:
        # Loops until nothing is pending: a change heard while a batch is being sent goes in the next one.
        while self.pending:
            await asyncio.sleep(self.FLUSH_S)
            runs, self.pending = self.pending, set()
            # Checked before each batch too, not only every MAS_WS_ACCESS_CHECK_S: a run started after the
            # revocation is never sent.
            if not await self.access_holds():
                await self.close_for_access()
                return
            for run_id in sorted(runs):
                summary = await ws_reads.db_read(ws_reads._run_summary)(run_id, self.team_id)
                if summary is not None:
                    await self.send(text_data=json.dumps({"message": "run", "run": summary}, default=str))


# -- any other path -------------------------------------------------------------------------------


class NoSuchSocketConsumer(Socket):
    """A path no socket lives at: closed 4404, as an unknown run is (Channels' router would raise: a 500)."""

    async def connect(self) -> None:
        await self.accept()
        await self.close(code=4404)
