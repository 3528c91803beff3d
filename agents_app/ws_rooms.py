"""One subscription per run and process: the sockets of a process that follow a run share one :class:`Room`.

See ``agents_app.consumers`` for the protocol the sockets speak.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

from channels.db import database_sync_to_async

from agents_app import ws_reads
from mas_core.events import run_group

if TYPE_CHECKING:
    from agents_app.consumers import RunEventsConsumer

REPLAY_PAGE = 500

logger = logging.getLogger(__name__)


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
                events = await database_sync_to_async(ws_reads._events_after)(self.run_id, self.next_seq - 1,
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
