"""Redis (the Celery broker and the live events' pub/sub) restarted, losing everything, in the middle of a run.

Everything here runs against a Redis server of the test's own: a real worker (with celery beat), daphne,
and a websocket client following the run as the monitor page does — it would reconnect with ``after`` if
its socket dropped. It does not drop: a socket holds no Redis connection of its own (it listens on no
channel of the Channels layer); the web process's subscription is made again and reads the gap back from
the database. The run finishes and the client has every event exactly once, in order.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import websockets
from django.conf import settings

from agents_app.kinds import AGENT
from mas_core.definitions.services import definition_parse, definition_save
from agents_app.models import Event, Run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

ROOT = Path(settings.BASE_DIR)
TURNS = 8
SCRIPT = {"lead": [{"latency_ms": 600, "tool_calls": [
    {"name": "vfs_write", "arguments": {"path": f"part-{i}.md", "content": f"part {i}"}}]} for i in range(TURNS)]
    + [{"text": "all parts written"}]}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Redis:
    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(5)


def spawn(argv, env, log_name):
    log = open(Path(settings.VAR_DIR) / "log" / log_name, "ab")  # noqa: SIM115 - the child writes to it
    return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(process) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


async def follow(url: str, token: str, received: list[dict], reconnects: list[int], timeout: float) -> None:
    """What the monitor page does: follow the run; after a drop, reconnect with ?after=<last seq>."""
    deadline = time.monotonic() + timeout
    last = 0
    while time.monotonic() < deadline:
        try:
            async with websockets.connect(f"{url}?after={last}", open_timeout=3,
                                          additional_headers={"Authorization": f"Bearer {token}"}) as ws:
                while time.monotonic() < deadline:
                    message = json.loads(await asyncio.wait_for(ws.recv(), timeout=deadline - time.monotonic()))
                    events = message.get("events") or ([message["event"]] if message.get("event") else [])
                    for event in events:
                        if event["seq"] <= last:
                            continue  # a copy of one already shown
                        received.append(event)
                        last = event["seq"]
                        if event["type"] == "run_complete":
                            return
        except (OSError, websockets.ConnectionClosed, asyncio.TimeoutError):
            reconnects.append(last)
            await asyncio.sleep(0.5)
    raise AssertionError(f"no run_complete within {timeout} s; last seq {last}")


def test_redis_restart_mid_run_loses_no_event(team_a, make_member, make_token, tmp_path):
    definition_save(kind=AGENT, team=team_a, parsed=definition_parse(
        kind=AGENT, team=team_a, text="---\nname: Lead\n---\n\nYou work.\n"))
    token = make_token(team_a, make_member(team_a, role="operator"))
    redis = Redis()
    redis.start()
    queue = f"faults-redis-{os.getpid()}"
    web_port = free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mas_project.settings_test",
           "MAS_DATABASE_NAME": settings.DATABASES["default"]["NAME"], "MAS_TEST_REDIS_URL": redis.url,
           "MAS_CELERY_QUEUE": queue, "MAS_SESSION_STALE_S": "3", "MAS_WS_PING_S": "2",
           "DJANGO_ALLOW_ASYNC_UNSAFE": ""}
    worker = spawn([sys.executable, "-m", "celery", "-A", "mas_project", "worker", "-B", "-s", str(tmp_path / "beat"),
                    "-Q", queue, "--pool", "threads", "--concurrency", "16", "-n", f"{queue}@localhost",
                    "-l", "warning", "--without-gossip", "--without-mingle"], env, f"test-worker-{queue}.log")
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
        request = urllib.request.Request(
            f"http://127.0.0.1:{web_port}/api/runs", method="POST",
            data=json.dumps({"agent": "lead", "input": "Write the parts", "script": SCRIPT}).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        run_id = json.loads(urllib.request.urlopen(request, timeout=30).read())["id"]

        received: list[dict] = []
        reconnects: list[int] = []

        def outage() -> None:
            deadline = time.monotonic() + 60
            while Event.objects.filter(run_id=run_id, type="llm_request").count() < 3:
                assert time.monotonic() < deadline, "the run did not get going"
                time.sleep(0.05)
            redis.kill()  # everything in Redis is gone: queues, groups, unacked messages
            time.sleep(1.5)
            redis.start()

        async def scenario() -> None:
            follower = asyncio.ensure_future(follow(f"ws://127.0.0.1:{web_port}/ws/runs/{run_id}/", token,
                                                    received, reconnects, timeout=90))
            await asyncio.get_running_loop().run_in_executor(None, outage)
            await follower

        asyncio.run(scenario())
    finally:
        stop(web)
        stop(worker)
        if redis.process.poll() is None:
            redis.kill()

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.result) == ("succeeded", "all parts written")
    stored = list(Event.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "type"))
    assert [seq for seq, _ in stored] == list(range(1, len(stored) + 1))
    assert reconnects == [], "the socket stayed open across the outage"
    # The client saw every stored event once, in order — across the outage.
    assert [(e["seq"], e["type"]) for e in received] == stored
    assert [e["data"]["path"] for e in received if e["type"] == "file_change"] == [f"part-{i}.md" for i in range(TURNS)]
