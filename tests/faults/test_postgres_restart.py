"""PostgreSQL restarted (immediate mode: a crash and recovery) in the middle of a run.

The run must end — resumed or failed with a reason — and never stay running. This test has a
PostgreSQL server of its own (the embedded pgserver build, in ``var/``) so that restarting it
touches nothing else; the worker runs with celery beat, whose reaper resumes the session that lost
its database.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

pytestmark = [pytest.mark.worker]

ROOT = Path(settings.BASE_DIR)
SEED = """
from agents_app.kinds import AGENT
from mas_core.definitions.services import definition_parse, definition_save
from agents_app.execution.runs import run_start
from mas_core.teams import team_create

team = team_create(slug="pg", defs_dir="{defs}")
definition_save(kind=AGENT, team=team, parsed=definition_parse(kind=AGENT, team=team,
                text="---\\nname: Lead\\n---\\n\\nYou work.\\n"))
script = {{"lead": [
    {{"tool_calls": [{{"name": "vfs_write", "arguments": {{"path": "a.md", "content": "first"}}}}]}},
    {{"latency_ms": 4000, "tool_calls": [{{"name": "vfs_write", "arguments": {{"path": "b.md", "content": "second"}}}}]}},
    {{"text": "both written"}},
]}}
print("RUN", run_start(team=team, agent="lead", input="Write two files", script=script).id)
"""


@pytest.fixture
def private_postgres():
    import pgserver
    from pgserver._commands import pg_ctl

    pgdata = ROOT / "var" / f"faults-pg-{os.getpid()}"
    shutil.rmtree(pgdata, ignore_errors=True)
    pgdata.mkdir(parents=True)
    server = pgserver.get_server(pgdata, cleanup_mode=None)
    server.psql("CREATE DATABASE faults;")

    def restart() -> None:
        pg_ctl(["-m", "immediate", "-w", "-t", "30", "restart"], pgdata=pgdata, user=server.system_user, timeout=40)

    yield server.get_uri("faults"), restart
    pg_ctl(["-m", "immediate", "stop"], pgdata=pgdata, user=server.system_user, timeout=30)
    shutil.rmtree(pgdata, ignore_errors=True)


def test_a_restarted_database_never_leaves_a_run_running(private_postgres, tmp_path):
    uri, restart = private_postgres
    queue = f"faults-pg-{os.getpid()}"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mas_project.settings_test", "DATABASE_URL": uri,
           "MAS_DATABASE_NAME": "faults", "MAS_CELERY_QUEUE": queue, "MAS_SESSION_STALE_S": "3",
           "MAS_DEFS_ROOT": str(tmp_path / "defs")}
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput", "-v0"], env=env, check=True, cwd=ROOT, timeout=300)
    log = open(ROOT / "var" / "log" / f"test-worker-{queue}.log", "ab")  # noqa: SIM115
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "mas_project", "worker", "-B", "-s", str(tmp_path / "beat"),
         "-Q", queue, "--pool", "threads", "--concurrency", "16", "-n", f"{queue}@localhost", "-l", "warning",
         "--without-gossip", "--without-mingle"],
        env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        seeded = subprocess.run([*manage, "shell", "-c", SEED.format(defs=tmp_path / "defs")], env=env,
                                cwd=ROOT, check=True, capture_output=True, text=True, timeout=120)
        run_id = seeded.stdout.split("RUN ", 1)[1].split()[0]

        def query(sql, *params):
            with psycopg.connect(uri, autocommit=True) as conn:
                return conn.execute(sql, params).fetchall()

        def wait(predicate, timeout, what):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    if predicate():
                        return
                except psycopg.OperationalError:
                    pass  # the server is restarting
                time.sleep(0.2)
            raise AssertionError(f"timed out waiting for {what}")

        wait(lambda: query("SELECT count(*) FROM agents_app_event WHERE run_id = %s AND type = 'llm_request'",
                           run_id)[0][0] == 2, 60, "the second model call")
        restart()  # while the model call is in flight: the worker's connections all break
        wait(lambda: query("SELECT status FROM agents_app_run WHERE id = %s", run_id)[0][0]
             in ("succeeded", "failed", "cancelled"), 90, "the run to end")
        [(status, result, error)] = query("SELECT status, result, error FROM agents_app_run WHERE id = %s", run_id)
        events = query("SELECT seq, type, data FROM agents_app_event WHERE run_id = %s ORDER BY seq", run_id)
        files = dict(query("SELECT path, version FROM agents_app_workspacefile WHERE run_id = %s", run_id))
    finally:
        os.killpg(worker.pid, 15)
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, 9)
        log.close()

    assert (status, result, error) == ("succeeded", "both written", ""), [e[1] for e in events]
    assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1))
    # The session was resumed from its checkpoint: each file was written once.
    assert files == {"a.md": 1, "b.md": 1}, "\n".join(f"{e[1]} {str(e[2])[:150]}" for e in events)
    assert [data["path"] for _, kind, data in events if kind == "file_change"] == ["a.md", "b.md"]
    resumes = [data for _, kind, data in events if kind == "retry" and data.get("what") == "session_resume"]
    assert len(resumes) == 1
