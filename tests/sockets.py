"""The websocket communicator the suite's in-process socket tests use."""

from __future__ import annotations

from channels.testing import WebsocketCommunicator


class Communicator(WebsocketCommunicator):
    """channels' test communicator with 10 s for the handshake: its default 1 s is missed on a busy machine (the
    consumer authenticates in a thread)."""

    async def connect(self, timeout: float = 10):
        return await super().connect(timeout)
