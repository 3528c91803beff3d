"""A real daphne serving the project against the test database, measured from outside.

For tests of what a request does to the web process itself: its answer over
a real socket, how long it took, and how much the process grew (VmRSS).
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class WebServer:
    def __init__(self, *, label: str = "limits", env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.env = env or {}
        self.log_path = Path(settings.VAR_DIR) / "log" / f"test-daphne-{label}.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "mas_project.asgi:application"],
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "mas_project.settings_test", "DJANGO_ALLOW_ASYNC_UNSAFE": "",
                 "MAS_DATABASE_NAME": settings.DATABASES["default"]["NAME"],
                 "MAS_CELERY_QUEUE": settings.CELERY_TASK_DEFAULT_QUEUE, **self.env},
            cwd=settings.BASE_DIR, stdout=open(self.log_path, "ab"),  # noqa: SIM115 - the child writes to it
            stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"daphne did not start; see {self.log_path}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)

    def rss_kb(self) -> int:
        """The daphne process's resident memory, in kB."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS line")

    def cpu_s(self) -> float:
        """The CPU time the daphne process has used (user and system, all its threads), in seconds: unlike a
        request's wall time it does not grow when other processes load the machine."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def request(self, method: str, path: str, body: bytes | str | None = None, *, token: str = "",
                content_type: str = "", timeout: float = 30, headers: dict[str, str] | None = None) -> Answer:
        headers = dict(headers or {})
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        if isinstance(body, str):
            body = body.encode()
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            started = time.monotonic()
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            content = response.read()
            seconds = time.monotonic() - started
            return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, content, seconds)
        finally:
            connection.close()
