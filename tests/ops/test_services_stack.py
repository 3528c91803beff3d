"""`make demo`'s stack as scripts/services.py runs it: daphne, worker processes and beat; `stop` ends them all.

The script runs for real against the test database and Redis database, on a
port and queue of its own, with its pids and logs in a temporary folder. Beat
is what fires schedule triggers: a workflow due every minute starts within
its minute, from beat's tick to the worker's task, with no test code between.
Two worker processes (``MAS_WORKERS=2``; by default one per core), each with
its own node name, pid file and log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from agents_app.kinds import AGENT

from workflows_app.kinds import WORKFLOW
from mas_core.definitions.services import definition_parse, definition_save
from tests.web import free_port

pytestmark = pytest.mark.django_db(transaction=True)

EVERY_MINUTE = """---
name: Every minute
trigger: schedule
schedule: '* * * * *'
steps:
  - id: tick
    agent: ticker
---
"""


def services(command: str, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "scripts/services.py", command], cwd=settings.BASE_DIR, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def pid_of(state: Path, name: str) -> int:
    return int((state / "run" / f"{name}.pid").read_text())


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in {"Z", "X", "x"}


def test_the_stack_starts_two_workers_and_beat_which_fires_a_schedule_and_stop_ends_them_all(team_a, tmp_path):
    from workflows_app.models import WorkflowRun

    definition_save(kind=AGENT, team=team_a, parsed=definition_parse(
        kind=AGENT, team=team_a, text="---\nname: Ticker\n---\n\nYou tick.\n"))
    definition_save(kind=WORKFLOW, team=team_a, parsed=definition_parse(kind=WORKFLOW, team=team_a, text=EVERY_MINUTE))
    port = free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mas_project.settings_test",
           "MAS_DATABASE_NAME": settings.DATABASES["default"]["NAME"], "MAS_SERVICES_DIR": str(tmp_path),
           "MAS_PORT": str(port), "MAS_CELERY_QUEUE": f"{settings.CELERY_TASK_DEFAULT_QUEUE}-stack",
           "MAS_WORKER_CONCURRENCY": "4", "MAS_WORKERS": "2", "MAS_LOG_LEVEL": "WARNING"}
    host = os.uname().nodename
    names = ("web", "worker-0", "worker-1", "beat")
    try:
        started = services("start", env)
        assert started.returncode == 0, started.stdout + started.stderr
        assert [line.split(" (pid")[0] for line in started.stdout.splitlines()] == [
            "[mas] started web", "[mas] started worker-0", "[mas] started worker-1", "[mas] started beat"]
        assert started.stdout.splitlines()[2].endswith(f"log {tmp_path / 'log' / 'worker-1.log'}")
        waited = services("wait", env)
        assert waited.returncode == 0, waited.stdout + waited.stderr
        assert f"[mas] health http://127.0.0.1:{port}/api/health: ok" in waited.stdout
        status = services("status", env).stdout.splitlines()
        pids = {name: pid_of(tmp_path, name) for name in names}
        assert status[:4] == [f"{name:<9} running, pid {pids[name]}" for name in names]
        for i in (0, 1):
            cmdline = Path(f"/proc/{pids[f'worker-{i}']}/cmdline").read_bytes().decode().rstrip("\0").split("\0")
            assert cmdline[1:] == [  # [0]: the Python of the celery script's #! line
                str(Path(sys.executable).parent / "celery"), "-A", "mas_project", "worker", "-l", "info",
                "-Q", env["MAS_CELERY_QUEUE"], "--pool", "threads", "--concurrency", "4", "-n", f"mas-worker-{i}@{host}"]
            assert (tmp_path / "log" / f"worker-{i}.log").stat().st_size > 0
        assert "beat" in Path(f"/proc/{pids['beat']}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        # Started again: nothing twice.
        again = services("start", env)
        assert [line.split(" (pid")[0] for line in again.stdout.splitlines()] == [
            f"[mas] {name} already running" for name in names]
        # Beat ticks every 30 s; the workflow is due every minute: a run within about a minute and a half.
        deadline = time.monotonic() + 100
        while not WorkflowRun.objects.filter(workflow__slug="every-minute").exists() and time.monotonic() < deadline:
            time.sleep(1)
        flow = WorkflowRun.objects.select_related("run").get(workflow__slug="every-minute")
        assert (flow.trigger, flow.run.team_id, flow.run.workflow) == ("schedule", team_a.id, "every-minute")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=10) as response:
            assert json.load(response)["checks"]["celery"]["detail"] == (
                f"2 worker(s): mas-worker-0@{host}, mas-worker-1@{host}")
    finally:
        # Stopped with fewer workers configured than started: every worker with a pid file is stopped.
        stopped = services("stop", {**env, "MAS_WORKERS": "1"})
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert stopped.stdout.splitlines()[:4] == [f"[mas] stopped {name}" for name in names]
    assert {name: alive(pid) for name, pid in pids.items()} == dict.fromkeys(names, False), {
        name: Path(f"/proc/{pid}/status").read_text()[:300] for name, pid in pids.items() if alive(pid)}
    left = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert left and all(name.startswith("celerybeat-schedule") for name in left), left  # beat's state; no pids
    assert services("status", env).stdout.splitlines()[:4] == [
        f"{name:<9} not running (not started by make)" for name in names]
    # What the scheduled run left behind ends before the tables are emptied.
    from agents_app.models import Run

    Run.objects.filter(status__in=["queued", "running"]).update(status="cancelled")
