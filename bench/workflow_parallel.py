#!/usr/bin/env python3
"""Do a workflow's independent steps really run at the same time?

Each step is one model turn of ``latency_ms=1000`` (scripted provider), run on
one real worker. Three workflows, each started ``--repeats`` times:

- ``chain``: a -> b (two steps one after the other; ideal 2 s),
- ``pair``: a and b, independent (ideal 1 s: they overlap),
- ``fan``: plan -> four parallel steps -> merge (ideal 3 s).

Figures: wall time from the run's creation to its end (median), against the
ideal — the difference is the workflow's scheduling overhead (dispatch, session
start, step bookkeeping) — and the pair/chain ratio (ideal 0.5).

    .venv/bin/python bench/workflow_parallel.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402

LATENCY_MS = 1000
FLOWS = {
    "chain": ("inputs: [topic]\nsteps:\n- id: a\n  agent: a\n  prompt: 'A {topic}'\n  outputs: [out]\n"
              "- id: b\n  agent: b\n  depends_on: [a]\n  prompt: 'B {a.out}'\n  outputs: [out]\n", 2.0),
    "pair": ("inputs: [topic]\nsteps:\n- id: a\n  agent: a\n  prompt: 'A {topic}'\n  outputs: [out]\n"
             "- id: b\n  agent: b\n  prompt: 'B {topic}'\n  outputs: [out]\n", 1.0),
    "fan": ("inputs: [topic]\nsteps:\n- id: plan\n  agent: p\n  prompt: 'Plan {topic}'\n  outputs: [out]\n"
            + "".join(f"- id: w{i}\n  agent: w{i}\n  depends_on: [plan]\n  prompt: 'Work {{plan.out}}'\n"
                      f"  outputs: [out]\n" for i in range(4))
            + "- id: merge\n  agent: m\n  depends_on: [w0, w1, w2, w3]\n  prompt: 'Merge'\n  outputs: [out]\n", 3.0),
}
AGENTS = ["a", "b", "p", "w0", "w1", "w2", "w3", "m"]
SCRIPT = {agent: [{"text": f"{agent} done", "latency_ms": LATENCY_MS}] for agent in AGENTS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    c.say(f"workflow_parallel: scripted model, {LATENCY_MS} ms per step, {args.repeats} runs per workflow")
    c.say(f"machine {c.machine()}, {c.now_utc()}, load average {c.os.getloadavg()[0]:.2f}")
    c.django_setup()
    c.say(f"database {c.BENCH_DB}: created and migrated in {c.database_create():.1f} s")
    c.redis_flush()
    from agents_app.kinds import AGENT
    from workflows_app.kinds import WORKFLOW
    from mas_core.definitions.services import definition_parse, definition_save
    from workflows_app.services import workflow_run_start

    team = c.team_with_agent(slug="wf-bench", agent="a")
    for agent in AGENTS[1:]:
        text = f"---\nname: {agent}\n---\n\nYou work.\n"
        definition_save(kind=AGENT, team=team, parsed=definition_parse(kind=AGENT, team=team, text=text))
    for name, (steps, _) in FLOWS.items():
        text = f"---\nname: {name}\n{steps}---\n"
        definition_save(kind=WORKFLOW, team=team, parsed=definition_parse(kind=WORKFLOW, team=team, text=text))
    worker = c.Worker(concurrency=16).start()
    walls: dict[str, list[float]] = {}
    try:
        warm = {agent: [{"text": "warm"}] for agent in AGENTS}
        c.runs_wait([workflow_run_start(team=team, workflow="fan", inputs={"topic": "warm"}, script=warm).id],
                    timeout=60)
        for _ in range(args.repeats):
            for name in FLOWS:
                run = workflow_run_start(team=team, workflow=name, inputs={"topic": "t"}, script=SCRIPT)
                [done] = c.runs_wait([run.id], timeout=60)
                walls.setdefault(name, []).append((done.finished_at - done.created_at).total_seconds())
    finally:
        worker.stop()
    c.say("")
    c.say("| workflow | steps | ideal | median wall | min | max | overhead (median - ideal) |")
    c.say("|---|---|---|---|---|---|---|")
    for name, (steps, ideal) in FLOWS.items():
        values = walls[name]
        c.say(f"| {name} | {steps.count('- id:')} | {ideal:.1f} s | {statistics.median(values):.3f} s | "
              f"{min(values):.3f} s | {max(values):.3f} s | {statistics.median(values) - ideal:+.3f} s |")
    ratio = statistics.median(walls["pair"]) / statistics.median(walls["chain"])
    c.say(f"\npair / chain = {ratio:.2f} (ideal 0.50: two 1 s steps at the same time vs one after the other)")
    c.database_drop()
    c.redis_flush()


if __name__ == "__main__":
    main()
