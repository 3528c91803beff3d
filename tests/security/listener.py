"""A TCP listener on 127.0.0.1 that records every connection and what was sent on it (a probe's receiver)."""

from __future__ import annotations

import socket
import threading
import time


class Listener:
    """Accepts connections, reads each request's head, answers 404 and closes; ``received`` holds the heads."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.received: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                data = b""
                try:
                    while b"\r\n\r\n" not in data and len(data) < 65536:
                        chunk = conn.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                except OSError:
                    pass
                self.received.append(data.decode(errors="replace"))

    def settle(self, seconds: float = 0.3) -> list[str]:
        """What was received, after a moment for a connection in flight to land."""
        time.sleep(seconds)
        return list(self.received)

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
        self._thread.join(5)
