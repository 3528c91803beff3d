"""Starting and stopping real Celery worker processes for tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings


@dataclass
class Worker:
    name: str
    process: subprocess.Popen
    log_path: Path
    queue: str = ""  # the pool it serves

    def __getitem__(self, key):  # fixtures used to hand out a dict
        return {"name": self.name, "process": self.process}[key]


def start_worker(label: str, *, queue: str | None = None, env: dict[str, str] | None = None,
                 concurrency: int = 64) -> Worker:
    """Start ``celery worker`` against the test database; wait until it answers a ping."""
    from mas_project.celery import app

    name = f"{label}@localhost"
    log_dir = Path(settings.VAR_DIR) / "log"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"test-worker-{label}.log"
    queue = queue or settings.CELERY_TASK_DEFAULT_QUEUE
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "mas_project", "worker", "-Q", queue, "--pool", "threads",
         "--concurrency", str(concurrency), "-n", name, "-l", "warning", "--without-gossip", "--without-mingle"],
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "mas_project.settings_test",
            "MAS_DATABASE_NAME": settings.DATABASES["default"]["NAME"],
            "MAS_CELERY_QUEUE": queue,
            **(env or {}),
        },
        stdout=open(log_path, "ab"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"celery worker exited with {process.returncode}; see {log_path}")
        if app.control.ping(destination=[name], timeout=0.5):
            return Worker(name=name, process=process, log_path=log_path, queue=queue)
    process.kill()
    raise RuntimeError(f"celery worker {name} did not answer within 60 s; see {log_path}")


def stop_worker(worker: Worker, *, sig: int = signal.SIGTERM) -> None:
    if worker.process.poll() is not None:
        return
    os.killpg(worker.process.pid, sig)
    try:
        worker.process.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(worker.process.pid, signal.SIGKILL)
        worker.process.wait(10)


def kill_mid_run_and_resume(label: str, *, queue: str, stale_s: float, start, reached, what: str,
                            env: dict[str, str] | None = None):
    """A worker SIGKILLed in the middle of a run, and another that resumes it; returns the settled run.

    ``start()`` starts the run once the first worker answers; the worker is killed as soon as ``reached(run)``
    holds (``what`` names that moment). After the staleness window a second worker takes the run over. Both
    workers have ``env`` besides.
    """
    from agents_app.models import Run
    from tests.runs import wait_until

    env = {**(env or {}), "MAS_SESSION_STALE_S": str(stale_s)}
    first = start_worker(f"{label}-a-{os.getpid()}", queue=queue, env=env)
    try:
        run = start()
        wait_until(lambda: reached(run), 30, what)
        os.killpg(first.process.pid, signal.SIGKILL)
        first.process.wait(10)
    finally:
        stop_worker(first)
    assert Run.objects.get(pk=run.pk).status == "running"
    time.sleep(stale_s + 0.5)

    second = start_worker(f"{label}-b-{os.getpid()}", queue=queue, env=env)
    try:
        return wait_until(lambda: Run.objects.filter(pk=run.pk, status__in=["succeeded", "failed"]).first(), 60,
                          "the run to finish")
    finally:
        stop_worker(second)
