#!/usr/bin/env python3
"""What a checkpoint costs as a session grows: bytes written and ms per step at steps 10, 100 and 500.

One session of 500 tool steps (each tool result 5 KB, distinct), driven by the
real kernel loop (``run_session``) and the real worker store (``DatabaseStore``
on the bench database: events, usage and checkpoint in one statement per write),
with a zero-latency model and no context window (nothing is compacted: this
measures the checkpoints alone). It runs twice in the same script:

- before: the whole-state checkpoint MAS wrote until issue 17 — ``SessionState.to_dict()``,
  every message again, into ``Session.state`` at each checkpoint (``WholeStateStore``);
- after: the append-only checkpoint — the step's new ``SessionEntry`` rows and the counters.

Bytes per checkpoint are what the store hands to PostgreSQL for the session's history and
counters (events, the same in both, are not counted); ms per step is the wall time between
two model calls. Each figure is the median of the nine steps ending at 10, 100 and 500.

    .venv/bin/python bench/long_session.py [--steps 500] [--result-bytes 5000] [--only before|after] [--keep-db]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

AT = (10, 100, 500)


def stores():
    from agents_app.execution.store import DatabaseStore

    class WholeStateStore(DatabaseStore):
        """The checkpoint before issue 17: the whole state, history included, at every checkpoint."""

        async def checkpoint(self, state, *, before_tools: bool = False) -> None:
            self.pending_counters = json.dumps(state.to_dict())
            self.checkpoint_bytes = len(self.pending_counters)
            if before_tools:
                self._schedule_live_write()
                return
            await self._write()

    return {"before": WholeStateStore, "after": DatabaseStore}


def session_rows(team, label: str):
    from agents_app.models import Activation, Run, Session

    run = Run.objects.create(team=team, agent="reader", input=label, status="running")
    activation = Activation.objects.create(run=run, agent="reader", input=label, status="running")
    session = Session.objects.create(run=run, activation=activation, agent="reader")
    return run, session


async def one_session(store_class, run, session, *, steps: int, result_bytes: int) -> dict:
    from agents_app.kernel.loop import SessionConfig, SessionState, ToolResult, run_session
    from agents_app.kernel.results import Limits
    from mas_core.llm_types import Message, ModelResponse, ToolCall, Usage

    store = store_class(run_id=run.id, session_id=session.id, agent="reader", tier="", cursor=None, budget={},
                        team_id=run.team_id)
    sizes: list[list[int]] = [[]]
    starts: list[float] = []
    original = store.checkpoint

    async def checkpoint(state, *, before_tools=False):
        await original(state, before_tools=before_tools)
        sizes[-1].append(store.checkpoint_bytes)

    store.checkpoint = checkpoint

    class Model:
        model, tier = "bench", "medium"

        async def complete(self, request, *, on_chunk=None):
            starts.append(time.perf_counter())
            sizes.append([])
            step = len(starts)
            if step > steps:
                return ModelResponse(text="done", tool_calls=[], usage=Usage(10, 1), model="bench")
            call = ToolCall(id=f"call_{step}", name="vfs_read", arguments={"path": "data.txt", "offset": step})
            return ModelResponse(text="", tool_calls=[call], usage=Usage(10, 1), model="bench",
                                 finish_reason="tool_calls")

        def cost(self, response):
            return 0

        def cost_at_most(self, *, prompt_tokens, max_tokens):
            return 0

    async def call_tool(call):
        return ToolResult(ok=True, content=f"{call.id} " + "x" * (result_bytes - len(call.id) - 1))

    state = SessionState(messages=[Message(role="system", content="You read."), Message(role="user", content="Read.")])
    limits = Limits(max_steps=steps + 5, max_tool_calls=steps + 5, timeout_s=3600)
    outcome = await run_session(state=state, model=Model(), tools=[], call_tool=call_tool, store=store,
                                config=SessionConfig(agent="reader", limits=limits))
    await store.close()
    assert outcome.status == "ok", outcome
    step_ms = [(b - a) * 1000 for a, b in zip(starts, starts[1:])]  # step n: from call n to call n+1
    step_bytes = [sum(s) / len(s) for s in sizes[1:-1]]  # per checkpoint, steps 1..steps
    return {"ms": step_ms, "bytes": step_bytes}


def at(values: list[float], step: int) -> float:
    return statistics.median(values[max(0, step - 9):step])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--result-bytes", type=int, default=5_000)
    parser.add_argument("--only", choices=["before", "after"], help="measure one of the two")
    parser.add_argument("--keep-db", action="store_true")
    args = parser.parse_args()
    points = [step for step in AT if step <= args.steps]
    c.say(f"long_session: one session of {args.steps} tool steps, {args.result_bytes} B tool results, "
          "zero-latency model, real DatabaseStore")
    c.say(f"machine {c.machine()}, {c.now_utc()}, load average {c.os.getloadavg()[0]:.2f}")
    c.django_setup()
    c.say(f"database {c.BENCH_DB}: created and migrated in {c.database_create():.1f} s")
    figures = {}
    try:
        from mas_core.teams import team_create

        team = team_create(slug="bench-long", name="bench-long", defs_dir=str(Path(c.ENV["MAS_DEFS_ROOT"]) / "bench-long"))
        for name, store_class in stores().items():
            if args.only and name != args.only:
                continue
            run, session = session_rows(team, name)
            figures[name] = asyncio.run(one_session(store_class, run, session, steps=args.steps,
                                                    result_bytes=args.result_bytes))
    finally:
        if not args.keep_db:
            c.database_drop()

    c.say("\n            " + "".join(f"{f'step {p}':>14}" for p in points) + f"{'500/10':>10}")
    for name, data in figures.items():
        for label, key, fmt in (("B/checkpoint", "bytes", "{:>14,.0f}"), ("ms/step", "ms", "{:>14.2f}")):
            values = [at(data[key], p) for p in points]
            ratio = values[-1] / values[0] if values[0] else float("nan")
            c.say(f"{name:6s} {label:13s}" + "".join(fmt.format(v) for v in values) + f"{ratio:>9.1f}x")
    c.say("\ncheckpoint bytes of the whole session: " + ", ".join(
        f"{name} {sum(data['bytes']) / 1e6:,.1f} MB" for name, data in figures.items()))


if __name__ == "__main__":
    main()
