"""Fault injection: real worker processes on a queue of their own, with short timeouts."""

import os

import pytest

FAULT_ENV = {"MAS_MODEL_TIMEOUT_S": "1", "MAS_SESSION_STALE_S": "3"}


@pytest.fixture(scope="module")
def fault_worker(django_db_setup, django_db_blocker):
    """A worker that gives up on a model call after 1 s; this module's tasks go to its queue only."""
    from mas_project.celery import app
    from tests.workers import start_worker, stop_worker

    queue = f"faults-{os.getpid()}"
    before = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    worker = start_worker(f"faults-{os.getpid()}", queue=queue, env=FAULT_ENV)
    yield worker
    stop_worker(worker)
    app.conf.task_default_queue = before
