"""A session takes one of its process's turns at the loop while it works and gives it up while its model
answers (mas_core.lanes), and the scheduler runs each session in its team's lane: real sessions on this
process's session loop, as a worker's scheduler loop runs them."""

from __future__ import annotations

import asyncio
import time

import pytest

from agents_app.execution.runs import run_start
from agents_app.models import Activation, Event, Run
from agents_app.scheduler.claim import Claimed
from agents_app.scheduler.loop import WorkerLoop
from mas_core import lanes
from mas_core.runner import runner
from tests.runs import agent, wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def one_turn(monkeypatch):
    """The session loop of this process with one turn only; returns its semaphore."""
    loop = runner.loop()
    semaphore = lanes.FairSemaphore(1, loop=loop)
    monkeypatch.setitem(lanes._turns, id(loop), semaphore)
    return semaphore


def started(team, name: str, script: list) -> tuple[Run, str]:
    agent(team, name)
    run = run_start(team=team, agent=name.lower(), input="Go", script={name.lower(): script})
    return run, str(Activation.objects.get(run=run).id)


def session_started(run: Run) -> bool:
    return Event.objects.filter(run=run, type="session_start").exists()


def test_a_session_waits_for_a_turn_and_gives_it_up_while_its_model_answers(
        team_a, team_b, one_turn, unserved, loop_connections_closed):
    from agents_app.execution.session import execute_activation

    slow, slow_id = started(team_a, "Slow", [{"latency_ms": 3000, "text": "slow done"}])
    quick, quick_id = started(team_b, "Quick", [{"text": "quick done"}])

    # The one turn is taken: a session cannot begin.
    runner.run(one_turn.acquire())
    waiting = asyncio.run_coroutine_threadsafe(execute_activation(quick_id), runner.loop())
    time.sleep(0.5)
    assert not session_started(quick)
    assert one_turn.waiting == 1
    runner.loop().call_soon_threadsafe(one_turn.release)
    waiting.result(timeout=30)
    assert Run.objects.get(pk=quick.pk).status == "succeeded"

    # The slow session holds the turn only while it works: its model's three seconds are the others'.
    quick_again = run_start(team=team_b, agent="quick", input="Again", script={"quick": [{"text": "again"}]})
    again_id = str(Activation.objects.get(run=quick_again).id)
    slow_future = asyncio.run_coroutine_threadsafe(execute_activation(slow_id), runner.loop())
    wait_until(lambda: Event.objects.filter(run=slow, type="llm_request").exists(), 30, "the slow model call")
    asyncio.run_coroutine_threadsafe(execute_activation(again_id), runner.loop()).result(timeout=30)
    assert Run.objects.get(pk=quick_again.pk).status == "succeeded"
    assert Run.objects.get(pk=slow.pk).status == "running"  # still waiting for its model
    slow_future.result(timeout=30)
    slow = Run.objects.get(pk=slow.pk)
    assert (slow.status, slow.result) == ("succeeded", "slow done")
    assert slow.finished_at > Run.objects.get(pk=quick_again.pk).finished_at
    assert (one_turn._free, one_turn.waiting) == (1, 0)


def test_the_scheduler_runs_each_session_in_its_teams_lane(monkeypatch):
    from agents_app.execution import session

    seen = []

    async def runs(activation_id):
        seen.append((activation_id, lanes.lane.get()))

    monkeypatch.setattr(session, "execute_activation", runs)
    worker = WorkerLoop(name="w:lanes", queue="unserved", slots=2)
    asyncio.run(worker._run(Claimed(activation_id="a-1", team_id=7, waited_s=0.0)))
    assert seen == [("a-1", 7)]
    assert lanes.lane.get() is None  # the task's own, not the caller's
