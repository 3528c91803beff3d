#!/usr/bin/env python3
"""What the kernel costs per step when the model costs nothing.

A zero-latency scripted model drives N sessions of M tool steps each (one
``vfs_write`` per model turn, then a final answer). The same loop runs three ways:

1. plain Python: ``run_session`` with an in-memory store and
   ``InMemoryWorkspace`` — no database, no Redis, no Celery (the baseline);
2. through a real Celery worker, one run at a time (per-step latency);
3. through the same worker, all N runs at once (throughput, events/s);
4. in LangGraph 1.2 with its Postgres checkpointer on the same database
   server (``bench/_langgraph.py``; needs ``pip install -e '.[bench]'``) —
   the outside baseline, one thread at a time like [2].

A step is one model turn plus its tool call; its duration is the time between
two consecutive ``llm_request`` events of a session (database ``created_at``
for the worker, ``perf_counter`` for the baseline). The script also counts
what one step writes: events by type, and the row writes PostgreSQL itself
recorded (pg_stat_user_tables) for the bench database.

Where a step's time goes: phase [2] runs again on a second worker started
with ``MAS_PHASES`` set (:mod:`mas_core.phases`), so the hot path times its
phases (model call, budget reserve, context count, gate, tool, checkpoint
staging, events, the writes, the pushes, the database thread hops) and the
script prints each one's calls, wall and CPU milliseconds per step. The
figures of [2] and [3] come from the first worker, without it: its step pays
no clock reads. The script also prints the CPU per step of the worker
process and of the PostgreSQL backends serving the bench database (from
/proc), for phase [2].

    .venv/bin/python bench/kernel_overhead.py [--sessions 20] [--steps 10] [--keep-db]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import itertools
import json
import os
import tempfile

import _common as c
import _langgraph

AGENT = "stepper"


def script(steps: int) -> dict:
    turns = [{"tool_calls": [{"name": "vfs_write", "arguments": {"path": f"notes/{i}.md", "content": f"step {i}"}}]}
             for i in range(steps)]
    return {AGENT: turns + [{"text": "done"}]}


# -- 1. plain Python ---------------------------------------------------------------------


class MemoryStore:
    """The kernel's store with nothing behind it: events and checkpoints kept in lists."""

    def __init__(self) -> None:
        self.events: list[tuple[str, float]] = []
        self.checkpoints: list[dict] = []

    async def checkpoint(self, state, *, before_tools: bool = False) -> None:
        self.checkpoints.append(state.to_dict())  # the same serialisation the database store does

    async def emit(self, type: str, data: dict) -> None:
        self.events.append((type, time.perf_counter()))

    async def cancelled(self) -> bool:
        return False

    async def before_model_call(self, state, *, worst_usd, tier=None) -> None:
        return None

    def after_model_call(self) -> None:
        return None


class PlainModel:
    def __init__(self, provider) -> None:
        self.provider, self.model, self.tier = provider, "scripted", "medium"

    async def complete(self, request, *, on_chunk=None):
        return await self.provider.complete(request, on_chunk=on_chunk)

    def cost(self, response) -> Decimal:
        return Decimal(0)

    def cost_at_most(self, *, prompt_tokens: int, max_tokens: int | None) -> Decimal:
        return Decimal(0)


async def plain_session(steps: int) -> MemoryStore:
    from agents_app.kernel.loop import (
        SessionConfig,
        SessionState,
        ToolResult,
        run_session,
    )
    from agents_app.kernel.prompt import (
        ExecutionContext,
        build_messages,
        build_system_prompt,
    )
    from agents_app.kernel.results import Limits
    from agents_app.llm.scripted import ScriptedProvider
    from tools_app.plugin import ToolContext
    from tools_app.registry import registry_for_agent
    from tools_app.workspace_memory import InMemoryWorkspace

    registry = registry_for_agent(None)
    context = ToolContext(run_id="plain", agent=AGENT, session_id="plain", workspace=InMemoryWorkspace())

    async def call_tool(call):
        outcome = await registry.call(call.name, call.arguments, context)
        return ToolResult(ok=outcome.ok, content=outcome.content, error_kind=outcome.error_kind)

    system = build_system_prompt(body="You work.", context="", examples=[], tier="medium")
    messages, _ = build_messages(system=system, execution=ExecutionContext(task="Write notes",
                                                                         output_dir=f"out/{AGENT}/"))
    state = SessionState(messages=messages)
    store = MemoryStore()
    outcome = await run_session(state=state, model=PlainModel(ScriptedProvider(script(steps))),
                                tools=registry.schemas(), call_tool=call_tool, store=store,
                                config=SessionConfig(agent=AGENT, limits=Limits(max_steps=steps + 5)))
    assert outcome.status == "ok", outcome
    return store


def plain_step_times(stores: list[MemoryStore]) -> list[float]:
    times = []
    for store in stores:
        requests = [t for kind, t in store.events if kind == "llm_request"]
        times += [b - a for a, b in itertools.pairwise(requests)]
    return times


def plain(sessions: int, steps: int, *, together: bool) -> dict:
    async def main():
        if together:
            return await asyncio.gather(*(plain_session(steps) for _ in range(sessions)))
        return [await plain_session(steps) for _ in range(sessions)]

    asyncio.run(main())  # warm-up: imports, schema building
    started = time.perf_counter()
    stores = asyncio.run(main())
    wall = time.perf_counter() - started
    events = sum(len(s.events) for s in stores)
    return {"steps": plain_step_times(stores), "wall": wall, "events": events,
            "checkpoints": sum(len(s.checkpoints) for s in stores)}


# -- 2./3. the real worker ----------------------------------------------------------------


def worker_runs(team, sessions: int, steps: int, *, together: bool) -> tuple[list, float]:
    from agents_app.execution.runs import run_start

    started = time.perf_counter()
    ids = []
    for _ in range(sessions):
        run = run_start(team=team, agent=AGENT, input="Write notes", script=script(steps))
        ids.append(run.id)
        if not together:
            c.runs_wait([run.id], timeout=60)
    c.runs_wait(ids, timeout=120)
    return ids, time.perf_counter() - started


def worker_figures(run_ids: list) -> dict:
    from agents_app.models import Event

    rows = list(Event.objects.filter(run_id__in=run_ids).order_by("run_id", "seq")
                .values_list("run_id", "session_id", "type", "created_at"))
    by_session: dict = {}
    for run_id, session_id, kind, at in rows:
        if session_id:
            by_session.setdefault(session_id, []).append((kind, at))
    step_times, step_events = [], Counter()
    for events in by_session.values():
        starts = [i for i, (kind, _) in enumerate(events) if kind == "llm_request"]
        for a, b in itertools.pairwise(starts):
            step_times.append((events[b][1] - events[a][1]).total_seconds())
            step_events.update(kind for kind, _ in events[a:b])
    first, last = min(r[3] for r in rows), max(r[3] for r in rows)
    return {"steps": step_times, "events": len(rows), "span": (last - first).total_seconds(),
            "step_events": step_events, "types": Counter(r[2] for r in rows)}


TABLES = ["agents_app_event", "agents_app_session", "agents_app_run", "agents_app_workspacefile"]


def table_writes() -> dict[str, tuple[int, int]]:
    time.sleep(11)  # idle backends flush their statistics within 10 s (PGSTAT_IDLE_INTERVAL)
    rows = c.admin_query("SELECT relname, n_tup_ins, n_tup_upd FROM pg_stat_user_tables WHERE relname = ANY(%s)",
                         [TABLES], dbname=c.BENCH_DB)
    return {name: (ins, upd) for name, ins, upd in rows}


def phases_read(path: Path) -> dict[str, list[float]]:
    try:
        return json.loads(path.read_text())["totals"]
    except FileNotFoundError:
        return {}


def backends_cpu() -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL backend connected to the bench database (but this script's own)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        own = cursor.fetchone()[0]
    pids = [row[0] for row in c.admin_query("SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> %s",
                                            [c.BENCH_DB, own])]
    ticks = os.sysconf("SC_CLK_TCK")
    found = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[pid] = (int(fields[11]) + int(fields[12])) / ticks
    return found


def phase_lines(before: dict, after: dict, steps: int) -> list[str]:
    """One line per phase: calls, wall and CPU ms per step between two readings of the worker's totals."""
    from mas_core.phases import NESTED

    delta = {name: [a - b for a, b in zip(values, before.get(name, [0, 0, 0]))] for name, values in after.items()}
    delta = {name: values for name, values in delta.items() if values[0]}
    for outer, inner in NESTED.items():
        if outer in delta:
            own = list(delta[outer])
            for name in inner:
                if name in delta:
                    own[1] -= delta[name][1]
                    own[2] -= delta[name][2]
            delta[f"{outer} (own)"] = own
    lines = []
    for name, (count, wall, cpu) in sorted(delta.items(), key=lambda item: -item[1][1]):
        lines.append(f"  {name:38s} {count / steps:6.2f} /step  wall {wall / steps * 1000:7.3f} ms  "
                     f"CPU {cpu / steps * 1000:7.3f} ms")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--db-threads", type=int, default=12)
    parser.add_argument("--keep-db", action="store_true", help="leave mas_bench in place for inspection")
    args = parser.parse_args()
    n, m = args.sessions, args.steps
    c.say(f"kernel_overhead: {n} sessions x {m} tool steps, zero-latency scripted model")
    c.say(f"machine {c.machine()}, {c.now_utc()}, load average {c.os.getloadavg()[0]:.2f}")

    c.django_setup()
    base_serial = plain(n, m, together=False)
    base_together = plain(n, m, together=True)
    c.say("\n[1] plain Python (run_session + in-memory store + InMemoryWorkspace)")
    c.say(f"  one at a time: per step {c.summary_ms(base_serial['steps'])}")
    c.say(f"  all at once:   {base_together['events']} events in {base_together['wall']:.3f} s = "
          f"{base_together['events'] / base_together['wall']:,.0f} events/s, "
          f"{n * m / base_together['wall']:,.0f} steps/s")

    c.say(f"\ndatabase {c.BENCH_DB}: created and migrated in {c.database_create():.1f} s; "
          f"server {c.server_settings()}")
    c.redis_flush()
    worker = None
    try:
        team = c.team_with_agent(slug="bench-overhead", agent=AGENT, frontmatter=f"limits:\n  max_steps: {m + 5}\n")
        worker = c.Worker(concurrency=max(8, n + 4), db_threads=args.db_threads).start()
        c.say(f"worker: {worker.command_line()}")
        worker_runs(team, 2, m, together=False)  # warm-up: connections, imports
        before = table_writes()
        cpu_before, pg_before = worker.cpu_seconds(), backends_cpu()
        serial_ids, serial_wall = worker_runs(team, n, m, together=False)
        cpu_after, pg_after = worker.cpu_seconds(), backends_cpu()
        after = table_writes()
        serial = worker_figures(serial_ids)
        together_ids, together_wall = worker_runs(team, n, m, together=True)
        together = worker_figures(together_ids)
        backends = c.db_backends()
        peak = worker.peak_rss
        worker.stop()
        # The breakdown by phase, from a second worker that times them (mas_core.phases): the clock reads
        # cost the step a little, so the figures above come from a worker that does not.
        phases_file = Path(tempfile.mkdtemp(prefix="mas-bench-phases-")) / "phases.json"
        os.environ["MAS_PHASES"] = str(phases_file)
        worker = c.Worker(concurrency=max(8, n + 4), db_threads=args.db_threads).start()
        worker_runs(team, 2, m, together=False)
        phases_before = phases_read(phases_file)
        worker_runs(team, n, m, together=False)
        phases_after = phases_read(phases_file)
        del os.environ["MAS_PHASES"]
        langgraph = _langgraph.available()
        if langgraph:
            conninfo = c.conninfo(dbname=c.BENCH_DB)
            lg = {(shape, durability): measure(conninfo, sessions=n, steps=m, durability=durability)
                  for shape, measure in (("react", _langgraph.react_step_times), ("graph", _langgraph.graph_step_times))
                  for durability in ("sync", "async")}
    finally:
        if worker:
            worker.stop()
        if not args.keep_db:
            c.database_drop()
        c.redis_flush()

    p50, p95 = c.percentile(serial["steps"], 50), c.percentile(serial["steps"], 95)
    b50, b95 = c.percentile(base_serial["steps"], 50), c.percentile(base_serial["steps"], 95)
    c.say("\n[2] real worker, one run at a time (Celery thread pool -> asyncio loop -> Postgres + Redis)")
    c.say(f"  per step {c.summary_ms(serial['steps'])}")
    c.say(f"  whole runs: {n} runs in {serial_wall:.2f} s ({serial_wall / n * 1000:.0f} ms per run of {m} steps, "
          "including dispatch through the broker)")
    c.say("\n[3] real worker, all runs at once")
    c.say(f"  per step {c.summary_ms(together['steps'])}")
    c.say(f"  {together['events']} events in {together['span']:.2f} s (first to last event) = "
          f"{together['events'] / together['span']:,.0f} events/s, {n * m / together['span']:,.0f} steps/s; "
          f"submit-to-finished {together_wall:.2f} s")
    c.say(f"  worker peak RSS {c.mib(peak)}, backends on {c.BENCH_DB} after the run: {backends}")

    c.say("\n[4] LangGraph with its Postgres checkpointer (same loop, same database server), one thread at a time")
    if langgraph:
        for (shape, durability), times in lg.items():
            c.say(f"  langgraph {langgraph} {shape:5s} durability={durability:5s}: per step {c.summary_ms(times)}")
        c.say("  (react = prebuilt create_react_agent; graph = two-node StateGraph with the files in its state;\n"
              "   durability=sync waits for each checkpoint like MAS does; async, LangGraph's default, does not)")
    else:
        c.say("  not installed: pip install -e '.[bench]'")

    steps_total = n * m
    worker_cpu = (cpu_after - cpu_before) / steps_total
    pg_cpu = sum(cpu - pg_before.get(pid, 0.0) for pid, cpu in pg_after.items()) / steps_total
    c.say(f"\nCPU per step, serial phase [2] (whole runs: start, {m} steps, finish, over {m} steps): "
          f"worker {worker_cpu * 1000:.2f} ms + Postgres backends {pg_cpu * 1000:.2f} ms = "
          f"{(worker_cpu + pg_cpu) * 1000:.2f} ms (target < 4 ms); {len(pg_after)} backends on {c.BENCH_DB}")
    c.say(f"where a step's time goes, serial phase [2] again with MAS_PHASES={phases_file} (another worker, "
          f"timing its phases), per step of {steps_total} (inclusive phases; "
          "'(own)' less the phases inside; wall includes waiting for Postgres and Redis):")
    for line in phase_lines(phases_before, phases_after, steps_total):
        c.say(line)
    c.say("\nwhat one step writes (serial phase; a step = llm_request .. tool_result):")
    per_step = {k: v / steps_total for k, v in sorted(serial["step_events"].items())}
    c.say("  events: " + ", ".join(f"{k} {v:g}" for k, v in per_step.items())
          + f" = {sum(per_step.values()):g} events")
    sessions_total = n
    for table in TABLES:
        ins = after.get(table, (0, 0))[0] - before.get(table, (0, 0))[0]
        upd = after.get(table, (0, 0))[1] - before.get(table, (0, 0))[1]
        c.say(f"  {table}: {ins / steps_total:.2f} inserts, {upd / steps_total:.2f} updates per step "
              f"(whole runs incl. start/finish: {ins} ins, {upd} upd for {sessions_total} runs)")
    c.say(f"  checkpoints per step in the kernel loop: "
          f"{base_serial['checkpoints'] / n / m:.2f} (baseline count; 2 per step + 1 for the final turn / {m})")

    c.say("\nratios (worker / plain Python, same script, same machine)")
    c.say(f"  per-step p50: {p50 * 1000:.1f} ms / {b50 * 1000:.3f} ms = {p50 / b50:,.0f}x; "
          f"p95: {p95 * 1000:.1f} ms / {b95 * 1000:.3f} ms = {p95 / b95:,.0f}x")
    c.say(f"  overhead per step over plain Python: p50 {(p50 - b50) * 1000:.1f} ms")
    if langgraph:
        for (shape, durability), times in lg.items():
            l50, l95 = c.percentile(times, 50), c.percentile(times, 95)
            c.say(f"  MAS / LangGraph {shape} durability={durability} per step: p50 {p50 * 1000:.1f} / "
                  f"{l50 * 1000:.1f} ms = {p50 / l50:.2f}; p95 {p95 * 1000:.1f} / {l95 * 1000:.1f} ms = {p95 / l95:.2f}")
    plain_eps = base_together["events"] / base_together["wall"]
    worker_eps = together["events"] / together["span"]
    c.say(f"  events/s all at once: {worker_eps:,.0f} / {plain_eps:,.0f} = {worker_eps / plain_eps:.4f}")
    c.say(f"  events by type (all-at-once phase): {dict(together['types'])}")
    c.say(f"  mean ms per step, serial: worker {statistics.fmean(serial['steps']) * 1000:.1f}, "
          f"plain {statistics.fmean(base_serial['steps']) * 1000:.3f}")


if __name__ == "__main__":
    main()
