"""scripts/workers.py: one Celery worker process per core, as docker-compose.yml's `worker` service runs them.

``run`` starts ``MAS_WORKERS`` real workers against the test database on a
queue of their own; ``ping`` (the service's healthcheck) answers 0 only while
every one of them answers. SIGTERM stops them all; a worker that dies takes
the others and the script down with it, so the container restarts.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

SCRIPT = Path(settings.BASE_DIR) / "scripts" / "workers.py"


@pytest.fixture
def workers_module():
    spec = importlib.util.spec_from_file_location("mas_workers_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_one_worker_per_core_unless_mas_workers_says(workers_module, monkeypatch):
    monkeypatch.delenv("MAS_WORKERS", raising=False)
    assert workers_module.worker_count() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("MAS_WORKERS", "")
    assert workers_module.worker_count() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("MAS_WORKERS", "3")
    assert workers_module.worker_count() == 3
    for wrong in ("0", "-1", "two"):
        monkeypatch.setenv("MAS_WORKERS", wrong)
        with pytest.raises(SystemExit, match=f"MAS_WORKERS must be a whole number, 1 or more, not '{wrong}'"):
            workers_module.worker_count()


def test_each_worker_is_a_threads_pool_celery_worker_with_its_own_name(workers_module, monkeypatch):
    monkeypatch.delenv("MAS_CELERY_QUEUE", raising=False)
    monkeypatch.delenv("MAS_WORKER_CONCURRENCY", raising=False)
    assert workers_module.worker_argv(1) == [
        "celery", "-A", "mas_project", "worker", "-l", "info", "-Q", "mas", "--pool", "threads",
        "--concurrency", "256", "-n", f"mas-worker-1@{socket.gethostname()}"]
    monkeypatch.setenv("MAS_CELERY_QUEUE", "other")
    monkeypatch.setenv("MAS_WORKER_CONCURRENCY", "8")
    assert workers_module.worker_argv(0, celery="/bin/celery", log_level="warning") == [
        "/bin/celery", "-A", "mas_project", "worker", "-l", "warning", "-Q", "other", "--pool", "threads",
        "--concurrency", "8", "-n", f"mas-worker-0@{socket.gethostname()}"]


def children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in {"Z", "X", "x"}


def test_run_starts_them_ping_checks_every_one_and_they_stop_together(tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mas_project.settings_test",
           "MAS_DATABASE_NAME": settings.DATABASES["default"]["NAME"],
           "MAS_CELERY_QUEUE": f"{settings.CELERY_TASK_DEFAULT_QUEUE}-workers", "MAS_WORKERS": "2",
           "MAS_WORKER_CONCURRENCY": "4", "MAS_LOG_LEVEL": "WARNING"}

    def ping(*seconds: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(SCRIPT), "ping", *seconds], env=env, capture_output=True, text=True,
                              timeout=60, check=False)

    def start() -> tuple[subprocess.Popen, list[int]]:
        process = subprocess.Popen([sys.executable, str(SCRIPT), "run"], env=env, stdout=open(log, "ab"),  # noqa: SIM115
                                   stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 90
        while len(app.control.ping(destination=names, timeout=0.5)) < 2:
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        answer = ping()
        assert (answer.returncode, answer.stdout) == (0, "2 worker(s) answered\n")
        return process, children(process.pid)

    from mas_project.celery import app

    log = tmp_path / "workers.log"
    host = socket.gethostname()
    names = [f"mas-worker-0@{host}", f"mas-worker-1@{host}"]
    process, pids = start()
    try:
        assert len(pids) == 2
        # Ordinary celery workers, each named, in a process group of its own (a signal reaches it once).
        for i, pid in enumerate(pids):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert cmdline[-3:-1] == [b"-n", f"mas-worker-{i}@{host}".encode()]
            assert os.getpgid(pid) == pid
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
        assert [gone(pid) for pid in pids] == [True, True]
        missing = ping("1")
        assert (missing.returncode, missing.stderr) == (1, f"no answer from mas-worker-0@{host}, mas-worker-1@{host}\n")

        # One dies: the other is stopped and the script exits as a shell reports a death by SIGKILL.
        process, pids = start()
        os.kill(pids[1], signal.SIGKILL)
        assert process.wait(60) == 128 + signal.SIGKILL
        assert [gone(pid) for pid in pids] == [True, True]
        assert f"[mas] worker pid {pids[1]} exited with -9: stopping the others" in log.read_text()
    finally:
        if process.poll() is None:
            for pid in children(process.pid):
                os.kill(pid, signal.SIGKILL)
            process.kill()
            process.wait(10)
