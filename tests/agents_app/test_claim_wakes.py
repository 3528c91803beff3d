"""When a worker claims (agents_app.scheduler.loop): at new ready work (its NOTIFY), and at a session's end only
when the last claim left ready work behind (``Claims.left``: here a team at its limit) — a claim at every
session's end found nothing most of the time, a database hop and three statements per run."""

from __future__ import annotations

import asyncio

import pytest

from agents_app.execution.runs import run_start
from agents_app.models import Run
from agents_app.scheduler import loop as scheduler_loop
from agents_app.scheduler.loop import WorkerLoop
from mas_core.runner import runner
from tests.runs import agent, wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def claims(monkeypatch, settings):
    """What each claim of the test's worker took (None: another claim was under way), in order; nothing is
    claimed by the clock meanwhile (the poll is a minute away)."""
    settings.MAS_SCHEDULER_POLL_S = 60
    settings.MAS_WORKER_BEAT_S = 600
    taken: list[int | None] = []
    real = scheduler_loop.claim

    def counted(**kwargs):
        result = real(**kwargs)
        taken.append(None if result is None else len(result))
        return result

    monkeypatch.setattr(scheduler_loop, "claim", counted)
    return taken


@pytest.fixture
def serving(unserved, claims, loop_connections_closed):
    """A worker of the test's own pool on this process's session loop, stopped (its LISTEN closed) after."""
    worker = WorkerLoop(name="w:wakes", queue=unserved, slots=10)
    served = asyncio.run_coroutine_threadsafe(worker.serve(), runner.loop())
    wait_until(lambda: claims and len(worker.tasks) == 1, timeout=10, what="the worker's first claim")
    yield worker

    async def stop() -> None:
        worker.stopping = True
        worker.wake.set()
        for task in worker.tasks:
            task.cancel()
        await asyncio.gather(*worker.tasks, return_exceptions=True)

    runner.run(stop())
    served.result(timeout=10)


def finished(*runs: Run) -> bool:
    return all(run.status == "succeeded" for run in Run.objects.filter(pk__in=[run.pk for run in runs]))


def test_a_session_that_ends_with_nothing_ready_left_makes_no_claim(team_a, serving, claims):
    agent(team_a, "Lead")
    wait_until(lambda: len(claims) >= 2, timeout=10, what="the claim when its LISTEN began")  # found nothing
    run = run_start(team=team_a, agent="lead", input="Go", script={"lead": [{"text": "done"}]})
    wait_until(lambda: finished(run), timeout=30, what="the run")
    wait_until(lambda: not serving.sessions, timeout=10, what="the session's task to end")
    runner.run(asyncio.sleep(0.3))  # the loop's turn after the session's end
    assert claims[-1] == 1  # the claim that took the run's root was the last: none after its end
    assert claims.count(1) == 1 and set(claims) <= {0, 1, None}


def test_a_session_that_ends_with_work_left_behind_claims_it_at_once(team_a, serving, claims):
    team_a.session_limit = 1  # the second run's root is ready, and left behind until the first's ends
    team_a.save(update_fields=["session_limit"])
    agent(team_a, "Lead")
    wait_until(lambda: len(claims) >= 2, timeout=10, what="the claim when its LISTEN began")
    script = {"lead": [{"latency_ms": 300, "text": "done"}]}
    first, second = (run_start(team=team_a, agent="lead", input=f"Go {n}", script=script) for n in (1, 2))
    # Both NOTIFYs came before the first session ended; the second run starts when it ends, not at the
    # poll a minute later.
    wait_until(lambda: finished(first, second), timeout=20, what="both runs")
    assert claims.count(1) == 2 and claims[-1] == 1
