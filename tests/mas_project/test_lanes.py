"""The teams take turns at a worker process's database threads and connections (mas_core.lanes)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from mas_core.lanes import FairExecutor, FairSemaphore, lane


def submit_in(executor: FairExecutor, key, fn, *args):
    token = lane.set(key)
    try:
        return executor.submit(fn, *args)
    finally:
        lane.reset(token)


def test_the_threads_serve_the_lanes_in_turn_and_the_lane_of_no_session_first():
    executor = FairExecutor(1, name="test-lanes")
    gate, served = threading.Event(), []
    blocker = submit_in(executor, "held", gate.wait)
    while executor.backlog:  # the one thread has taken the blocker
        pass
    futures = [submit_in(executor, "a", served.append, f"a{i}") for i in range(4)]
    futures += [submit_in(executor, "b", served.append, "b0"), submit_in(executor, "b", served.append, "b1")]
    futures.append(submit_in(executor, None, served.append, "scheduler"))
    assert executor.backlog == 7
    gate.set()
    assert blocker.result(timeout=5) is True
    for future in futures:
        future.result(timeout=5)
    # One call per lane in turn: b's first call waits behind one of a's, not four.
    assert served == ["scheduler", "a0", "b0", "a1", "b1", "a2", "a3"]
    assert executor.backlog == 0
    executor.shutdown()


def test_a_failing_call_reaches_its_caller_and_the_thread_goes_on():
    executor = FairExecutor(2, name="test-lanes")
    failed = executor.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failed.result(timeout=5)
    assert executor.submit(lambda: 42).result(timeout=5) == 42
    executor.shutdown()
    with pytest.raises(RuntimeError, match="^cannot schedule new calls after shutdown$"):
        executor.submit(lambda: 42)


def test_an_event_loop_takes_it_as_its_default_executor_and_the_submitters_lane():
    executor = FairExecutor(1, name="test-lanes")
    loop = asyncio.new_event_loop()
    loop.set_default_executor(executor)
    seen = []

    async def call(key):
        lane.set(key)
        return await loop.run_in_executor(None, lambda: seen.append(key) or key)

    async def both():
        return await asyncio.gather(call("a"), call("b"))

    try:
        assert loop.run_until_complete(both()) == ["a", "b"]
    finally:
        loop.close()
        executor.shutdown()
    assert seen == ["a", "b"]


def test_freed_permits_go_to_the_waiting_lanes_in_turn():
    async def scenario():
        semaphore, got = FairSemaphore(1), []
        await semaphore.acquire()  # held: everyone below waits

        async def waiter(key, name):
            lane.set(key)
            async with semaphore:
                got.append(name)
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(waiter("a", f"a{i}")) for i in range(3)]
        tasks.append(asyncio.create_task(waiter("b", "b0")))
        await asyncio.sleep(0)
        semaphore.release()
        await asyncio.gather(*tasks)
        return got, semaphore._free

    got, free = asyncio.run(scenario())
    assert got == ["a0", "b0", "a1", "a2"]
    assert free == 1  # every permit back


def test_a_cancelled_waiter_loses_no_permit():
    async def scenario():
        semaphore = FairSemaphore(1)
        await semaphore.acquire()
        lane.set("a")
        cancelled = asyncio.create_task(semaphore.acquire())
        lane.set("b")
        waiting = asyncio.create_task(semaphore.acquire())
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.sleep(0)
        semaphore.release()  # skips the cancelled waiter: b gets it
        await asyncio.wait_for(waiting, 1)
        semaphore.release()
        # Handed over in the same moment it is cancelled: the permit is passed on, not lost.
        await semaphore.acquire()
        lane.set("c")
        late = asyncio.create_task(semaphore.acquire())
        await asyncio.sleep(0)
        semaphore.release()  # granted to late ...
        late.cancel()  # ... which is cancelled before it runs
        with pytest.raises(asyncio.CancelledError):
            await late
        return cancelled.cancelled(), semaphore._free

    assert asyncio.run(scenario()) == (True, 1)


def test_a_session_holds_a_turn_while_it_works_and_gives_it_up_while_it_waits(monkeypatch):
    from mas_core import lanes

    monkeypatch.setenv("MAS_WORKER_TURNS", "1")
    log = []

    async def session(key, name, waits):
        lane.set(key)
        async with lanes.turn():
            log.append(f"{name} works")
            for _ in range(waits):
                async with lanes.away():  # a model's answer: others may work meanwhile
                    await asyncio.sleep(0.01)
                log.append(f"{name} works")
            async with lanes.turn():  # nested (an inline child): no second turn, no deadlock
                log.append(f"{name} nested")

    async def scenario():
        await asyncio.gather(session("a", "a1", 1), session("a", "a2", 0), session("b", "b1", 0))
        return lanes._semaphore()._free

    assert asyncio.run(scenario()) == 1  # the one turn back
    # a1 gives the turn up while it waits; a2 and b1 take it in turn; a1 works again after.
    assert log == ["a1 works", "a2 works", "a2 nested", "b1 works", "b1 nested", "a1 works", "a1 nested"]


def test_a_session_cancelled_while_away_or_waiting_for_its_turn_loses_no_turn(monkeypatch):
    from mas_core import lanes

    monkeypatch.setenv("MAS_WORKER_TURNS", "1")

    async def away_forever():
        async with lanes.turn():
            async with lanes.away():
                await asyncio.sleep(60)

    async def works(seconds):
        async with lanes.turn():
            await asyncio.sleep(seconds)

    async def scenario():
        waiting = asyncio.create_task(away_forever())
        await asyncio.sleep(0.01)
        busy = asyncio.create_task(works(0.05))  # takes the turn a waiting session gave up
        await asyncio.sleep(0.01)
        waiting.cancel()  # cancelled away: it must take its turn again to leave, then give it back
        queued = asyncio.create_task(works(0))
        await asyncio.sleep(0)
        queued.cancel()  # cancelled while waiting for a turn
        await asyncio.gather(waiting, busy, queued, return_exceptions=True)
        return lanes._semaphore()._free, waiting.cancelled(), queued.cancelled()

    assert asyncio.run(scenario()) == (1, True, True)


def test_a_thread_starts_only_when_none_is_idle_and_the_last_idle_one_works_next():
    executor = FairExecutor(4, name="test-lanes")
    names = []
    for _ in range(5):
        names.append(executor.submit(lambda: threading.current_thread().name).result(timeout=5))
        while len(executor._idle) != len(executor._workers):  # back to idle, as between a quiet worker's calls
            pass
    assert names == ["test-lanes_0"] * 5  # one call at a time: one thread, its connection kept warm
    gate = threading.Event()
    held = [executor.submit(gate.wait) for _ in range(3)]
    while executor.backlog:
        pass
    assert len(executor._workers) == 3
    gate.set()
    assert [future.result(timeout=5) for future in held] == [True] * 3
    executor.shutdown()
    assert not any(worker.is_alive() for worker in executor._workers)


def test_each_loop_has_turns_of_its_own_and_a_semaphore_refuses_a_second_loop(monkeypatch):
    from mas_core import lanes

    monkeypatch.setenv("MAS_WORKER_TURNS", "1")

    async def leave_a_turn_held():  # a loop closed while a session held its turn (a test's, a crash's)
        semaphore = lanes._semaphore()
        await semaphore.acquire()  # never given back
        # (Not a task left pending in a `turn` block: collected later, its coroutine would leave the block in
        # another context, and the error it raises there broke the AST parse of whichever module pytest was
        # rewriting at that moment: "SystemError: AST constructor recursion depth mismatch".)
        return semaphore

    loop = asyncio.new_event_loop()
    held = loop.run_until_complete(leave_a_turn_held())
    loop.close()  # its task never ended: its turn is never given back
    assert held._free == 0

    async def one_turn():
        async with lanes.turn():
            return lanes._semaphore()

    assert asyncio.run(asyncio.wait_for(one_turn(), 5)) is not held  # never the closed loop's

    async def wait_on(semaphore):
        await semaphore.acquire()

    with pytest.raises(RuntimeError, match="is bound to a different event loop$"):
        asyncio.run(wait_on(held))
