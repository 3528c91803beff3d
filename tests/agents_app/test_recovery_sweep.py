"""The sweep loop every worker runs (agents_app/execution/recovery.py): at start, then every interval."""

from __future__ import annotations

import asyncio
import logging

import pytest
from django.db import OperationalError, connection

from agents_app.execution import recovery
from agents_app.execution.recovery import Sweep, sweep_forever

pytestmark = pytest.mark.django_db(transaction=True)  # the sweeps run on threads with connections of their own


@pytest.fixture
def sweeps(monkeypatch) -> list[Sweep | Exception]:
    """The real sweep, recorded; the first one fails as if the database had gone away."""
    done: list[Sweep | Exception] = []
    sweep = recovery.recovery_sweep

    def recorded():
        try:
            if not done:
                raise OperationalError("the database went away")
            done.append(sweep())
            return done[-1]
        except OperationalError as error:
            done.append(error)
            raise
        finally:
            connection.close()  # this thread's: nothing left open when the test database is dropped

    monkeypatch.setattr(recovery, "recovery_sweep", recorded)
    return done


def test_the_sweeps_go_on_after_a_failed_one(sweeps, caplog):
    async def three_sweeps():
        loop = asyncio.create_task(sweep_forever(interval_s=0.05))
        while len(sweeps) < 3:
            await asyncio.sleep(0.01)
        loop.cancel()

    caplog.set_level(logging.WARNING, logger="agents_app.execution.recovery")
    asyncio.run(asyncio.wait_for(three_sweeps(), 20))

    assert isinstance(sweeps[0], OperationalError)
    assert sweeps[1:3] == [Sweep(resumed=[], dispatched=[]), Sweep(resumed=[], dispatched=[])]
    assert [(r.levelname, r.message) for r in caplog.records] == [("WARNING", "recovery sweep failed")]


def test_with_interval_0_only_one_sweep_at_start(sweeps):
    asyncio.run(asyncio.wait_for(sweep_forever(interval_s=0), 20))  # returns: no periodic sweeps
    assert len(sweeps) == 1
