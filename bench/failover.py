#!/usr/bin/env python3
"""Failover: how soon a SIGKILLed worker's sessions resume on another worker, each tool call still once.

Per try, two fresh worker processes (``_common.Worker``) share the bench
queue; each is warmed with zero-latency runs. Then ``--runs`` (40) runs start
in one transaction, each one agent of ``--turns`` (5) scripted model turns of
``--turn-s`` (1 s) ``latency_ms``: a ``vfs_write`` of its own file every turn
but the last, which answers. Once every run has a ``tool_result`` (each made
at least one tool call), the script SIGKILLs the worker process holding the
most running sessions (``Session.worker`` is ``host:pid``) and waits for
every run to end. The survivor finds the dead worker silent for
``MAS_WORKER_DEAD_S`` (``--dead-s``, 2.5 s; it beats every
``MAS_WORKER_BEAT_S``, 0.5 s) and resumes its sessions from their
checkpoints.

Figures per try, for each session the killed worker held (from the rows'
timestamps and the kill's wall clock; one machine):

- the killed worker's last beat before the kill (``Worker.heartbeat_at``):
  it counts as dead ``MAS_WORKER_DEAD_S`` after that beat, not after the kill;
- hand-over: kill .. its ``retry`` event (``session_resume``: the survivor
  saw the worker dead and queued the session again);
- resume: kill .. its ``session_start`` event with ``resumed`` true (the
  survivor claimed it and began it again);
- kill .. its run's ``finished_at``; and the run's extra time: its duration
  (first ``session_start`` .. ``finished_at``) less the median duration of
  the runs the kill did not touch (less ``--turns`` x ``--turn-s`` when the
  killed worker held them all).

Checks (a failed one is printed, and the script exits 1 at the end): every
run succeeded; every moved session resumed on the survivor; every tool call
id of a run has exactly one ``tool_result``; every run has ``--turns`` - 1
files, each with one version (``WorkspaceFileVersion``) — a tool call made
twice would write a second. "Tool calls repeated" counts tool results beyond
the first per call id plus file versions beyond the first per file: it must
be 0.

    .venv/bin/python bench/failover.py [--runs 40] [--turns 5] [--turn-s 1.0] [--tries 2] [--dead-s 2.5] [--keep-db]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

AGENT = "worker"
FINISHED = ("succeeded", "failed", "cancelled")
WARM_UP = {AGENT: [{"text": "warm"}]}


def script(turns: int, turn_s: float) -> dict:
    latency = round(turn_s * 1000)
    writes = [{"latency_ms": latency, "tool_calls": [
        {"name": "vfs_write", "arguments": {"path": f"out/{i}.md", "content": f"part {i}"}}]} for i in range(turns - 1)]
    return {AGENT: writes + [{"latency_ms": latency, "text": "done"}]}


def wait_until(check, *, timeout: float, what: str, poll: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(poll)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def workers_start(team, *, concurrency: int, db_threads: int) -> list[c.Worker]:
    """Two fresh worker processes, both registered with the scheduler and warmed."""
    from agents_app.execution.runs import run_start
    from agents_app.models import Worker as WorkerRow

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as starting:  # side by side: a worker takes 10-25 s to start on a busy machine
        pool = list(starting.map(lambda _: c.Worker(concurrency=concurrency, db_threads=db_threads).start(), range(2)))
    pids = {str(w.process.pid) for w in pool}
    wait_until(lambda: pids <= {name.rsplit(":", 1)[1] for name in WorkerRow.objects.values_list("name", flat=True)},
               timeout=30, what="both workers' first beat")
    c.runs_wait([run_start(team=team, agent=AGENT, input="warm-up", script=WARM_UP).id for _ in range(20)],
                timeout=60)
    return pool


def one_try(team, args) -> dict:
    from django.db import transaction
    from django.db.models import Count
    from django.utils import timezone

    from agents_app.execution.runs import run_start
    from agents_app.models import Event, Run, Session, WorkspaceFile, WorkspaceFileVersion
    from agents_app.models import Worker as WorkerRow

    started = time.monotonic()
    pool = workers_start(team, concurrency=args.concurrency, db_threads=args.db_threads)
    ready_s = time.monotonic() - started
    try:
        mark: dict = {}
        with transaction.atomic():
            # Registered first, so it runs at commit before the runs' own hooks (their NOTIFY): the clock
            # starts when the workers can first see the runs.
            transaction.on_commit(lambda: mark.setdefault("committed", time.monotonic()))
            ids = [run_start(team=team, agent=AGENT, input="Write, then answer",
                             script=script(args.turns, args.turn_s)).id for _ in range(args.runs)]
        committed = mark["committed"]

        def all_called() -> bool:
            return (Event.objects.filter(run_id__in=ids, type="tool_result").values("run_id").distinct().count()
                    == len(ids))

        wait_until(all_called, timeout=60 + args.turns * args.turn_s, what="every run's first tool call")
        held = Counter(dict(Session.objects.filter(run_id__in=ids, status="running").values_list("worker")
                            .annotate(n=Count("id")).values_list("worker", "n")))
        holder, _ = held.most_common(1)[0]
        [victim] = [w for w in pool if holder.endswith(f":{w.process.pid}")]
        [survivor] = [w for w in pool if w is not victim]
        moved = dict(Session.objects.filter(run_id__in=ids, status="running", worker=holder)
                     .values_list("id", "run_id"))
        last_beat = WorkerRow.objects.filter(name=holder).values_list("heartbeat_at", flat=True).first()
        os.killpg(victim.process.pid, signal.SIGKILL)
        killed_at = timezone.now()
        killed = time.monotonic()
        victim.process.wait(10)
        ended = wait_until(lambda: not Run.objects.filter(pk__in=ids).exclude(status__in=FINISHED).exists(),
                           timeout=120 + args.turns * args.turn_s, what="every run to end", poll=0.1)
        waited = time.monotonic() - killed
    finally:
        stopping = time.monotonic()
        for worker in pool:
            worker.stop()
        stop_s = time.monotonic() - stopping
    assert ended
    survivor_name = next(n for n in held if n.endswith(f":{survivor.process.pid}")) if len(held) > 1 else None
    runs = {r.id: r for r in Run.objects.filter(pk__in=ids)}
    events = list(Event.objects.filter(run_id__in=ids, type__in=["session_start", "retry", "tool_result"])
                  .values_list("run_id", "session_id", "type", "created_at", "data"))
    first_start: dict = {}
    resumed: dict = {}
    handed: dict = {}
    results: Counter = Counter()
    for run_id, session_id, kind, at, data in events:
        if kind == "session_start":
            first_start[run_id] = min(at, first_start.get(run_id, at))
            if data.get("resumed") and at >= killed_at and session_id in moved:
                resumed[session_id] = min(at, resumed.get(session_id, at))
        elif kind == "retry" and data.get("what") == "session_resume" and session_id in moved:
            handed[session_id] = min(at, handed.get(session_id, at))
        elif kind == "tool_result":
            results[(run_id, data["id"])] += 1
    versions = Counter(WorkspaceFileVersion.objects.filter(run_id__in=ids).values_list("run_id", "path"))
    files = list(WorkspaceFile.objects.filter(run_id__in=ids).values_list("run_id", "path", "version"))
    duration = {run_id: (run.finished_at - first_start[run_id]).total_seconds()
                for run_id, run in runs.items() if run.finished_at and run_id in first_start}
    untouched = [d for run_id, d in duration.items() if run_id not in set(moved.values())]
    baseline = statistics.median(untouched) if untouched else args.turns * args.turn_s
    workers_after = dict(Session.objects.filter(pk__in=list(moved)).values_list("id", "worker"))
    expected_calls = args.runs * (args.turns - 1)
    problems = []
    statuses = Counter(r.status for r in runs.values())
    if statuses["succeeded"] != len(ids):
        problems.append(f"runs not succeeded: {dict(statuses)}")
    if set(resumed) != set(moved):
        problems.append(f"{len(set(moved) - set(resumed))} of {len(moved)} moved sessions never resumed")
    if survivor_name and any(w != survivor_name for w in workers_after.values()):
        problems.append(f"moved sessions not on the survivor: {Counter(workers_after.values())}")
    if len(results) != expected_calls:
        problems.append(f"{len(results)} tool call ids with a result, expected {expected_calls}")
    if len(versions) != expected_calls or len(files) != expected_calls or any(v != 1 for *_, v in files):
        problems.append(f"{len(files)} files ({len(versions)} with versions), expected {expected_calls} at version 1")
    return {
        "held": dict(held), "moved": len(moved), "victim": holder, "survivor": survivor_name,
        "kill_after_s": killed - committed, "waited_s": waited,
        "beat_age": (killed_at - last_beat).total_seconds() if last_beat else float("nan"),
        "handover": [(handed[s] - killed_at).total_seconds() for s in moved if s in handed],
        "resume": [(resumed[s] - killed_at).total_seconds() for s in moved if s in resumed],
        "to_end": [(runs[r].finished_at - killed_at).total_seconds() for r in set(moved.values())
                   if runs[r].finished_at],
        "extra": [duration[r] - baseline for r in set(moved.values()) if r in duration],
        "baseline": baseline, "baseline_from": "untouched runs' median" if untouched else "turns x turn-s",
        "repeated": sum(n - 1 for n in results.values()) + sum(n - 1 for n in versions.values()),
        "tool_calls": sum(results.values()), "statuses": dict(statuses), "problems": problems,
        "load": os.getloadavg()[0], "ready_s": ready_s, "stop_s": stop_s,
        "dead_s": args.dead_s,
    }


def dist(values: list[float]) -> str:
    if not values:
        return "none"
    return (f"p50 {c.percentile(values, 50):.2f} s, p95 {c.percentile(values, 95):.2f} s, "
            f"max {max(values):.2f} s")


def report(index: int, r: dict) -> None:
    c.say(f"  try {index}: killed {r['victim']} {r['kill_after_s']:.2f} s after the runs' commit, holding "
          f"{r['moved']} of the running sessions {r['held']}; all runs ended {r['waited_s']:.1f} s after the kill "
          f"(load {r['load']:.2f}; workers started and warmed in {r['ready_s']:.1f} s, stopped in {r['stop_s']:.1f} s)")
    c.say(f"{'':>9}its last beat {r['beat_age']:.2f} s before the kill, so dead {r['dead_s'] - r['beat_age']:.2f} s "
          f"after the kill; first hand-over {min(r['handover'], default=float('nan')):.2f} s after the kill")
    c.say(f"{'':>9}hand-over (retry event) {dist(r['handover'])}; resumed (session_start) {dist(r['resume'])}")
    c.say(f"{'':>9}kill .. moved run's end {dist(r['to_end'])}; moved runs' extra time over the "
          f"{r['baseline_from']} ({r['baseline']:.2f} s): {dist(r['extra'])}")
    c.say(f"{'':>9}runs {r['statuses']}; {r['tool_calls']} tool results, repeated {r['repeated']}"
          + "".join(f"\n{'':>9}CHECK FAILED: {p}" for p in r["problems"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="runs started at once per try")
    parser.add_argument("--turns", type=int, default=5, help="model turns per run (all but the last write a file)")
    parser.add_argument("--turn-s", type=float, default=1.0, help="latency of each model turn")
    parser.add_argument("--tries", type=int, default=2, help="kills, each with two fresh workers")
    parser.add_argument("--dead-s", type=float, default=2.5, help="MAS_WORKER_DEAD_S of the workers")
    parser.add_argument("--concurrency", type=int, default=8, help="Celery threads of each worker (not sessions)")
    parser.add_argument("--db-threads", type=int, default=12, help="MAS_DB_THREADS of each worker")
    parser.add_argument("--keep-db", action="store_true", help="leave mas_bench in place for inspection")
    args = parser.parse_args()
    if args.turns < 2:
        parser.error("--turns must be at least 2: the kill waits for every run's first tool call")
    os.environ["MAS_WORKER_DEAD_S"] = c.ENV["MAS_WORKER_DEAD_S"] = f"{args.dead_s:g}"
    began = time.monotonic()
    c.say(f"failover: {args.runs} runs of {args.turns} scripted turns of {args.turn_s:g} s ({args.turns - 1} x "
          f"vfs_write + answer) on two workers; once every run made a tool call, SIGKILL the worker holding the "
          f"most sessions; {args.tries} tries, fresh workers each; MAS_WORKER_DEAD_S={args.dead_s:g}")
    c.say(f"machine {c.machine()}, {c.now_utc()}, load average {os.getloadavg()[0]:.2f}")
    c.django_setup()
    from django.conf import settings

    c.say(f"database {c.BENCH_DB}: created and migrated in {c.database_create():.1f} s; "
          f"MAS_WORKER_BEAT_S={settings.MAS_WORKER_BEAT_S:g}, MAS_WORKER_DEAD_S={settings.MAS_WORKER_DEAD_S:g}, "
          f"MAS_SCHEDULER_POLL_S={settings.MAS_SCHEDULER_POLL_S:g}")
    c.redis_flush()
    results: list[dict] = []
    try:
        team = c.team_with_agent(slug="bench-failover", agent=AGENT, frontmatter="tools: [vfs_write]\n")
        c.say(f"workers: {c.Worker(concurrency=args.concurrency, db_threads=args.db_threads).command_line()}  (x2)")
        for index in range(1, args.tries + 1):
            result = one_try(team, args)
            report(index, result)
            results.append(result)
    finally:
        if not args.keep_db:
            c.database_drop()
        c.redis_flush()
    handover = [v for r in results for v in r["handover"]]
    resume = [v for r in results for v in r["resume"]]
    extra = [v for r in results for v in r["extra"]]
    repeated = sum(r["repeated"] for r in results)
    problems = [p for r in results for p in r["problems"]]
    c.say(f"\nsummary ({args.tries} kills, {args.runs} runs x {args.turns} turns of {args.turn_s:g} s, "
          f"MAS_WORKER_DEAD_S={args.dead_s:g}; bench took {time.monotonic() - began:.0f} s)")
    c.say(f"  sessions moved: {sum(r['moved'] for r in results)} ({', '.join(str(r['moved']) for r in results)})")
    c.say(f"  kill .. hand-over: {dist(handover)}")
    c.say(f"  kill .. resumed session_start: {dist(resume)} (target: within 5 s)")
    c.say(f"  worst moved run's extra time: {max(extra):.2f} s" if extra else "  worst moved run's extra time: none")
    c.say(f"  tool calls repeated: {repeated} (must be 0); checks failed: {len(problems)}")
    if problems or repeated:
        sys.exit(1)


if __name__ == "__main__":
    main()
