"""Two worker processes and two web processes against one PostgreSQL and one Redis (docs/deployment.md).

Real Celery workers and real daphne processes: runs started through one web
process split between the two workers, and a websocket on either web process
sees every event of every run, each once, in order — the live ones through the
Redis channel layer from whichever worker ran the session (the sockets' own
catch-up ping is set to 10 minutes, so nothing arrives by that path).
"""

from __future__ import annotations

import asyncio
import json
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest
import websockets
from django.conf import settings

from agents_app.kinds import AGENT
from agents_app.models import Event, Run, Session
from mas_core.definitions.services import definition_parse, definition_save
from tests.web import WebServer
from tests.workers import start_worker, stop_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

RUNS = 8
# The first turn waits 2 s, so every socket joins while its run is still going.
SCRIPT = {"lead": [
    {"latency_ms": 2000, "tool_calls": [{"name": "vfs_write", "arguments": {"path": "a.md", "content": "a"}}]},
    {"latency_ms": 200, "tool_calls": [{"name": "vfs_write", "arguments": {"path": "b.md", "content": "b"}}]},
    {"latency_ms": 200, "text": "both written"},
]}


async def follow(url: str, token: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """The run's events as one socket received them: (before the replay ended, after it), until run_complete."""
    replayed: list[tuple[int, str]] = []
    live: list[tuple[int, str]] = []
    into = replayed
    async with websockets.connect(url, open_timeout=10,
                                  additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        while True:
            message = json.loads(await asyncio.wait_for(ws.recv(), timeout=30))
            if message["message"] == "replayed":
                into = live
            for event in message.get("events", []):
                into.append((event["seq"], event["type"]))
                if event["type"] == "run_complete":
                    return replayed, live


def test_runs_split_between_two_workers_and_websockets_on_both_web_processes_see_every_event(
        team_a, make_member, make_token):
    definition_save(kind=AGENT, team=team_a, parsed=definition_parse(
        kind=AGENT, team=team_a, text="---\nname: Lead\n---\n\nYou write.\n"))
    token = make_token(team_a, make_member(team_a, role="operator"))
    queue = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-scale"
    webs = [WebServer(label=f"scale-{i}", env={"MAS_CELERY_QUEUE": queue, "MAS_WS_PING_S": "600"})
            for i in range(2)]
    workers = []
    try:
        with ThreadPoolExecutor(4) as pool:
            started = [pool.submit(start_worker, f"scale-{i}", queue=queue, concurrency=16) for i in range(2)]
            for future in [pool.submit(web.start) for web in webs]:
                future.result()
            workers = [future.result() for future in started]

        ids = []
        for i in range(RUNS):
            answer = webs[0].request("POST", "/api/runs", json.dumps(
                {"agent": "lead", "input": f"Write two parts ({i})", "script": SCRIPT}),
                token=token, content_type="application/json")
            assert answer.status == 201, answer.body
            ids.append(json.loads(answer.body)["id"])

        async def watch_all():
            return await asyncio.gather(*[
                follow(f"ws://127.0.0.1:{web.port}/ws/runs/{run_id}/", token) for run_id in ids for web in webs])

        seen = asyncio.run(asyncio.wait_for(watch_all(), timeout=60))
    finally:
        for web in webs:
            web.stop()
        for worker in workers:
            stop_worker(worker)

    assert list(Run.objects.filter(pk__in=ids).values_list("status", flat=True)) == ["succeeded"] * RUNS
    # Sessions ran on both worker processes (Session.worker is "<host>:<pid>").
    host = socket.gethostname()
    by_worker = {f"{host}:{worker.process.pid}": 0 for worker in workers}
    for name in Session.objects.filter(run_id__in=ids).values_list("worker", flat=True):
        by_worker[name] += 1
    assert sum(by_worker.values()) == RUNS and all(by_worker.values()), by_worker
    # Every socket, on either web process: the run's stored events, each once, in order, no gap; the last of
    # them (run_complete, written by a worker) arrived live through the channel layer, after the replay.
    for (run_id, web), (replayed, live) in zip([(r, w) for r in ids for w in webs], seen, strict=True):
        stored = list(Event.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "type"))
        assert [seq for seq, _ in stored] == list(range(1, len(stored) + 1))
        assert replayed + live == stored, (run_id, web.port)
        assert live and live[-1] == stored[-1] and stored[-1][1] == "run_complete", (run_id, web.port, live)

