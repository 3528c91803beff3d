"""Issue 23, point 1: no tool call holds a worker's event loop, and the watchdog names any that does.

A model steered by what it read may search with a catastrophic pattern: under Python's ``re``,
``^(a+)+$`` over forty ``a`` and a ``!`` runs for hours on the loop every session of the worker shares.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import subprocess
import sys
import time

import pytest
from django.test import Client

from agents_app.execution.runs import run_start
from agents_app.models import Run
from mas_core import looplag
from mas_core.redis_client import broker_redis
from tests.runs import agent, call, events, finish, wait_until
from tests.workers import start_worker, stop_worker
from tools_app.plugin import Params, Tool, ToolContext
from tools_app.registry import ToolRegistry
from tools_app.workspace_memory import InMemoryWorkspace

BOMB = "a" * 40 + "!"


def _run_seconds(run: Run) -> float:
    stamps = [event.created_at for event in events(run)]
    return (stamps[-1] - stamps[0]).total_seconds()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_catastrophic_search_answers_at_once_and_stalls_no_other_session(team_a, monkeypatch):
    from mas_project.celery import app

    queue = f"loop-{os.getpid()}"
    monkeypatch.setitem(app.conf, "task_default_queue", queue)
    agent(team_a, "Bomber", "tools:\n- vfs_write\n- vfs_search\n")
    agent(team_a, "Ticker", "tools:\n- vfs_list\n")
    ticks = {"ticker": [*[call("vfs_list", prefix=f"p{n}/") for n in range(5)], {"text": "ticked"}]}
    worker = start_worker(queue, queue=queue)
    try:
        alone = finish(run_start(team=team_a, agent="ticker", input="Tick", script=ticks))
        bomber = run_start(team=team_a, agent="bomber", input="Search", script={"bomber": [
            call("vfs_write", path="bomb.txt", content=BOMB),
            *[call("vfs_search", pattern="^(a+)+$", glob=glob) for glob in ("*", "*.txt", "bomb*")],
            {"text": "searched"}]})
        wait_until(lambda: events(bomber, "tool_call")[1:], 30, "the bomber's first search")
        beside = run_start(team=team_a, agent="ticker", input="Tick", script=ticks)
        bomber, beside = finish(bomber, timeout=30), finish(beside, timeout=30)
    finally:
        stop_worker(worker)
    assert (bomber.status, bomber.result, beside.status, beside.result) == (
        "succeeded", "searched", "succeeded", "ticked")
    calls = {event.data["id"]: event for event in events(bomber, "tool_call") if event.data["name"] == "vfs_search"}
    results = [event for event in events(bomber, "tool_result") if event.data["id"] in calls]
    assert [event.data["content"] for event in results] == [
        f"No matches for '^(a+)+$' in files matching {glob!r} (1 files searched)." for glob in ("*", "*.txt", "bomb*")]
    for result in results:
        assert (result.created_at - calls[result.data["id"]].created_at).total_seconds() < 1.0
    # Its steps are as quick beside the searches as alone (a generous bound: the machine is shared).
    assert _run_seconds(beside) < _run_seconds(alone) + 1.5, (_run_seconds(alone), _run_seconds(beside))


# --- the watchdog -------------------------------------------------------------


class BlockLoop(Tool):
    """Test-only: computes on the loop for 250 ms (time.sleep holds it as well as a loop would), then awaits."""

    name = "block_loop"
    description = "Holds the event loop."

    async def run(self, args: Params, ctx: ToolContext) -> str:
        time.sleep(0.25)
        await asyncio.sleep(0.2)  # waiting is not blocking: this part is not counted
        return "held"


class Polite(Tool):
    name = "polite"
    description = "Waits without holding the loop."

    async def run(self, args: Params, ctx: ToolContext) -> str:
        await asyncio.sleep(0.3)
        return "waited"


@pytest.fixture
def counters():
    broker_redis().delete(looplag._key())
    yield
    broker_redis().delete(looplag._key())


@pytest.mark.django_db
def test_the_watchdog_logs_and_counts_a_handler_that_holds_the_loop(counters, caplog, settings):
    settings.MAS_METRICS_TOKEN = ""
    registry = ToolRegistry()
    registry.register(BlockLoop)
    registry.register(Polite)
    ctx = ToolContext(run_id="run-7", agent="a", session_id="s-1", workspace=InMemoryWorkspace())

    async def calls():
        return [await registry.call("block_loop", {}, ctx), await registry.call("polite", {}, ctx)]

    with caplog.at_level(logging.WARNING, logger="mas_core.looplag"):
        held, waited = asyncio.run(calls())
    looplag.flush()
    assert (held.ok, held.content, waited.ok, waited.content) == (True, "held", True, "waited")
    [record] = [r for r in caplog.records if r.name == "mas_core.looplag"]
    assert (record.getMessage(), record.tool, record.run_id) == ("event loop blocked", "block_loop", "run-7")
    assert 250 <= record.blocked_ms < 2000
    [(count, seconds)] = looplag.totals().values()
    assert list(looplag.totals()) == ["block_loop"] and count == 1 and 0.25 <= seconds < 2.0

    text = Client().get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    assert "# TYPE mas_loop_blocked_total counter" in text and "# TYPE mas_loop_blocked_seconds_total counter" in text
    lines = [line for line in text.splitlines() if line.startswith("mas_loop_blocked")]
    assert lines[0] == 'mas_loop_blocked_total{tool="block_loop"} 1'
    assert lines[1].startswith('mas_loop_blocked_seconds_total{tool="block_loop"} 0.') and len(lines) == 2


class Compute(Tool):
    """Test-only: computes on the loop until its thread has had ``ms`` of CPU time."""

    name = "compute"
    description = "Computes on the event loop."

    class Parameters(Params):
        ms: int

    async def run(self, args: Parameters, ctx: ToolContext) -> str:
        end = time.thread_time() + args.ms / 1000
        while time.thread_time() < end:
            pass
        return "computed"


def _timed_call(registry: ToolRegistry, name: str, **arguments) -> float:
    """Seconds one call of ``name`` took (its only slice, for the tools here)."""
    ctx = ToolContext(run_id="r", agent="a", session_id="s", workspace=InMemoryWorkspace())
    started = time.perf_counter()
    outcome = asyncio.run(registry.call(name, arguments, ctx))
    assert outcome.ok, outcome.content
    return time.perf_counter() - started


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_slice_is_timed_less_its_threads_wait_for_a_cpu(counters, caplog):
    """On a busy machine the loop's thread waits its turn for a core: that wait is the machine's, not the handler's.
    Two processes spinning on the one CPU the loop's thread may use triple a slice's wall time: a handler computing
    60 ms (~180 ms of wall time) is not reported; one computing 150 ms is, as what it computed."""
    registry = ToolRegistry()
    registry.register(Compute)
    looplag.flush()  # the watchdog's writer thread starts before this one is pinned (a thread inherits its CPUs)
    allowed = os.sched_getaffinity(0)
    cpu = min(allowed)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        for hog in hogs:
            os.sched_setaffinity(hog.pid, {cpu})
        deadline = time.monotonic() + 20
        while min(_cpu_seconds(hog.pid) for hog in hogs) < 0.1 and time.monotonic() < deadline:
            time.sleep(0.02)  # spinning, not starting
        os.sched_setaffinity(0, {cpu})  # this thread only: the loop of asyncio.run
        with caplog.at_level(logging.WARNING, logger="mas_core.looplag"):
            waited = _timed_call(registry, "compute", ms=60)
            held = _timed_call(registry, "compute", ms=150)
    finally:
        os.sched_setaffinity(0, allowed)
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert min(waited, held) > looplag.BLOCKED_S  # by the wall clock both held the loop (~180 and ~450 ms)
    [record] = [r for r in caplog.records if r.name == "mas_core.looplag"]
    assert (record.getMessage(), record.tool) == ("event loop blocked", "compute")
    assert 150 <= record.blocked_ms < 200


class SlowToFree:
    """Garbage only a full collection frees (it refers to itself), with a finalizer of 250 ms: a full collection
    as long as one of the suite's serial pytest process (~400 ms over its ~700,000 objects), without that heap."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        time.sleep(0.25)


class Collect(Tool):
    """Test-only: a slice in which a full garbage collection runs, as one its allocations set off would, then
    150 ms of its own blocking."""

    name = "collect"
    description = "Collects garbage on the event loop."

    async def run(self, args: Params, ctx: ToolContext) -> str:
        SlowToFree()
        gc.collect()
        time.sleep(0.15)
        return "collected"


def test_a_full_garbage_collection_in_a_slice_is_not_the_handlers(counters, caplog):
    """A full collection's length is the process's heap, whichever allocation set it off: it is not counted against
    the handler it interrupted. The rest of the slice is."""
    registry = ToolRegistry()
    registry.register(Collect)
    with caplog.at_level(logging.WARNING, logger="mas_core.looplag"):
        wall = _timed_call(registry, "collect")
    assert wall >= 0.4  # the collection's 250 ms and the handler's 150 ms, in one slice
    [record] = [r for r in caplog.records if r.name == "mas_core.looplag"]
    assert (record.getMessage(), record.tool) == ("event loop blocked", "collect")
    assert 150 <= record.blocked_ms < 250


def test_a_cancelled_handler_is_cancelled_through_the_watchdog():
    registry = ToolRegistry()
    registry.register(Polite)
    ctx = ToolContext(run_id="r", agent="a", session_id="s", workspace=InMemoryWorkspace())

    async def cancel_it():
        task = asyncio.ensure_future(registry.call("polite", {}, ctx))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return task.cancelled()

    assert asyncio.run(cancel_it()) is True


def test_an_mcp_tools_schema_pattern_meets_the_models_argument_in_linear_time():
    """An MCP server's input schema may carry a catastrophic `pattern`; the model's argument is checked by RE2."""
    from types import SimpleNamespace

    from tools_app.mcp.bridge import bridged_tool
    from tools_app.mcp.client import DiscoveredTool

    schema = {"type": "object", "properties": {"q": {"type": "string", "pattern": "^(a+)+$"}}, "required": ["q"]}
    connection = SimpleNamespace(config=SimpleNamespace(slug="srv"))  # never called: only arguments are checked

    async def emit(*args, **kwargs):
        return None

    registry = ToolRegistry()
    registry.register(bridged_tool(connection, DiscoveredTool("find", "Finds.", schema), emit))
    ctx = ToolContext(run_id="r", agent="a", session_id="s", workspace=InMemoryWorkspace())
    started = time.perf_counter()
    outcome = asyncio.run(registry.call("mcp__srv__find", {"q": BOMB}, ctx))
    assert time.perf_counter() - started < 1.0
    assert (outcome.ok, outcome.error_kind) == (False, "invalid_arguments")
    assert f"q: {BOMB!r} does not match '^(a+)+$'" in outcome.content
