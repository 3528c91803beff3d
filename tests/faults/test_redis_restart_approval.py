"""Redis (broker and Channels layer) restarted, losing everything, while a run waits for a person.

A worker and daphne on a Redis server of the test's own. The pending request
lives in PostgreSQL, so the restart loses nothing of it: the decision posted
afterwards through the API resumes the session on the worker, and the tool
runs once.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import urllib.request

import pytest
from django.conf import settings

from agents_app.kinds import AGENT
from mas_core.definitions.services import definition_parse, definition_save
from agents_app.models import ApprovalRequest, Event, Run, Session, WorkspaceFile
from tests.faults.test_redis_restart import Redis, free_port, spawn, stop
from tests.runs import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

SCRIPT = {"clerk": [{"tool_calls": [{"name": "vfs_write", "arguments": {"path": "note.md", "content": "filed"}}]},
                    {"text": "Filed."}]}


def api(port: int, path: str, token: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/{path}", method="POST",
                                     data=json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, json.loads(response.read())


def test_a_redis_restart_while_a_request_is_pending_loses_nothing(team_a, make_member, make_token, tmp_path):
    definition_save(kind=AGENT, team=team_a, parsed=definition_parse(
        kind=AGENT, team=team_a, text="---\nname: Clerk\ntools: [vfs_write]\napproval: [vfs_write]\n---\n\nFile.\n"))
    token = make_token(team_a, make_member(team_a, role="operator"))
    redis = Redis()
    redis.start()
    queue = f"faults-redis-approval-{os.getpid()}"
    web_port = free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mas_project.settings_test",
           "MAS_DATABASE_NAME": settings.DATABASES["default"]["NAME"], "MAS_TEST_REDIS_URL": redis.url,
           "MAS_CELERY_QUEUE": queue, "MAS_SESSION_STALE_S": "3", "MAS_REAP_INTERVAL_S": "1",
           "DJANGO_ALLOW_ASYNC_UNSAFE": ""}
    worker = spawn([sys.executable, "-m", "celery", "-A", "mas_project", "worker", "-Q", queue, "--pool", "threads",
                    "--concurrency", "16", "-n", f"{queue}@localhost", "-l", "warning", "--without-gossip",
                    "--without-mingle"], env, f"test-worker-{queue}.log")
    web = spawn([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(web_port),
                 "mas_project.asgi:application"], env, f"test-daphne-{queue}.log")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", web_port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        status, run = api(web_port, "runs", token, {"agent": "clerk", "input": "File it", "script": SCRIPT})
        assert status == 201
        wait_until(lambda: Session.objects.filter(run_id=run["id"], status="suspended").exists(), 60,
                   "the session to suspend for a person")
        request = ApprovalRequest.objects.get(run_id=run["id"], status="pending")

        redis.kill()  # everything in Redis is gone: queues, results, the channel layer
        time.sleep(1)
        redis.start()
        time.sleep(1)

        status, decided = api(web_port, f"approvals/{request.id}", token, {"decision": "approve"})
        assert (status, decided["status"]) == (200, "approved")
        done = wait_until(lambda: Run.objects.filter(pk=run["id"], status__in=["succeeded", "failed"]).first(), 60,
                          "the run to finish")
    finally:
        stop(web)
        stop(worker)
        redis.kill()
    assert (done.status, done.result) == ("succeeded", "Filed.")
    assert WorkspaceFile.objects.get(run=done, path="note.md").content == "filed"
    types = list(Event.objects.filter(run=done).order_by("seq").values_list("type", flat=True))
    assert (types.count("approval_requested"), types.count("approval_decided"), types.count("tool_result")) == (1, 1, 1)
