"""A stdio MCP server's stderr: logged line by line, redacted and bounded, its last lines kept for errors."""

from __future__ import annotations

import contextvars
import logging
import os
import threading
from collections.abc import Callable

logger = logging.getLogger("tools_app.mcp.client")
OVERLONG = b"[a line of more than 64 KiB, not shown]"


class StderrReader:
    """A stdio server's stderr, read in a thread of its own: each line logged (redacted, bounded), the last
    few kept for the error that says why the server did not start. Always drained, so the server never
    blocks on a full pipe."""

    MAX_LINES_LOGGED = 200
    MAX_LINE_CHARS = 1000
    MAX_LINE_BYTES = 64 * 1024  # a longer "line" is not logged at all: cutting it could cut a secret in two
    TAIL_LINES = 5

    def __init__(self, *, server: str, team: str, redact: Callable[[str], str]) -> None:
        self.server, self.team, self.redact = server, team, redact
        read_fd, write_fd = os.pipe()
        self.writer = os.fdopen(write_fd, "w")  # the server's stderr; ours is closed once it is spawned
        self._lock = threading.Lock()
        self._tail: list[str] = []
        # In the connection's context: its lines carry the run and session ids (mas_core.logs.bind).
        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._read, read_fd),
                                        name=f"mcp-stderr:{server}", daemon=True)
        self._thread.start()

    def spawned(self) -> None:
        """The server has its own copy of the pipe now (or never will): ours goes, so the end of the server
        is the end of the pipe."""
        if not self.writer.closed:
            self.writer.close()

    def finished(self, timeout: float) -> None:
        self._thread.join(timeout)

    def tail(self) -> str:
        with self._lock:
            return " | ".join(self._tail)[-1000:]

    def _read(self, read_fd: int) -> None:
        logged = skipped = 0
        pending = b""
        overlong = False
        with os.fdopen(read_fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                if len(pending) > self.MAX_LINE_BYTES:
                    pending, overlong = b"", True
                for raw in lines:
                    if overlong:  # the end of a line whose start was dropped: a piece of it is not shown either
                        overlong, raw = False, OVERLONG
                    logged, skipped = self._line(raw, logged, skipped)
            if pending or overlong:
                logged, skipped = self._line(OVERLONG if overlong else pending, logged, skipped)
        if skipped:
            logger.info("mcp server stderr: more lines not logged",
                        extra={"server": self.server, "team": self.team, "lines": skipped})

    def _line(self, raw: bytes, logged: int, skipped: int) -> tuple[int, int]:
        # Redacted whole, then cut: a cut first could leave half a secret.
        text = self.redact(raw.decode("utf-8", errors="replace").rstrip("\r"))[:self.MAX_LINE_CHARS]
        if not text.strip():
            return logged, skipped
        with self._lock:
            self._tail = [*self._tail, text[:300]][-self.TAIL_LINES:]
        if logged >= self.MAX_LINES_LOGGED:
            return logged, skipped + 1
        logger.info("mcp server stderr", extra={"server": self.server, "team": self.team, "line": text})
        return logged + 1, skipped
