"""Start the test MCP server (demo.py) over HTTP or SSE on a free port, for the tests that need one."""

import socket
import subprocess
import sys
import time
from pathlib import Path

SERVER = str(Path(__file__).parent / "demo.py")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(mode: str) -> tuple[subprocess.Popen, int]:
    """``demo.py <mode> <port>`` started and answering; the caller terminates it."""
    port = free_port()
    process = subprocess.Popen([sys.executable, SERVER, mode, str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process, port
        except OSError:
            if time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"the MCP server ({mode}) did not start") from None
            time.sleep(0.1)
