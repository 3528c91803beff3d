#!/usr/bin/env python3
"""One Celery worker process per core: what `make demo` and docker-compose.yml run.

A worker process runs its sessions on one asyncio loop, so one process uses
at most one core (the GIL). This script runs ``MAS_WORKERS`` of them (default:
the cores it may run on, ``os.sched_getaffinity``), each an ordinary
``celery worker`` with its own node name ``mas-worker-<i>@<host>``:

    workers.py run      start them in the foreground (the compose `worker` service): SIGTERM or
                        SIGINT goes to every one; when one exits, the others are stopped and
                        this script exits with its status, so the container restarts
    workers.py ping [S] exit 0 only if every one of them answers a Celery ping within S seconds
                        (default 10; the healthcheck)

`scripts/services.py` starts the same processes in the background for `make
demo`, one log each (var/log/worker-<i>.log). Threads per process:
``MAS_WORKER_CONCURRENCY`` (default 256); queue: ``MAS_CELERY_QUEUE`` (mas).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONCURRENCY = "256"


def worker_count() -> int:
    """``MAS_WORKERS`` if set (1 or more), else the cores this process may run on (a container's
    ``--cpuset-cpus``; a CPU quota such as ``--cpus`` is not seen: set MAS_WORKERS then)."""
    value = os.environ.get("MAS_WORKERS", "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            sys.exit(f"[mas] MAS_WORKERS must be a whole number, 1 or more, not {value!r}")
        return int(value)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def node_name(index: int) -> str:
    return f"mas-worker-{index}@{socket.gethostname()}"


def worker_argv(index: int, *, celery: str = "celery", log_level: str = "info") -> list[str]:
    """The command line of worker ``index``."""
    return [
        celery, "-A", "mas_project", "worker", "-l", log_level,
        "-Q", os.environ.get("MAS_CELERY_QUEUE", "mas"),
        # A Celery thread only waits while its session runs on the process's asyncio
        # loop: threads are cheap, and they bound the process's concurrent sessions.
        "--pool", "threads", "--concurrency", os.environ.get("MAS_WORKER_CONCURRENCY", CONCURRENCY),
        "-n", node_name(index),
    ]


def run() -> int:
    """Start every worker, forward SIGTERM/SIGINT to them, and return when they are gone."""
    count = worker_count()
    celery = str(Path(sys.executable).parent / "celery")
    if not os.path.exists(celery):
        celery = "celery"
    children: list[subprocess.Popen] = []
    stopping = False

    def stop(signum: int, _frame=None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # Each in a process group of its own: a signal reaches a worker once, from here (a terminal's
    # Ctrl-C sent to the whole group as well would be a second SIGINT, Celery's cold shutdown).
    children.extend(subprocess.Popen(worker_argv(i, celery=celery), cwd=ROOT, process_group=0)
                    for i in range(count))
    if stopping:  # a signal that came while they started
        stop(signal.SIGTERM)
    print(f"[mas] {count} worker process(es): " + ", ".join(
        f"{node_name(i)} (pid {child.pid})" for i, child in enumerate(children)), flush=True)
    status = 0
    while True:
        ended = [child for child in children if child.poll() is not None]
        if len(ended) == len(children):
            return status
        if ended and not stopping:
            # One died: stop the rest, so the container (or whoever runs this) restarts all of them.
            code = ended[0].returncode
            status = 128 - code if code < 0 else code or 1  # killed by signal N: 128 + N, as a shell says
            print(f"[mas] worker pid {ended[0].pid} exited with {ended[0].returncode}: stopping the others",
                  flush=True)
            stop(signal.SIGTERM)
        time.sleep(0.2)


def ping(timeout: float = 10) -> int:
    """0 when every worker answers a ping within ``timeout``; 1 with the missing ones named."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mas_project.settings")
    from mas_project.celery import app

    expected = {node_name(i) for i in range(worker_count())}
    answered: set[str] = set()
    for reply in app.control.ping(destination=sorted(expected), timeout=timeout) or []:
        answered.update(reply)
    missing = sorted(expected - answered)
    if missing:
        print(f"no answer from {', '.join(missing)}", file=sys.stderr)
        return 1
    print(f"{len(expected)} worker(s) answered")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["run"]:
        sys.exit(run())
    if sys.argv[1:2] == ["ping"] and len(sys.argv) <= 3:
        sys.exit(ping(*(float(arg) for arg in sys.argv[2:])))
    sys.exit(__doc__)
