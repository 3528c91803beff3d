#!/usr/bin/env python3
"""How many sessions one worker process carries when the model takes 1 s per turn.

For each level S (default 10, 50, 100, 200) the script queues S runs, each
one agent of 3 model turns (vfs_write, vfs_write, final answer), every turn
``latency_ms=1000`` — S independent sessions, as S users starting runs at
once. (One run with S spawned children would measure the run's row lock and
``max_fanout``/``max_concurrency`` limits instead of the worker.) The runs are
created in one transaction, so their dispatch messages are published together
at commit and all S sessions arrive at once, on a fresh worker warmed by two
zero-latency runs.

Figures per level, from the events' database timestamps:
- achieved steps/s = model turns ÷ (first session_start .. last session_end),
  against the ideal S steps/s (S sessions ÷ 1 s latency) — the ratio;
- steady state: model turns per second while all S sessions were running
  (from the last session_start to the first session_end), against S steps/s —
  what the worker carries once the burst of session starts is behind it (use
  ``--turns 10`` so that window is long);
- step time p50/p95 (llm_request to the next llm_request; ideal 1000 ms);
- the start: how many claims the workers made and how long after the first
  session_start the last came, then per session claim -> session_start and
  session_start -> its first llm_request (p50/p95): where a burst's start goes;
- peak RSS of the worker process (psutil, with children), peak Postgres
  backends on the bench database.

A last level replays 50 sessions on the demo's worker settings
(``--concurrency 8``) to show what a thread-per-session pool gives.

    .venv/bin/python bench/concurrency.py [--levels 10,50,100,200] [--turns 3] [--db-threads 12] [--workers 1] [--no-demo]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import itertools

import _common as c

AGENT = "waiter"
TURNS = 3
LATENCY_MS = 1000


def script(turns: int) -> dict:
    write = [{"latency_ms": LATENCY_MS, "tool_calls": [
        {"name": "vfs_write", "arguments": {"path": f"out/{i}.md", "content": f"part {i}"}}]} for i in range(turns - 1)]
    return {AGENT: write + [{"latency_ms": LATENCY_MS, "text": "done"}]}


WARM_UP = {AGENT: [{"text": "warm"}]}


class BackendSampler:
    """Peak number of PostgreSQL backends on the bench database while the level runs."""

    def __init__(self) -> None:
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, c.db_backends())
            time.sleep(0.25)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _busy(before, after) -> float:
    """CPU seconds the whole machine spent not idle between two psutil.cpu_times() readings."""
    def unused(times) -> float:  # idle, waiting for I/O, or taken by the hypervisor
        return times.idle + getattr(times, "iowait", 0) + getattr(times, "steal", 0)

    return sum(after) - sum(before) - (unused(after) - unused(before))


def _redis_cpu() -> float:
    import psutil

    total = 0.0
    for process in psutil.process_iter(["name"]):
        if process.info["name"] == "redis-server":
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
    return total


def level(team, sessions: int, *, concurrency: int, db_threads: int, workers: int, turns: int = TURNS) -> dict:
    import psutil
    from django.db import transaction

    from agents_app.execution.runs import run_start
    from agents_app.models import Event, Session

    pool = [c.Worker(concurrency=concurrency, db_threads=db_threads).start() for _ in range(workers)]
    with BackendSampler() as backends:
        try:
            # Warm each worker (imports, connections) with zero-latency runs, then start all S at once:
            # inside one transaction every run's dispatch is published together, at commit.
            c.runs_wait([run_start(team=team, agent=AGENT, input="warm-up", script=WARM_UP).id
                         for _ in range(20 * workers)], timeout=60)
            for worker in pool:
                worker.reset_peak()
            pg_cpu = c.pg_cpu_seconds()
            machine_cpu, own_cpu, redis_cpu = psutil.cpu_times(), psutil.Process().cpu_times(), _redis_cpu()
            with transaction.atomic():
                ids = [run_start(team=team, agent=AGENT, input="Wait for the model", script=script(turns)).id
                       for _ in range(sessions)]
            c.runs_wait(ids, timeout=240)
            worker_cpu = sum(w.cpu_used() for w in pool)
            machine_busy = _busy(machine_cpu, psutil.cpu_times())
            own = psutil.Process().cpu_times()
            bench_cpu = own.user + own.system - own_cpu.user - own_cpu.system
            redis_cpu = _redis_cpu() - redis_cpu
        finally:
            for worker in pool:
                worker.stop()
    time.sleep(0.5)  # the worker's backends exit and are reaped: their CPU moves to the postmaster's children
    pg_cpu = c.pg_cpu_seconds() - pg_cpu
    rows = list(Event.objects.filter(run_id__in=ids).order_by("run_id", "seq")
                .values_list("session_id", "type", "created_at"))
    starts = [at for _, kind, at in rows if kind == "session_start"]
    ends = [at for _, kind, at in rows if kind == "session_end"]
    steps = sum(1 for _, kind, _ in rows if kind == "llm_response")
    window = (max(ends) - min(starts)).total_seconds()
    by_session: dict = {}
    for session_id, kind, at in rows:
        if kind == "llm_request":
            by_session.setdefault(session_id, []).append(at)
    step_times = [(b - a).total_seconds() for times in by_session.values() for a, b in itertools.pairwise(times)]
    # The start: when each session was claimed (its activation's dispatched_at), began (session_start) and first
    # asked its model (llm_request).
    claimed = dict(Session.objects.filter(run_id__in=ids).values_list("id", "activation__dispatched_at"))
    began = {session_id: at for session_id, kind, at in rows if kind == "session_start"}
    waits = [((began[session_id] - claimed[session_id]).total_seconds(), (times[0] - began[session_id]).total_seconds())
             for session_id, times in by_session.items() if claimed.get(session_id) and session_id in began]
    # Steady state: while every session of the level was running (last start .. first end).
    all_in, first_out = max(starts), min(ends)
    steady_window = (first_out - all_in).total_seconds()
    steady_steps = sum(1 for _, kind, at in rows if kind == "llm_response" and all_in <= at <= first_out)
    return {
        "turns": turns, "steady_window": steady_window,
        "steady": steady_steps / steady_window if steady_window >= 3 else None,  # whole turns: too coarse below
        "sessions": sessions, "steps": steps, "window": window, "achieved": steps / window, "ideal": sessions / 1.0,
        "start_spread": (max(starts) - min(starts)).total_seconds(), "step_times": step_times,
        "claims": len(set(claimed.values())),
        "last_claim": (max(claimed.values()) - min(starts)).total_seconds(),
        "claim_to_start": [claim_wait for claim_wait, _ in waits], "start_to_model": [first for _, first in waits],
        "peak_rss": sum(w.peak_rss for w in pool), "backends": backends.peak, "events": len(rows),
        "worker_cpu": worker_cpu, "machine_busy": machine_busy, "bench_cpu": bench_cpu,
        "push_failed": sum(w.log_count("event push failed") for w in pool), "redis_cpu": redis_cpu, "pg_cpu": pg_cpu,
        "command": pool[0].command_line() + (f"  (x{workers} processes)" if workers > 1 else ""),
    }


def _p50_p95(seconds: list[float]) -> str:
    return f"p50 {c.percentile(seconds, 50) * 1000:.0f} ms, p95 {c.percentile(seconds, 95) * 1000:.0f} ms"


def report(result: dict) -> None:
    ratio = result["achieved"] / result["ideal"]
    ideal_window = result["turns"] * LATENCY_MS / 1000
    c.say(f"  {result['sessions']:>3} sessions: {result['steps']} steps in {result['window']:.2f} s "
          f"(ideal {ideal_window:.0f} s) -> {result['achieved']:.1f} steps/s vs ideal {result['ideal']:.0f} "
          f"= {ratio:.0%}; step p50 {c.percentile(result['step_times'], 50) * 1000:.0f} ms, "
          f"p95 {c.percentile(result['step_times'], 95) * 1000:.0f} ms; sessions started over "
          f"{result['start_spread']:.2f} s; peak RSS {c.mib(result['peak_rss'])}; "
          f"peak PG backends {result['backends']}; {result['events'] / result['window']:.0f} events/s; "
          f"CPU: worker {result['worker_cpu'] / result['window']:.2f} cores, "
          f"Postgres {result['pg_cpu'] / result['window']:.2f} cores "
          f"({result['worker_cpu'] / result['steps'] * 1000:.0f} + {result['pg_cpu'] / result['steps'] * 1000:.0f} ms "
          f"CPU per step); whole machine {result['machine_busy'] / result['window']:.2f} of {c.os.cpu_count()} cores busy "
          f"(Redis {result['redis_cpu'] / result['window']:.2f}, this script {result['bench_cpu'] / result['window']:.2f}, "
          f"other {(result['machine_busy'] - result['worker_cpu'] - result['pg_cpu'] - result['bench_cpu'] - result['redis_cpu']) / result['window']:.2f})")
    if result["steady"] is not None:
        c.say(f"       steady state (all {result['sessions']} sessions running, {result['steady_window']:.1f} s): "
              f"{result['steady']:.1f} steps/s vs ideal {result['ideal']:.0f} = {result['steady'] / result['ideal']:.0%}")
    c.say(f"       the start: {result['claims']} claims, the last {result['last_claim']:.2f} s after the first "
          f"session_start; claim -> session_start {_p50_p95(result['claim_to_start'])}; session_start -> first "
          f"llm_request {_p50_p95(result['start_to_model'])}")
    if result["push_failed"]:
        c.say(f"       {result['push_failed']} events were not pushed to websockets (\"event push failed\" in "
              "the worker log; their rows are stored)")
    c.say(f"       worker: {result['command']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="10,50,100,200")
    parser.add_argument("--db-threads", type=int, default=12, help="MAS_DB_THREADS of each worker")
    parser.add_argument("--workers", type=int, default=1, help="worker processes (sessions split between them)")
    parser.add_argument("--headroom", type=int, default=8, help="Celery threads beyond the sessions (dispatch tasks)")
    parser.add_argument("--no-demo", action="store_true", help="skip the level on the demo's --concurrency 8")
    parser.add_argument("--keep-db", action="store_true")
    parser.add_argument("--turns", type=int, default=TURNS, help="model turns per session (1 s each)")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    c.say(f"concurrency: scripted model, {LATENCY_MS} ms per turn, {args.turns} turns per session "
          f"({args.turns - 1} x vfs_write + answer)")
    c.say(f"machine {c.machine()}, {c.now_utc()}, load average {c.os.getloadavg()[0]:.2f}")
    c.django_setup()
    c.say(f"database {c.BENCH_DB}: created and migrated in {c.database_create():.1f} s; "
          f"server {c.server_settings()}")
    c.redis_flush()
    results = []
    try:
        team = c.team_with_agent(slug="bench-concurrency", agent=AGENT)
        for sessions in levels:
            per_worker = -(-sessions // args.workers)
            result = level(team, sessions, concurrency=per_worker + args.headroom, db_threads=args.db_threads,
                           workers=args.workers, turns=args.turns)
            report(result)
            results.append(result)
        if not args.no_demo:
            c.say("  the demo's worker settings (--pool threads --concurrency 8), for comparison:")
            result = level(team, 50, concurrency=8, db_threads=args.db_threads, workers=1, turns=args.turns)
            report(result)
            results.append(result)
    finally:
        if not args.keep_db:
            c.database_drop()
        c.redis_flush()
    c.say("\nsummary (sessions: achieved / ideal steps/s = ratio, peak RSS)")
    for r in results:
        steady = f", steady state {r['steady'] / r['ideal']:4.0%}" if r["steady"] is not None else ""
        c.say(f"  {r['sessions']:>3}: {r['achieved']:6.1f} / {r['ideal']:3.0f} = {r['achieved'] / r['ideal']:4.0%}{steady}, "
              f"{c.mib(r['peak_rss'])}  [{r['command'].split(' --concurrency ')[1].split()[0]} Celery threads]")


if __name__ == "__main__":
    main()
