#!/usr/bin/env python3
"""Load: 100 runs started at once through the API while 50 websocket clients follow them.

daphne serves the project on the bench database (``--web N``: N daphne
processes, the requests and the websocket clients dealt round robin between
them, as a load balancer would) and real Celery workers (``--workers N``
processes) run the sessions. Each run is one agent of ``--turns`` scripted model turns
of 200 ms (vfs_write, ..., final answer). ``--runs`` POST /api/runs requests
are sent at the same moment by 20 HTTP threads; ``--clients`` websocket
clients (in a separate process, started before, one per run) follow the
first runs answered, each from ``?after=0`` as soon as its POST is answered,
to their ``run_complete``; meanwhile a poller reads GET /api/runs/{id} of
random runs at about 10 requests/s. While the POSTs are under way, another
team's member and the posting member each read GET /api/me every 20 ms (the
same light request, one caller apart): the web process lets waiting requests
in one caller at a time in turn, so the other team's waits behind at most one
of the burst's. (Clients that joined only once every
POST was answered saw little live: most runs were over by then, and a
run's p99 rested on a handful of events.)

Figures:
- runs/min: runs ÷ (first POST .. last run finished);
- API latency p50/p95: the POSTs (all at once), GET /api/me during the POSTs
  by another team and by the posting member, and the GETs during the load;
- event delivery p50/p99: created (the event's timestamp) -> received by a
  client, for the live events (after the client's replay); split in two
  where a tap subscribed to the runs' Redis channels (its own process) saw
  each event published: the worker's half (its write, commit and push) and
  the web's (daphne forwarding it, and the client reading it);
- worker peak RSS; nothing lost: every run succeeded, every run's events are
  numbered 1..n, and every client received exactly its run's events.

    .venv/bin/python bench/load.py [--runs 100] [--clients 50] [--turns 5] [--workers 1] [--web 1]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing
import random
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402

LATENCY_MS = 200


def script(turns: int) -> dict:
    writes = [{"latency_ms": LATENCY_MS, "tool_calls": [
        {"name": "vfs_write", "arguments": {"path": f"out/{i}.md", "content": f"part {i}"}}]} for i in range(turns - 1)]
    return {"worker": writes + [{"latency_ms": LATENCY_MS, "text": "done"}]}


# -- the websocket clients (a child process) -------------------------------------------------------


def clients_main(bases: list[str], token: str, ids, count: int, ready, results) -> None:
    """Follow ``count`` runs, each as soon as its id arrives on ``ids`` (the i-th through ``bases[i % n]``);
    put what each client saw on ``results``."""
    import websockets

    async def one(base: str, run_id: str) -> dict:
        seen: list[tuple[int, str, float]] = []
        replayed_to = None
        last = 0
        reconnects = 0
        while True:
            try:
                async with websockets.connect(f"{base}/ws/runs/{run_id}/?after={last}", max_size=None,
                                              additional_headers={"Authorization": f"Bearer {token}"}) as ws:
                    while True:
                        message = json.loads(await ws.recv())
                        if message["message"] == "replayed" and replayed_to is None:
                            replayed_to = message["last_seq"]
                        events = message.get("events") or ([message["event"]] if message.get("event") else [])
                        for event in events:
                            if event["seq"] <= last:
                                continue
                            last = event["seq"]
                            seen.append((event["seq"], event["created_at"], time.time(), event["type"]))
                            if event["type"] == "run_complete":
                                # A run that ended before the socket joined ends within the replay:
                                # all it received was replayed, none of it was live.
                                return {"run": run_id, "seen": seen,
                                        "replayed_to": last if replayed_to is None else replayed_to,
                                        "reconnects": reconnects}
            except (OSError, websockets.ConnectionClosed):
                reconnects += 1
                await asyncio.sleep(0.2)

    async def main():
        loop = asyncio.get_running_loop()
        clients = []
        ready.set()
        for i in range(count):
            run_id = await loop.run_in_executor(None, ids.get)
            if run_id is not None:  # None: a POST that started no run
                clients.append(asyncio.ensure_future(one(bases[i % len(bases)], run_id)))
        return await asyncio.wait_for(asyncio.gather(*clients), timeout=600)

    results.put(asyncio.run(main()))


# -- the tap on Redis (a child process) -----------------------------------------------------------


def tap_main(redis_url: str, pattern: str, ready, stop, results) -> None:
    """Note when each event was published (reached Redis), until ``stop``: {(run, seq): unix time}."""
    import redis

    pubsub = redis.Redis.from_url(redis_url).pubsub(ignore_subscribe_messages=True)
    pubsub.psubscribe(pattern)
    published: dict[tuple[str, int], float] = {}
    ready.set()
    while not stop.is_set():
        message = pubsub.get_message(timeout=0.2)
        if message is not None:
            at = time.time()
            for event in json.loads(message["data"]):
                published.setdefault((event["run"], event["seq"]), at)
    results.put(published)


# -- HTTP ------------------------------------------------------------------------------------------


def http(method: str, url: str, token: str, body: dict | None = None) -> tuple[float, int, dict]:
    request = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body else None,
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            payload = json.loads(response.read())
            return time.perf_counter() - started, response.status, payload
    except urllib.error.HTTPError as error:
        return time.perf_counter() - started, error.code, {"error": error.read().decode(errors="replace")[:300]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--workers", type=int, default=1, help="worker processes (sessions split between them)")
    parser.add_argument("--web", type=int, default=1, help="daphne processes (requests dealt round robin)")
    args = parser.parse_args()
    c.say(f"load: {args.runs} runs through POST /api/runs at once, {args.clients} websocket clients following, "
          f"{args.turns} scripted turns of {LATENCY_MS} ms per run; {args.web} daphne, {args.workers} worker processes")
    c.say(f"machine {c.machine()}, {c.now_utc()}, load average {c.os.getloadavg()[0]:.2f}")
    c.django_setup()
    c.say(f"database {c.BENCH_DB}: created and migrated in {c.database_create():.1f} s")
    c.redis_flush()
    (c.ROOT / "var" / "log").mkdir(parents=True, exist_ok=True)
    from agents_app.models import Event

    team = c.team_with_agent(slug="bench-load", agent="worker")
    token = c.member_token(team, username="bench-load")
    other = c.member_token(c.team_with_agent(slug="bench-load-other", agent="worker"), username="bench-load-other")
    ports = [c.free_port() for _ in range(args.web)]
    bases = [f"http://127.0.0.1:{port}" for port in ports]
    servers = [c.start_daphne(port) for port in ports]
    workers = [c.Worker(concurrency=-(-args.runs // args.workers) + 16).start() for _ in range(args.workers)]
    worker = workers[0]
    try:
        warm = [http("POST", f"{bases[i % args.web]}/api/runs", token,
                     {"agent": "worker", "input": "warm", "script": script(1)}) for i in range(3 * args.web)]
        c.runs_wait([payload["id"] for _, _, payload in warm], timeout=60)
        for each in workers:
            each.reset_peak()
        body = {"agent": "worker", "input": "Write the parts", "script": script(args.turns)}
        barrier = threading.Barrier(20)
        ctx = multiprocessing.get_context("spawn")
        results, ids, ready = ctx.Queue(), ctx.Queue(), ctx.Event()
        followers = ctx.Process(target=clients_main, args=([b.replace("http", "ws") for b in bases], token, ids,
                                                           min(args.clients, args.runs), ready, results))
        followers.start()
        from mas_core.events import live_redis_url, run_channel

        tap_ready, tap_stop, tapped = ctx.Event(), ctx.Event(), ctx.Queue()
        tap = ctx.Process(target=tap_main, args=(live_redis_url(), run_channel("*"), tap_ready, tap_stop, tapped))
        tap.start()
        if not tap_ready.wait(60):
            raise SystemExit("the Redis tap did not start")
        if not ready.wait(60):
            raise SystemExit("the websocket clients' process did not start")
        handed = itertools.count()

        def post(_):
            if _ < 20:
                barrier.wait()
            answer = http("POST", f"{bases[_ % args.web]}/api/runs", token, body)
            if answer[1] == 201 and next(handed) < args.clients:
                ids.put(answer[2]["id"])  # its client connects now
            return answer

        me: dict[str, list[float]] = {"other team": [], "posting member": []}
        posting = threading.Event()

        def me_poll(who: str, key: str):
            while posting.is_set():
                took, status, _ = http("GET", f"{random.choice(bases)}/api/me", key)
                me[who].append(took) if status == 200 else get_errors.append(status)
                time.sleep(0.02)

        get_errors: list[int] = []
        posting.set()
        probes = [threading.Thread(target=me_poll, args=(who, key), daemon=True)
                  for who, key in (("other team", other), ("posting member", token))]
        started = time.time()
        for probe in probes:
            probe.start()
        with ThreadPoolExecutor(20) as pool:
            posts = list(pool.map(post, range(args.runs)))
        posting.clear()
        for probe in probes:
            probe.join(10)
        refused = [(status, payload) for _, status, payload in posts if status != 201]
        if refused:
            c.say(f"{len(refused)} of {args.runs} POSTs failed, e.g. {refused[0]}")
        run_ids = [payload["id"] for _, status, payload in posts if status == 201]
        for _ in range(min(args.clients, args.runs) - min(args.clients, len(run_ids))):
            ids.put(None)  # the clients' process waits for no more
        gets: list[float] = []
        stop = threading.Event()

        def poll():
            while not stop.is_set():
                took, status, _ = http("GET", f"{random.choice(bases)}/api/runs/{random.choice(run_ids)}", token)
                gets.append(took)
                get_errors.append(status) if status != 200 else None
                time.sleep(0.1)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        runs = c.runs_wait(run_ids, timeout=600)
        stop.set()
        poller.join(10)
        followed = results.get(timeout=300)
        followers.join(30)
        tap_stop.set()
        published = tapped.get(timeout=60)
        tap.join(30)
        rss = max(each.peak_rss for each in workers)
    finally:
        for each in workers:
            each.stop()
        for server in servers:
            server.terminate()
            server.wait(10)
    finished = max(run.finished_at for run in runs).timestamp()
    window = finished - started
    lost = 0
    stored = {}
    for run_id in run_ids:
        seqs = list(Event.objects.filter(run_id=run_id).order_by("seq").values_list("seq", flat=True))
        stored[run_id] = seqs
        lost += seqs != list(range(1, len(seqs) + 1))
    delivery, missing, duplicates, reconnects, slowest = [], 0, 0, 0, []
    to_redis, from_redis = [], []  # the two halves of a live event's delivery, split where Redis saw it
    for client in followed:
        seqs = [seq for seq, *_ in client["seen"]]
        missing += len(set(stored[client["run"]]) - set(seqs))
        duplicates += len(seqs) - len(set(seqs))
        reconnects += client["reconnects"]
        live = [(at - datetime.fromisoformat(created).timestamp(), datetime.fromisoformat(created).timestamp(), type_)
                for seq, created, at, type_ in client["seen"] if seq > client["replayed_to"]]
        delivery += [took for took, _, _ in live]
        for seq, created, at, _ in client["seen"]:
            if seq > client["replayed_to"] and (client["run"], seq) in published:
                to_redis.append(published[client["run"], seq] - datetime.fromisoformat(created).timestamp())
                from_redis.append(at - published[client["run"], seq])
        slowest = sorted([*slowest, *live], reverse=True)[:5]
    post_times = [took for took, _, _ in posts]
    failed = sum(run.status != "succeeded" for run in runs)
    events = sum(len(seqs) for seqs in stored.values())
    c.say("")
    c.say(f"{args.runs} runs ({events} events) finished in {window:.2f} s -> {args.runs / window * 60:,.0f} runs/min "
          f"(ideal with {args.turns} x {LATENCY_MS} ms per run, all at once: {args.turns * LATENCY_MS / 1000:.1f} s); "
          f"failed runs {failed}; runs with a gap in their events {lost}")
    c.say(f"API POST /api/runs (all {args.runs} at once, 20 threads): p50 {c.percentile(post_times, 50) * 1000:.0f} ms, "
          f"p95 {c.percentile(post_times, 95) * 1000:.0f} ms; GET /api/runs/{{id}} during the load "
          f"(n={len(gets)}): p50 {c.percentile(gets, 50) * 1000:.0f} ms, p95 {c.percentile(gets, 95) * 1000:.0f} ms; "
          f"errors: POST {len(refused)}, GET {len(get_errors)}")
    c.say("GET /api/me during the POSTs: " + "; ".join(
        f"{who} (n={len(took)}) p50 {c.percentile(took, 50) * 1000:.0f} ms, p95 {c.percentile(took, 95) * 1000:.0f} ms"
        for who, took in me.items()))
    c.say(f"event delivery, created -> received by a client (n={len(delivery)} live events, {len(followed)} clients): "
          f"p50 {c.percentile(delivery, 50) * 1000:.1f} ms, p99 {c.percentile(delivery, 99) * 1000:.1f} ms, "
          f"max {max(delivery, default=0) * 1000:.1f} ms; missing {missing}, duplicates {duplicates}, reconnects {reconnects}")
    c.say(f"       of which created -> published on Redis (the worker: its write, commit and push; n={len(to_redis)}): "
          f"p50 {c.percentile(to_redis, 50) * 1000:.1f} ms, p99 {c.percentile(to_redis, 99) * 1000:.1f} ms; "
          f"published -> received (daphne and the client): p50 {c.percentile(from_redis, 50) * 1000:.1f} ms, "
          f"p99 {c.percentile(from_redis, 99) * 1000:.1f} ms")
    c.say("       the slowest live events: " + ", ".join(
        f"{type_} created {created - started:.2f} s after the first POST, {took * 1000:.0f} ms" for took, created, type_ in slowest))
    c.say(f"worker peak RSS {c.mib(rss)}; worker: {worker.command_line()}"
          + (f"  (x{args.workers} processes)" if args.workers > 1 else ""))
    c.database_drop()
    c.redis_flush()


if __name__ == "__main__":
    main()
