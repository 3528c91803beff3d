#!/usr/bin/env python3
"""How fast committed events reach websocket clients, with 1 and 50 subscribers on one run.

daphne serves the project (``mas_project.asgi``) on the bench database; S
clients (``websockets``, in a separate process so they do not share this
process's GIL) follow ``/ws/runs/<id>/`` with a bearer token. This process
commits events the way the kernel's services do (``eventlog.event_append``,
pushed to the Redis channel layer after commit) and notes the time each
commit returned; clients note when each event arrived. Same machine, same
clock.

- latency: event committed → received, p50/p99 over every (event, client);
- paced phase: 200 events/s for 5 s (one event per transaction);
- burst phase: 2,000 events committed as fast as possible, in transactions
  of 10 — events/s delivered to every client, and whether any was lost
  (a client's channel holds 100 messages; what overflows is read back from
  the database by the consumer, so nothing may be missing).

    .venv/bin/python bench/ws_fanout.py [--subscribers 1,50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

PACED_RATE, PACED_SECONDS = 200, 5
BURST_EVENTS, BURST_BATCH = 2000, 10


# -- the clients (a child process) ------------------------------------------------------------


def clients_main(url: str, token: str, count: int, expected: int, ready, results) -> None:
    import websockets

    async def one(index: int) -> list[tuple[int, float]]:
        seen: list[tuple[int, float]] = []
        async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {token}"},
                                      max_size=None) as ws:
            while True:
                message = json.loads(await ws.recv())
                if message["message"] == "replayed":
                    ready.put(index)
                elif message["message"] == "event":
                    seen.append((message["event"]["seq"], time.time()))
                    if message["event"]["seq"] >= expected:
                        return seen

    async def main():
        return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(count))), timeout=300)

    results.put(asyncio.run(main()))


# -- the server ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_daphne(port: int) -> subprocess.Popen:
    log = open(c.ROOT / "var" / "log" / "bench-daphne.log", "ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "mas_project.asgi:application"],
        cwd=c.ROOT, env={**os.environ, **c.ENV}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return process
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("daphne did not start; see var/log/bench-daphne.log")


# -- the producer --------------------------------------------------------------------------------


def commit(run_id, count: int, committed: dict[int, float], data: dict) -> None:
    from django.db import transaction

    from agents_app.execution.eventlog import entry, events_append

    with transaction.atomic():
        stamps: list[int] = []
        # Registered before the push: runs first after COMMIT returns.
        transaction.on_commit(lambda: [committed.__setitem__(seq, time.time()) for seq in stamps])
        pushed = events_append(run_id=run_id, entries=[entry("stream_chunk", agent="bench", data=data)
                                                       for _ in range(count)])
        stamps.extend(event["seq"] for event in pushed)


def phase(run, token, port, subscribers: int, produce) -> dict:
    ctx = multiprocessing.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    run.refresh_from_db()
    start_seq = run.next_seq
    committed: dict[int, float] = {}
    total = produce(None, None)  # how many events the phase will commit
    url = f"ws://127.0.0.1:{port}/ws/runs/{run.id}/?after={start_seq}"
    clients = ctx.Process(target=clients_main, args=(url, token, subscribers, start_seq + total, ready, results))
    clients.start()
    for _ in range(subscribers):
        ready.get(timeout=60)
    started = time.time()
    produce(run.id, committed)
    produced = time.time() - started
    seen = results.get(timeout=300)
    clients.join(30)
    latencies = [(at - committed[seq]) for client in seen for seq, at in client if seq in committed]
    last = max(at for client in seen for _, at in client)
    missing = sum(len(set(range(start_seq + 1, start_seq + total + 1)) - {seq for seq, _ in client})
                  for client in seen)
    duplicates = sum(len(client) - len({seq for seq, _ in client}) for client in seen)
    return {"latencies": latencies, "events": total, "produced_s": produced, "delivered_s": last - started,
            "missing": missing, "duplicates": duplicates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscribers", default="1,50")
    args = parser.parse_args()
    levels = [int(x) for x in args.subscribers.split(",")]
    c.say("ws_fanout: events committed -> received over /ws/runs/<id>/ (daphne, Redis channel layer)")
    c.say(f"machine {c.machine()}, {c.now_utc()}, load average {c.os.getloadavg()[0]:.2f}")
    c.django_setup()
    c.say(f"database {c.BENCH_DB}: created and migrated in {c.database_create():.1f} s")
    c.redis_flush()
    (c.ROOT / "var" / "log").mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = start_daphne(port)
    try:
        from agents_app.models import Run
        from agents_app.services import api_token_create, membership_set, user_create

        team = c.team_with_agent(slug="bench-ws", agent="bench")
        user = user_create(username="bench-ws")
        membership_set(team=team, user=user, role="viewer")
        token = api_token_create(user=user, team=team, role="viewer").token
        run = Run.objects.create(team=team, agent="bench", input="fan-out")
        payload = {"text": "x" * 200}

        def paced(run_id, committed):
            if run_id is None:
                return PACED_RATE * PACED_SECONDS
            interval, next_at = 1 / PACED_RATE, time.monotonic()
            for _ in range(PACED_RATE * PACED_SECONDS):
                commit(run_id, 1, committed, payload)
                next_at += interval
                time.sleep(max(0.0, next_at - time.monotonic()))

        def burst(run_id, committed):
            if run_id is None:
                return BURST_EVENTS
            for _ in range(BURST_EVENTS // BURST_BATCH):
                commit(run_id, BURST_BATCH, committed, payload)

        for subscribers in levels:
            p = phase(run, token, port, subscribers, paced)
            c.say(f"\n{subscribers} subscriber(s), paced {PACED_RATE} events/s for {PACED_SECONDS} s: "
                  f"latency committed -> received p50 {c.percentile(p['latencies'], 50) * 1000:.1f} ms, "
                  f"p99 {c.percentile(p['latencies'], 99) * 1000:.1f} ms, max {max(p['latencies']) * 1000:.1f} ms "
                  f"(n={len(p['latencies'])}); missing {p['missing']}, duplicates {p['duplicates']}")
            b = phase(run, token, port, subscribers, burst)
            c.say(f"{subscribers} subscriber(s), burst of {b['events']} events (transactions of {BURST_BATCH}): "
                  f"committed in {b['produced_s']:.2f} s ({b['events'] / b['produced_s']:,.0f} events/s), "
                  f"all delivered to every client in {b['delivered_s']:.2f} s "
                  f"({b['events'] / b['delivered_s']:,.0f} events/s per client, "
                  f"{b['events'] * subscribers / b['delivered_s']:,.0f} messages/s in all); "
                  f"latency p50 {c.percentile(b['latencies'], 50) * 1000:.1f} ms, "
                  f"p99 {c.percentile(b['latencies'], 99) * 1000:.1f} ms; "
                  f"missing {b['missing']}, duplicates {b['duplicates']}")
    finally:
        server.terminate()
        server.wait(10)
        c.database_drop()
        c.redis_flush()


if __name__ == "__main__":
    main()
