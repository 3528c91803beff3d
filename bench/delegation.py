#!/usr/bin/env python3
"""A parent delegating to 50 children in one turn: how soon does it resume, and what does it hold meanwhile?

One real worker; the parent's first turn calls ``delegate`` 50 times (waiting,
the default); each child is one scripted turn of ``latency_ms=1000``. While the
children work, the worker's busy task threads are sampled (``celery inspect
active``): a suspended parent holds none, so every busy thread is a child's.

Figures per run and over ``--repeats`` runs:

- resume delay: the parent's resumed ``session_start`` minus the last child's
  ``session_end`` (both stamped by the worker when they happened);
- wall time of the run against the ideal (two parent turns + one 1 s child turn);
- busy worker task threads while the parent waited: the parent's (ideal 0)
  and the children's, as sampled.

    .venv/bin/python bench/delegation.py [--children 50] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402

LATENCY_MS = 1000


def script(children: int) -> dict:
    calls = [{"name": "delegate", "arguments": {"agent": "child", "task": f"Part {i}"}} for i in range(children)]
    return {"parent": [{"tool_calls": calls}, {"text": "all parts done"}],
            "child": [{"text": "part done", "latency_ms": LATENCY_MS}] * children}


class ThreadSampler:
    """Samples the worker's active tasks: which activation each busy task thread is executing."""

    def __init__(self, worker_name: str) -> None:
        from mas_project.celery import app

        self.inspect = app.control.inspect([worker_name], timeout=0.5)
        self.samples: list[tuple[datetime, datetime, list[str]]] = []  # sent, answered, busy activations
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            sent = datetime.now(UTC)
            active = self.inspect.active() or {}
            busy = [str(task["args"][0]) for tasks in active.values() for task in tasks]
            self.samples.append((sent, datetime.now(UTC), busy))
            time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--children", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    c.say(f"delegation: 1 parent -> {args.children} children in one turn, {LATENCY_MS} ms per child turn, "
          f"{args.repeats} runs")
    c.say(f"machine {c.machine()}, {c.now_utc()}, load average {c.os.getloadavg()[0]:.2f}")
    c.django_setup()
    c.say(f"database {c.BENCH_DB}: created and migrated in {c.database_create():.1f} s")
    c.redis_flush()
    from agents_app.kinds import AGENT
    from mas_core.definitions.services import definition_parse, definition_save
    from agents_app.execution.runs import run_start
    from agents_app.models import Activation, Event

    team = c.team_with_agent(slug="delegation-bench", agent="parent")
    definition_save(kind=AGENT, team=team, parsed=definition_parse(
        kind=AGENT, team=team, text="---\nname: child\n---\n\nYou work.\n"))
    limits = {"max_fanout": args.children, "max_concurrency": args.children + 1}
    worker = c.Worker(concurrency=args.children + 8).start()
    rows = []
    try:
        c.runs_wait([run_start(team=team, agent="parent", input="warm", limits=limits,
                               script=script(args.children)).id], timeout=120)
        for _ in range(args.repeats):
            sampler = ThreadSampler(worker.name)
            run = run_start(team=team, agent="parent", input="split", limits=limits, script=script(args.children))
            parent = Activation.objects.get(run=run, kind="root")
            sampler.thread.start()
            [done] = c.runs_wait([run.id], timeout=120)
            sampler.stop.set()
            sampler.thread.join()
            assert done.status == "succeeded", (done.status, done.error)
            events = list(Event.objects.filter(run=run).order_by("seq"))
            suspended = next(e.created_at for e in events if e.type == "session_suspended")
            resumed = next(e.created_at for e in events if e.type == "session_start" and e.data["resumed"])
            last_child = max(e.created_at for e in events if e.type == "session_end" and e.agent == "child")
            # Samples taken while the parent waited (between its suspension and its resumption).
            # Samples wholly inside the wait: asked after the suspension, answered before the resumption.
            waiting = [busy for sent, answered, busy in sampler.samples if suspended < sent and answered < resumed]
            busy = [len(s) for s in waiting if s]
            rows.append({
                "resume_delay": (resumed - last_child).total_seconds(),
                "wait": (resumed - suspended).total_seconds(),
                "wall": (done.finished_at - done.created_at).total_seconds(),
                "parent_busy": max((s.count(str(parent.id)) for s in waiting), default=0),
                "children_busy": max(busy, default=0),
                "samples": len(waiting),
            })
    finally:
        worker.stop()
    c.say("")
    c.say("| run | resume delay (last child end -> parent resumed) | parent waited | wall | "
          "samples | max busy task threads: parent | children |")
    c.say("|---|---|---|---|---|---|---|")
    for index, row in enumerate(rows, start=1):
        c.say(f"| {index} | {row['resume_delay'] * 1000:.0f} ms | {row['wait']:.2f} s | {row['wall']:.2f} s | "
              f"{row['samples']} | {row['parent_busy']} | {row['children_busy']} |")
    delays = [row["resume_delay"] for row in rows]
    c.say(f"\nresume delay: median {statistics.median(delays) * 1000:.0f} ms, max {max(delays) * 1000:.0f} ms "
          f"(target: within 300 ms)")
    c.say(f"parent's task threads busy while it waited, over all samples: "
          f"{max(row['parent_busy'] for row in rows)} (target 0)")
    c.database_drop()
    c.redis_flush()


if __name__ == "__main__":
    main()
