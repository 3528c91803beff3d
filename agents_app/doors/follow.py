"""A run's events, in order, for a door that answers when the run has (the OpenAI-compatible endpoint, …).

:class:`RunFollower` follows a run as the monitor's sockets do: it joins the process's room for the run
(``agents_app.ws_rooms``: one Redis subscription per run and process, the events of each commit pushed
live), reads from the database what came before it joined and any gap a lost push leaves, and, when nothing
came for :data:`QUIET_S`, reads the database once more. It holds no thread while it waits: a door waiting
for a long run costs a coroutine and a queue.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from agents_app import ws_reads
from agents_app.ws_rooms import REPLAY_PAGE, RoomUnavailable, room_expect, room_join, room_leave

QUIET_S = 2.0  # nothing came this long: the database is read (a lost last push, Redis away)
ENDING = frozenset({"run_complete"})


class RunFollower:
    """The events of run ``run_id`` from its first (or after ``after``), ending with its ``run_complete``."""

    def __init__(self, run_id: str, *, after: int = -1) -> None:
        self.run_id, self.next_seq = run_id, after + 1
        self.inbox: asyncio.Queue[list[tuple[int, str]]] = asyncio.Queue()
        self.joined = False

    def offer(self, frames: list[tuple[int, str]]) -> None:
        """A committed batch from the room (the room's socket protocol)."""
        self.inbox.put_nowait(frames)

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        try:
            try:
                await room_join(self.run_id, self)
                self.joined = True
            except RoomUnavailable:
                pass  # Redis away: the database alone, read every QUIET_S
            async for event in self._read(before=None):
                yield event
                if event["type"] in ENDING:
                    return
            if self.joined:
                room_expect(self.run_id, self.next_seq)
            while True:
                try:
                    frames = await asyncio.wait_for(self.inbox.get(), timeout=QUIET_S)
                except asyncio.TimeoutError:
                    frames = []
                if not frames:
                    async for event in self._read(before=None):
                        yield event
                        if event["type"] in ENDING:
                            return
                    continue
                for seq, text in frames:
                    if seq < self.next_seq:
                        continue
                    if seq > self.next_seq:  # a lost push: what is missing is in the database
                        async for event in self._read(before=seq):
                            yield event
                            if event["type"] in ENDING:
                                return
                    event = json.loads(text)
                    self.next_seq = seq + 1
                    yield event
                    if event["type"] in ENDING:
                        return
        finally:
            if self.joined:
                await room_leave(self.run_id, self)

    async def _read(self, *, before: int | None) -> AsyncIterator[dict[str, Any]]:
        while True:
            events = await ws_reads.db_read(ws_reads._events_after)(self.run_id, self.next_seq - 1, REPLAY_PAGE,
                                                                     before)
            for event in events:
                self.next_seq = event["seq"] + 1
                yield event
            if len(events) < REPLAY_PAGE:
                return
