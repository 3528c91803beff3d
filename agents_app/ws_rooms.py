"""One subscription per run and process: the sockets of a process that follow a run share one :class:`Room`.

A process's rooms share one Redis pub/sub connection per event loop (:class:`Subscriber`), on which the
workers publish each commit's events (``mas_core.events.run_channel``): the messages of every run stream
in on it, with no round trip per message. See ``agents_app.consumers`` for the protocol the sockets speak.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any


from agents_app import ws_reads
from mas_core import jsontext
from mas_core.events import live_redis_url, run_channel
from mas_core.loops import loop_local

if TYPE_CHECKING:
    from agents_app.consumers import RunEventsConsumer

REPLAY_PAGE = 500

logger = logging.getLogger(__name__)


def encoded(events: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """(seq, JSON) of each event: encoded once per process, whatever the number of sockets."""
    return [(event["seq"], jsontext.dumps(event)) for event in events]


class Room:
    """The sockets of one process that follow one run, fed by a single subscription.

    Fifty browsers on one run cost one Redis message and one JSON encoding
    per event, not fifty: the room reads the run's channel once and hands each
    socket the frames, already encoded. A socket that falls behind (its
    queue full) drops what it cannot take and reads it back from the
    database.

    Pushes of one run can reach Redis out of order (its sessions push
    concurrently, after their own commits), and a busy process can lose some
    (pub/sub keeps nothing while a subscription is broken). A batch that comes
    before the one preceding it is held here, for at most ``HOLD_S``, until
    the gap fills; a gap still open then is read from the database once, for
    every socket — not by each socket, which under load would multiply the
    work by the number of sockets just when the process can least afford it.
    """

    HOLD_S = 0.05
    SETTLE_S = 0.25  # quiet this long after events came: check the database once for a lost last push

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.sockets: set[RunEventsConsumer] = set()
        self.subscriber: Subscriber | None = None
        self.ready = asyncio.Event()
        self.failed = False
        self.next_seq: int | None = None  # the first seq not handed out yet (None: nothing seen)
        self.held: dict[int, list[tuple[int, str]]] = {}  # batches waiting for a gap, by first seq
        self.hold_timer: asyncio.TimerHandle | None = None
        self.filler: asyncio.Task | None = None  # reading a gap from the database
        self.settle_timer: asyncio.TimerHandle | None = None

    async def open(self) -> None:
        try:
            self.subscriber = subscriber()
            await self.subscriber.subscribe(run_channel(self.run_id), self)
        except Exception:
            self.failed = True
            raise
        finally:
            self.ready.set()  # sockets waiting to join learn the outcome either way

    def published(self, data: bytes) -> None:
        """A published batch of the run's events (a JSON list, from the subscriber)."""
        frames = encoded(sorted(json.loads(data), key=lambda event: event["seq"]))
        if frames:
            self.arrive(frames)

    def resubscribed(self, lost_at: float) -> None:
        """The subscription was lost and is back: what was published meanwhile is read from the database."""
        if self.filler is None and self.next_seq is not None:
            self.filler = asyncio.ensure_future(self.fill_from_database())

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
                events = await ws_reads.db_read(ws_reads._events_after)(self.run_id, self.next_seq - 1,
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
        if self.subscriber is not None:
            await self.subscriber.unsubscribe(run_channel(self.run_id), self)


class Subscriber:
    """One event loop's pub/sub connection: the channels its listeners follow (runs' rooms, teams' run
    lists), read by one task.

    A listener has ``published(data: bytes)`` and ``resubscribed(lost_at: float)``. :meth:`subscribe`
    returns once Redis confirmed the subscription, so a socket that subscribes and then reads the
    database misses nothing published in between. When the connection breaks, the reader reconnects
    (every second until Redis is back), subscribes again and tells each listener, which reads what it
    missed from the database.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.listeners: dict[str, set] = {}  # channel -> its listeners
        self.waiting: dict[str, asyncio.Future] = {}  # channel -> its confirmation
        self.lost: set[str] = set()  # channels subscribed again after a break
        self.lost_at = 0.0
        self.client = None
        self.pubsub = None
        self.reader: asyncio.Task | None = None
        self.commands = asyncio.Lock()  # SUBSCRIBE and UNSUBSCRIBE reach Redis in the order they were asked

    async def connect(self) -> None:
        import redis.asyncio
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        # No silent reconnection inside redis-py: a break must reach read(), which has the gap read back.
        self.client = redis.asyncio.Redis.from_url(live_redis_url(), socket_connect_timeout=2,
                                                   retry=Retry(NoBackoff(), 0))
        self.pubsub = self.client.pubsub()

    async def subscribe(self, channel: str, listener) -> None:
        listeners = self.listeners.setdefault(channel, set())
        first = not listeners
        listeners.add(listener)
        try:
            if first:
                confirmed = self.waiting[channel] = self.loop.create_future()
                async with self.commands:
                    if self.pubsub is None:
                        await self.connect()
                    await self.pubsub.subscribe(channel)
                if self.reader is None:
                    self.reader = asyncio.ensure_future(self.read())
            else:
                confirmed = self.waiting.get(channel)
            if confirmed is not None:
                await asyncio.wait_for(asyncio.shield(confirmed), timeout=5)
        except BaseException:
            await self.unsubscribe(channel, listener)
            raise

    async def unsubscribe(self, channel: str, listener) -> None:
        listeners = self.listeners.get(channel)
        if listeners is None or listener not in listeners:
            return
        listeners.discard(listener)
        if listeners:
            return
        del self.listeners[channel]
        self.waiting.pop(channel, None)
        if not self.listeners:
            await self.close()
            return
        try:
            async with self.commands:
                await self.pubsub.unsubscribe(channel)
        except Exception:  # noqa: BLE001 - the connection broke: the reader subscribes only to live channels again
            logger.debug("monitor unsubscribe failed", exc_info=True)

    async def close(self) -> None:
        if _subscribers.get(id(self.loop)) is self:
            del _subscribers[id(self.loop)]
        if self.reader is not None and self.reader is not asyncio.current_task():
            self.reader.cancel()
        for closing in (self.pubsub, self.client):
            if closing is not None:
                try:
                    await closing.aclose()
                except Exception:  # noqa: BLE001
                    logger.debug("monitor subscriber close failed", exc_info=True)

    async def read(self) -> None:
        while True:
            try:
                message = await self.pubsub.get_message(timeout=None)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.warning("monitor subscription lost; reconnecting", exc_info=True)
                await self.reconnect()
                continue
            if message is not None:
                self.dispatch(message)

    def dispatch(self, message: dict[str, Any]) -> None:
        kind, channel = message["type"], message["channel"]
        channel = channel.decode() if isinstance(channel, bytes) else channel
        if kind == "message":
            for listener in list(self.listeners.get(channel, ())):
                try:
                    listener.published(message["data"])
                except Exception:  # noqa: BLE001 - one listener's bad message must not stop the others
                    logger.warning("monitor message not handled", extra={"channel": channel}, exc_info=True)
        elif kind == "subscribe":
            confirmed = self.waiting.pop(channel, None)
            if confirmed is not None and not confirmed.done():
                confirmed.set_result(None)
            if channel in self.lost:
                self.lost.discard(channel)
                for listener in list(self.listeners.get(channel, ())):
                    listener.resubscribed(self.lost_at)

    async def reconnect(self) -> None:
        self.lost_at = time.time()
        while True:
            await asyncio.sleep(1)
            old = (self.pubsub, self.client)
            try:
                async with self.commands:
                    await self.connect()
                    channels = list(self.listeners)
                    self.lost = set(channels)
                    if channels:
                        await self.pubsub.subscribe(*channels)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.warning("monitor subscription: Redis still away", exc_info=True)
                continue
            finally:
                for closing in old:
                    if closing is not None and closing not in (self.pubsub, self.client):
                        try:
                            await closing.aclose()
                        except Exception:  # noqa: BLE001 - already broken
                            pass
            return


_subscribers: dict[int, Subscriber] = {}


def subscriber() -> Subscriber:
    """The running loop's subscriber (made on first use, closed with its last listener)."""
    return loop_local(_subscribers, Subscriber)


_rooms: dict[tuple[int, str], Room] = {}


class RoomUnavailable(Exception):
    """Redis refused the run's subscription (Redis down)."""


async def room_join(run_id: str, socket: "RunEventsConsumer") -> None:
    key = (id(asyncio.get_running_loop()), run_id)
    room = _rooms.get(key)
    if room is None:
        room = _rooms[key] = Room(run_id)
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
            raise RoomUnavailable("Redis is unavailable")


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
