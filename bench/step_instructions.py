#!/usr/bin/env python3
"""What a step costs the worker in instructions: a count that does not drift with a noisy machine.

Timed benches here move by 15-30 % between runs of the same tree (a shared VM); a change of 5 % cannot be
seen in them. This script counts the instructions the worker's process executes (``valgrind --tool=callgrind``,
which counts, not times), for the same work as ``kernel_overhead.py``'s phase [2]: runs of a zero-latency
scripted model, ``--steps`` tool steps each (one ``vfs_write`` per turn), one run at a time, through the real
worker path in one process — the scheduler's claim (``agents_app.scheduler.loop.WorkerLoop``), the session's
begin, prepare, loop and settle, its writes to PostgreSQL and pushes to Redis — less Celery, which the worker
only uses to start. The worker's count is its loop's thread and its database threads': the process's main
thread starts the runs (``run_start``, the API's part) and waits for them, and is left out (it was counted
until 2026-11-28: some 40 % of a run's count beside its steps). PostgreSQL's own work is not counted (another
process). What a worker does by the clock
rather than by the step (its beat, the scheduler's poll, the sessions' monitor, an event written 20 ms after
it was made when nothing took it along) is put out of the way: under callgrind's slowed clock it would count
as the steps' work, and more so on a busier machine.

Each way runs twice under callgrind, with few runs and with more; the difference, divided by the steps it
added, is the count per step (start, setup and imports cancel out). The same is done for the kernel alone
(``run_session`` with an in-memory store, as ``kernel_overhead.py``'s [1]) and for LangGraph's react agent
with its Postgres checkpointer (``durability=sync``, as its [4]), the client side in both.

    .venv/bin/python bench/step_instructions.py [--steps 10] [--runs 2,6]

About 5 minutes (callgrind runs Python some 50 times slower). Needs valgrind (Debian's package).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

AGENT = "stepper"
# The worker's beat and the scheduler's poll, far apart: their work would count by the (slowed) clock.
# The live delay too: callgrind makes a step some 50 times longer than the 20 ms after which a watched event
# is written on its own, which at full speed the step's next write takes along (kernel_overhead's "statement"
# count: 2.1 writes a step).
QUIET = {"MAS_WORKER_BEAT_S": "600", "MAS_WORKER_DEAD_S": "3000", "MAS_SCHEDULER_POLL_S": "600",
         "MAS_SESSION_STALE_S": "600", "MAS_LIVE_EVENT_DELAY_MS": "600000", "PYTHONHASHSEED": "0"}


# -- the children: what runs under callgrind ------------------------------------------------------------


def child_worker(runs: int, steps: int) -> None:
    """``runs`` runs one at a time through a WorkerLoop on this process's session loop (as in a worker)."""
    import kernel_overhead

    from agents_app.execution import store
    from agents_app.execution.runs import run_start
    from agents_app.scheduler.loop import WorkerLoop
    from mas_core.models import Team
    from mas_core.runner import runner

    # The sessions' monitor looks for cancels once a second, whatever the sessions do: not a step's work.
    store._monitor_tick = lambda *, session_ids, watched: set()
    team = Team.objects.get(slug="bench-instructions")
    worker = WorkerLoop(name=f"instructions-{os.getpid()}", queue=c.BENCH_QUEUE, slots=50)
    serving = asyncio.run_coroutine_threadsafe(worker.serve(), runner.loop())
    for _ in range(runs):
        run = run_start(team=team, agent=AGENT, input="Write notes", script=kernel_overhead.script(steps))
        # Waited for in memory, not by reading the run again and again: what a wait costs here grows with
        # the (slowed, uneven) clock, and would be counted as the worker's.
        while not worker.sessions:  # claimed: its session is a task of the loop ...
            time.sleep(0.02)
        while worker.sessions:  # ... until it settled the run
            time.sleep(0.02)
        c.runs_wait([run.id], timeout=1)  # raises unless it succeeded
    worker.stopping = True
    worker.wake.set()
    serving.result(timeout=600)


def child_plain(runs: int, steps: int) -> None:
    import kernel_overhead

    for _ in range(runs):
        asyncio.run(kernel_overhead.plain_session(steps))


def child_langgraph(runs: int, steps: int) -> None:
    import _langgraph

    _langgraph.react_step_times(c.conninfo(dbname=c.BENCH_DB), sessions=runs, steps=steps, durability="sync")


CHILDREN = {"worker": child_worker, "plain": child_plain, "langgraph": child_langgraph}
LABELS = {"worker": "MAS worker", "plain": "kernel alone (in-memory store)",
          "langgraph": "LangGraph react + Postgres checkpointer, sync"}


# -- the parent --------------------------------------------------------------------------------------


def counted(way: str, runs: int, steps: int) -> int:
    """Instructions callgrind counted for ``runs`` runs of ``way`` in a fresh process: all its threads, but for
    the worker, whose runs the main thread starts (the API's part) and waits for, the threads of its loop and
    of its database hops only."""
    with tempfile.TemporaryDirectory(prefix="mas-callgrind-") as out:
        command = ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out}/cg",
                   sys.executable, __file__, "--child", way, "--runs", str(runs), "--steps", str(steps)]
        result = subprocess.run(command, cwd=c.ROOT, env={**os.environ, **c.ENV, **QUIET}, capture_output=True,
                                text=True, check=False)
        if result.returncode or "Collected" not in result.stderr:
            raise SystemExit(f"{way} x {runs} under callgrind failed ({result.returncode}):\n{result.stderr[-3000:]}")
        threads = {path.name: _total(path) for path in Path(out).glob("cg-*")}  # cg-01 is the main thread
    if way == "worker":
        threads.pop("cg-01")
    return sum(threads.values())


def _total(path: Path) -> int:
    found = re.search(r"^totals: (\d+)", path.read_text(errors="replace"), re.MULTILINE)
    if found is None:
        raise SystemExit(f"no totals in {path}")
    return int(found.group(1))


def per_step(way: str, few: int, more: int, steps: int) -> float:
    return (counted(way, more, steps) - counted(way, few, steps)) / ((more - few) * steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--runs", default="2,6", help="the two numbers of runs whose difference is counted")
    parser.add_argument("--ways", default="worker,plain,langgraph",
                        help="which to count (an A/B of the worker needs only 'worker')")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        c.django_setup()
        CHILDREN[args.child](int(args.runs), args.steps)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    few, more = (int(n) for n in args.runs.split(","))
    ways = [way for way in args.ways.split(",") if way]
    unknown = set(ways) - set(CHILDREN)
    if unknown or not ways:
        raise SystemExit(f"--ways: unknown {sorted(unknown)}; choose among {sorted(CHILDREN)}")
    c.say(f"step_instructions: {few} and {more} runs of {args.steps} tool steps, zero-latency scripted model, "
          "counted by callgrind")
    c.say(f"machine {c.machine()}, {c.now_utc()}, load average {os.getloadavg()[0]:.2f}")
    c.django_setup()
    c.say(f"database {c.BENCH_DB}: created and migrated in {c.database_create():.1f} s")
    c.redis_flush()
    started = time.monotonic()
    try:
        c.team_with_agent(slug="bench-instructions", agent=AGENT,
                          frontmatter=f"limits:\n  max_steps: {args.steps + 5}\n")
        figures = {way: per_step(way, few, more, args.steps) for way in ways}
    finally:
        c.database_drop()
        c.redis_flush()
    c.say(f"\ninstructions per step (whole runs: claim, begin, prepare, {args.steps} steps, settle, over "
          f"{args.steps} steps); the worker's loop and database threads, the client's process for the others:")
    for way, figure in figures.items():
        c.say(f"  {LABELS[way]:<48} {figure / 1e6:8.3f} M")
    ratios = [f"MAS / {LABELS[way].split(' ')[0]} {figures['worker'] / figures[way]:.2f}"
              for way in ("langgraph", "plain") if "worker" in figures and way in figures]
    c.say(f"ratios: {'; '.join(ratios) or '-'} ({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
