#!/usr/bin/env python3
"""How fast committed events reach websocket clients, with 1 and 50 subscribers on one run.

daphne serves the project (``mas_project.asgi``) on the bench database; S
clients (``websockets``, in a separate process so they do not share this
process's GIL) follow ``/ws/runs/<id>/`` with a bearer token. This process
commits events the way a worker does (``eventlog.events_append``; after
commit the push goes to the process's session loop, ``runner``, which sends
it to Redis pub/sub, one pipeline per round) and notes the time
each commit returned; clients note when each event arrived. Same machine,
same clock.

- latency: event committed → received, p50/p99 over every (event, client);
- paced phase: 200 events/s for 5 s (one event per transaction);
- burst phase: 2,000 events committed as fast as possible, in transactions
  of 10 — events/s delivered to every client, and whether any was lost
  (a socket holds 1,000 batches; what overflows is read back from the
  database by the consumer, so nothing may be missing);
- stalled phase: the paced phase again with one more client that connects
  and then reads nothing — the commit rate and the reading client's latency
  should not change (the kernel never waits for a client).

    .venv/bin/python bench/ws_fanout.py [--subscribers 1,50]

Run it with MAS_BENCH_DB / MAS_BENCH_REDIS_URL set to keep clear of another
bench running at the same time (see _common.py).
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


def clients_main(url: str, token: str, count: int, expected: int, ready, results, stalled: int = 0) -> None:
    import websockets

    async def one(index: int) -> tuple[list[tuple[int, float]], int]:
        seen: list[tuple[int, float]] = []
        messages = 0
        async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {token}"},
                                      max_size=None) as ws:
            while True:
                message = json.loads(await ws.recv())
                if message["message"] == "replayed":
                    ready.put(index)
                elif message["message"] == "events":
                    now = time.time()
                    messages += 1
                    seen.extend((event["seq"], now) for event in message["events"])
                    if message["events"][-1]["seq"] >= expected:
                        return seen, messages

    async def stalled_one(index: int, done: asyncio.Event) -> None:
        # Reads up to "replayed", then nothing: its buffers (16 frames here, then the kernel's TCP
        # buffers) fill and the server can no longer write to it.
        async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {token}"},
                                      max_size=None, max_queue=16) as ws:
            while json.loads(await ws.recv())["message"] != "replayed":
                pass
            ready.put(index)
            await done.wait()

    async def main():
        done = asyncio.Event()
        stuck = [asyncio.ensure_future(stalled_one(count + i, done)) for i in range(stalled)]
        seen = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(count))), timeout=300)
        done.set()
        await asyncio.gather(*stuck)
        return seen

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

    from mas_core.eventlog import entry, events_append

    with transaction.atomic():
        stamps: list[int] = []
        # Registered before the push: runs first after COMMIT returns.
        transaction.on_commit(lambda: [committed.__setitem__(seq, time.time()) for seq in stamps])
        pushed = events_append(run_id=run_id, entries=[entry("stream_chunk", agent="bench", data=data)
                                                       for _ in range(count)])
        stamps.extend(event["seq"] for event in pushed)


def phase(run, token, port, subscribers: int, produce, stalled: int = 0) -> dict:
    ctx = multiprocessing.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    run.refresh_from_db()
    start_seq = run.next_seq
    committed: dict[int, float] = {}
    total = produce(None, None)  # how many events the phase will commit
    url = f"ws://127.0.0.1:{port}/ws/runs/{run.id}/?after={start_seq}"
    clients = ctx.Process(target=clients_main,
                          args=(url, token, subscribers, start_seq + total, ready, results, stalled))
    clients.start()
    for _ in range(subscribers + stalled):
        ready.get(timeout=60)
    started = time.time()
    produce(run.id, committed)
    produced = time.time() - started
    outcome = results.get(timeout=300)
    clients.join(30)
    seen = [client for client, _ in outcome]
    messages = sum(count for _, count in outcome)
    latencies = [(at - committed[seq]) for client in seen for seq, at in client if seq in committed]
    last = max(at for client in seen for _, at in client)
    missing = sum(len(set(range(start_seq + 1, start_seq + total + 1)) - {seq for seq, _ in client})
                  for client in seen)
    duplicates = sum(len(client) - len({seq for seq, _ in client}) for client in seen)
    return {"latencies": latencies, "events": total, "produced_s": produced, "delivered_s": last - started,
            "missing": missing, "duplicates": duplicates,
            "per_message": sum(len(client) for client in seen) / max(1, messages)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscribers", default="1,50")
    args = parser.parse_args()
    levels = [int(x) for x in args.subscribers.split(",")]
    c.say("ws_fanout: events committed -> received over /ws/runs/<id>/ (daphne, Redis pub/sub)")
    c.say(f"machine {c.machine()}, {c.now_utc()}, load average {c.os.getloadavg()[0]:.2f}")
    c.django_setup()
    from mas_core.runner import runner

    runner.loop()  # pushes go through the session loop, as in a worker (not a new loop per push)
    c.say(f"database {c.BENCH_DB}: created and migrated in {c.database_create():.1f} s")
    c.redis_flush()
    (c.ROOT / "var" / "log").mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = start_daphne(port)
    try:
        from agents_app.models import Run
        from mas_core.teams import api_token_create, membership_set, user_create

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

        def paced_line(label, p):
            return (f"{label}, paced {PACED_RATE} events/s for {PACED_SECONDS} s: committed in "
                    f"{p['produced_s']:.2f} s, {p['per_message']:.2f} events per message; latency committed -> received "
                    f"p50 {c.percentile(p['latencies'], 50) * 1000:.1f} ms, "
                    f"p99 {c.percentile(p['latencies'], 99) * 1000:.1f} ms, max {max(p['latencies']) * 1000:.1f} ms "
                    f"(n={len(p['latencies'])}); missing {p['missing']}, duplicates {p['duplicates']}")

        for subscribers in levels:
            p = phase(run, token, port, subscribers, paced)
            c.say("\n" + paced_line(f"{subscribers} subscriber(s)", p))
            b = phase(run, token, port, subscribers, burst)
            c.say(f"{subscribers} subscriber(s), burst of {b['events']} events (transactions of {BURST_BATCH}): "
                  f"committed in {b['produced_s']:.2f} s ({b['events'] / b['produced_s']:,.0f} events/s), "
                  f"all delivered to every client in {b['delivered_s']:.2f} s "
                  f"({b['events'] / b['delivered_s']:,.0f} events/s per client, "
                  f"{b['events'] * subscribers / b['delivered_s']:,.0f} in all, "
                  f"{b['per_message']:.1f} events per websocket message); "
                  f"latency p50 {c.percentile(b['latencies'], 50) * 1000:.1f} ms, "
                  f"p99 {c.percentile(b['latencies'], 99) * 1000:.1f} ms; "
                  f"missing {b['missing']}, duplicates {b['duplicates']}")
        p = phase(run, token, port, 1, paced, stalled=1)
        c.say("\n" + paced_line("1 subscriber beside 1 that reads nothing", p))
        b = phase(run, token, port, 1, burst, stalled=1)
        c.say(f"1 subscriber beside 1 that reads nothing, burst of {b['events']} events: committed in "
              f"{b['produced_s']:.2f} s ({b['events'] / b['produced_s']:,.0f} events/s); latency "
              f"p50 {c.percentile(b['latencies'], 50) * 1000:.1f} ms, "
              f"p99 {c.percentile(b['latencies'], 99) * 1000:.1f} ms; missing {b['missing']}, "
              f"duplicates {b['duplicates']}")
    finally:
        server.terminate()
        server.wait(10)
        c.database_drop()
        c.redis_flush()


if __name__ == "__main__":
    main()
