"""Shared fixtures: teams with their own definition folders, members, tokens."""

from __future__ import annotations

import itertools
import os
import time

import pytest
from django.test import Client

from mas_core.teams import api_token_create, membership_set, team_create, user_create

_counter = itertools.count(1)


@pytest.fixture(autouse=True, scope="session")
def _test_flush():
    """A transactional test's teardown empties the tables as Django's flush does (TRUNCATE), but without making
    the content types, permissions and role groups again each time: 0.3 s instead of 0.75 s (~375 such tests).

    - The content types and permissions are kept: the migrations made them and no test changes them. Emptied, they
      would come back at once with new ids, and a server kept across tests (daphne in tests/e2e) would go on with the
      old ones in its cache. So of what ``post_migrate`` does after a flush — make the content types, the
      permissions and the role groups (mas_core.teams) — only the role groups are made again, and after the first
      time written back as they were made (~0.45 s saved).
    - A deadlock is tried again (three times at most): the TRUNCATE of every table at once can deadlock with a
      worker's periodic sweep (lost work, deadlines) reading two of them, and Postgres cancels one side; the sweep
      tries again at its next interval. (DELETE instead of TRUNCATE took 0.05 s, but the parallel suite failed more
      often with it, the scheduler's weighted shares twice: not understood, not kept.)"""
    from django.contrib.auth.management import create_permissions
    from django.contrib.contenttypes.management import create_contenttypes
    from django.core.management.commands import flush as flush_command
    from django.db import OperationalError
    from django.db.backends.base.operations import BaseDatabaseOperations
    from django.db.backends.postgresql.operations import DatabaseOperations
    from django.db.models.signals import post_migrate

    from mas_core.teams import role_groups_sync

    receivers = {entry[1]() for entry in post_migrate.receivers}  # (key, weak reference, is_async)
    assert receivers == {create_contenttypes, create_permissions, role_groups_sync}, (
        f"post_migrate has receivers the tests' flush does not run again: {receivers}")
    kept = {"django_content_type", "auth_permission"}
    sql_flush = DatabaseOperations.sql_flush
    execute_flush = BaseDatabaseOperations.execute_sql_flush  # PostgreSQL's operations inherit it
    emit_post_migrate = flush_command.emit_post_migrate_signal

    def flush_but_kept(self, style, tables, **kwargs):
        return sql_flush(self, style, [table for table in tables if table not in kept], **kwargs)

    def execute_sql_flush(self, sql_list):
        for attempt in range(3):
            try:
                return execute_flush(self, sql_list)
            except OperationalError as error:
                if "deadlock detected" not in str(error) or attempt == 2:
                    raise
                time.sleep(0.2)

    made: dict[str, list] = {}  # per database: the role groups' rows as role_groups_sync made them after a flush

    def role_groups_again(verbosity, interactive, db, **kwargs):
        """The first time, role_groups_sync (~0.1 s: ~40 queries) and a copy of its rows; then the copy, ids kept."""
        from django.db import connections

        with connections[db].cursor() as cursor:
            if db not in made:
                role_groups_sync(using=db)
                made[db] = []
                for table in ("auth_group", "auth_group_permissions"):
                    cursor.execute(f"SELECT * FROM {table}")
                    made[db].append((table, [column.name for column in cursor.description], cursor.fetchall()))
                return
            for table, columns, rows in made[db]:
                cursor.executemany(f"INSERT INTO {table} ({', '.join(columns)}) "
                                   f"VALUES ({', '.join(['%s'] * len(columns))})", rows)

    DatabaseOperations.sql_flush = flush_but_kept
    DatabaseOperations.execute_sql_flush = execute_sql_flush
    flush_command.emit_post_migrate_signal = role_groups_again
    yield
    DatabaseOperations.sql_flush = sql_flush
    del DatabaseOperations.execute_sql_flush
    flush_command.emit_post_migrate_signal = emit_post_migrate


@pytest.fixture(autouse=True)
def _defs_root(settings, tmp_path):
    """Every test writes markdown under its own temporary folder."""
    settings.MAS_DEFS_ROOT = tmp_path / "defs-root"
    return settings.MAS_DEFS_ROOT


@pytest.fixture
def tls_contexts(monkeypatch) -> list[str]:
    """The CA bundles read while the test runs, one entry each: an HTTP client that builds its own TLS context reads
    one (~45 ms, on the event loop of whoever builds it) — the process's shared context (mas_core.tls, built here
    first if this process has not yet) reads none."""
    import ssl

    from mas_core.tls import tls

    tls()
    read: list[str] = []
    load_verify, load_default = ssl.SSLContext.load_verify_locations, ssl.SSLContext.load_default_certs
    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations",
                        lambda self, *args, **kwargs: (read.append("verify"), load_verify(self, *args, **kwargs))[1])
    monkeypatch.setattr(ssl.SSLContext, "load_default_certs",
                        lambda self, *args, **kwargs: (read.append("default"), load_default(self, *args, **kwargs))[1])
    return read


@pytest.fixture
def make_team(db, tmp_path):
    def make(slug: str | None = None, **kwargs):
        slug = slug or f"team-{next(_counter)}"
        kwargs.setdefault("defs_dir", str(tmp_path / "defs" / slug))
        return team_create(slug=slug, name=slug.title(), **kwargs)

    return make


@pytest.fixture
def make_member(db):
    def make(team, role: str = "editor", username: str | None = None):
        user = user_create(username=username or f"user-{next(_counter)}", password="pw-for-tests-1")
        membership_set(team=team, user=user, role=role)
        return user

    return make


@pytest.fixture
def make_token(db):
    def make(team, user, role: str | None = None) -> str:
        return api_token_create(user=user, team=team, role=role).token

    return make


class ApiClient(Client):
    """A test client that sends a bearer token and JSON bodies."""

    def __init__(self, token: str | None = None):
        super().__init__()
        self.token = token

    def _auth(self, extra):
        if self.token:
            extra.setdefault("HTTP_AUTHORIZATION", f"Bearer {self.token}")
        return extra

    def get(self, path, data=None, **extra):
        return super().get(path, data, **self._auth(extra))

    def delete(self, path, data="", **extra):
        return super().delete(path, data, **self._auth(extra))

    def post(self, path, data=None, content_type="application/json", **extra):
        return super().post(path, data, content_type=content_type, **self._auth(extra))

    def put(self, path, data="", content_type="application/json", **extra):
        return super().put(path, data, content_type=content_type, **self._auth(extra))

    def patch(self, path, data="", content_type="application/json", **extra):
        return super().patch(path, data, content_type=content_type, **self._auth(extra))


@pytest.fixture
def whole_rate_window():
    """Start with 20 s or more left of the rate limits' minute: counts crossing into a new one would start over."""
    from mas_core import ratelimit

    if ratelimit.retry_after() < 20:
        time.sleep(ratelimit.retry_after() + 0.1)


@pytest.fixture
def team_a(make_team):
    return make_team("alpha")


@pytest.fixture
def team_b(make_team):
    return make_team("beta")


@pytest.fixture
def api_for(make_member, make_token):
    """``api_for(team, role)`` → an ApiClient holding a token of a new member."""

    def make(team, role: str = "editor") -> ApiClient:
        user = make_member(team, role)
        client = ApiClient(make_token(team, user))
        client.user = user
        return client

    return make


@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup, django_db_blocker):
    """A real Celery worker process on this test run's own queue and database.

    It sweeps for lost work once, when it starts (``MAS_REAP_INTERVAL_S=0``), not every 10 s: it outlives the
    test that started it, and its periodic sweep would take the rows later tests build by hand (a "running" run
    with nothing admitted is dispatched and fails, a session without a heartbeat is resumed). The tests of the
    sweeps start workers of their own that sweep often (tests/faults)."""
    from tests.workers import start_worker, stop_worker

    worker = start_worker(f"test-{os.getpid()}", env={"MAS_REAP_INTERVAL_S": "0"})
    yield worker
    stop_worker(worker)


@pytest.fixture
def unserved(monkeypatch):
    """Work the test creates goes to a pool (a Celery queue) no worker serves: its rows stay as the test built
    them, though a worker of this process's suite may be running. Returns that queue's name."""
    from mas_project.celery import app

    queue = f"unserved-{os.getpid()}"
    monkeypatch.setitem(app.conf, "task_default_queue", queue)
    return queue


@pytest.fixture
def loop_connections_closed():
    """The sessions run on this process's loop: its connections (the store's pool, the database threads') are
    closed afterwards, or the test database could not be dropped."""
    yield
    import asyncio
    import threading

    from django.db import connections

    from agents_app.execution.store import pool
    from mas_core.runner import db, runner

    threads = runner._db_threads
    barrier = threading.Barrier(threads)

    def close() -> None:  # one call per thread: each waits for all the others
        connections.close_all()
        barrier.wait(timeout=10)

    async def close_all() -> None:
        for conn in pool().idle:
            await conn.close()
        pool().idle.clear()
        await asyncio.gather(*(db(close)() for _ in range(threads)))

    runner.run(close_all())


@pytest.fixture
def runs_settled(transactional_db):
    """After a test with the worker: let its runs end (or cancel them) before the tables are emptied.

    A session still writing while the test database is flushed would deadlock
    the flush; a test that does not wait for its run (``--no-follow``) leaves one.
    """
    yield
    from agents_app.execution.runs import run_cancel
    from agents_app.models import Activation, Run

    def busy() -> bool:
        return (Run.objects.filter(status__in=["queued", "running"]).exists()
                or Activation.objects.filter(status__in=["ready", "dispatched", "running"]).exists())

    deadline = time.monotonic() + 20
    while busy() and time.monotonic() < deadline:
        time.sleep(0.1)
    for run in Run.objects.filter(status__in=["queued", "running", "waiting"]):
        run_cancel(run=run)
    deadline = time.monotonic() + 10
    while busy() and time.monotonic() < deadline:
        time.sleep(0.1)


def pytest_configure(config):
    """Test databases are copied from one migrated template (tests/template_db.py), not migrated each."""
    import django
    from django.apps import apps

    from tests.template_db import template_use

    if not apps.ready:
        django.setup()
    template_use()


def pytest_collection_modifyitems(items):
    for item in items:
        if "celery_worker_process" in item.fixturenames and "runs_settled" not in item.fixturenames:
            item.fixturenames.append("runs_settled")


@pytest.fixture
def demo_secrets(settings):
    """The variables `make demo` declares for team demo (the Makefile's MAS_TEAM_SECRETS), as setup_demo needs."""
    import re
    from pathlib import Path

    [declared] = re.findall(r"^export MAS_TEAM_SECRETS \?= (.+)$",
                            Path(settings.BASE_DIR, "Makefile").read_text(), re.M)
    settings.MAS_TEAM_SECRETS = declared
    return declared
