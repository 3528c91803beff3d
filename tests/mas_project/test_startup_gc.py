"""A server process's start-up objects leave the collector's full collections (mas_project/startup_gc.py).

Under daphne, the real path is in tests/mas_project/test_web_process_limits.py: before the freeze, a hostile request
that happened to set off a full collection cost daphne 0.4-0.56 s of CPU (the whole heap scanned), past its
0.25 s limit; those tests ran alone then, in any order, and failed in three runs of three.
"""

from __future__ import annotations

import gc
import sys
import weakref

import pytest
from celery.signals import worker_ready

from mas_project import celery as worker_setup
from mas_project.startup_gc import frozen_once_daphne_serves, startup_objects_frozen


@pytest.fixture
def unfrozen():
    assert gc.get_freeze_count() == 0
    yield
    gc.unfreeze()


def test_a_worker_freezes_its_start_up_objects_once_ready(unfrozen):
    # The first receiver: frozen before the sweeps and the scheduler start sessions.
    assert [ref() for _, ref in worker_ready.receivers][0] is worker_setup._startup_objects_frozen
    worker_setup._startup_objects_frozen()
    frozen = gc.get_freeze_count()
    assert frozen > 10_000  # this process's modules, classes, functions...
    gc.collect()
    assert gc.get_freeze_count() == frozen  # ...which no collection scans or frees


def test_garbage_left_by_start_up_is_collected_before_the_freeze(unfrozen):
    class Cycle:
        pass

    left = Cycle()
    left.me = left
    gone = weakref.ref(left)
    del left
    assert gone() is not None  # a cycle: only a collection frees it
    startup_objects_frozen()
    assert gone() is None  # collected, not frozen for good
    assert gc.get_freeze_count() > 0


def test_outside_daphne_nothing_is_frozen(unfrozen, monkeypatch):
    monkeypatch.delitem(sys.modules, "twisted.internet.reactor", raising=False)
    frozen_once_daphne_serves()
    assert gc.get_freeze_count() == 0
