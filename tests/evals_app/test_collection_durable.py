"""Issue 23, point 13: an eval run's collection is durable and calls its judge with no transaction open.

A real worker on a queue of its own, which sweeps every second and counts an eval run as abandoned once
its collection has been silent for ``STALE_S``: a lost collect message is found by that sweep, a pass that
fails (its table gone for a moment) is retried by its own chain, and the judge's model — a local server
speaking OpenAI's wire format — is called while the worker holds no transaction and no row lock.
"""

from __future__ import annotations

import os
import time

import pytest
from django.db import connection, connections
from django.utils import timezone

from agents_app.kinds import PROVIDER
from evals_app.kinds import EVAL
from evals_app.models import EvalRun
from evals_app.services import eval_run_start
from tests.agents_app.llm.fake_servers import FakeServer, openai_stream, sse
from tests.runs import agent, define, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

STALE_S = 8
ENV = {"MAS_SESSION_STALE_S": str(STALE_S), "MAS_REAP_INTERVAL_S": "1"}

DATASET = """---
name: Slow evals
agent: writer
cases:
- id: hello
  task: Greet the reader.
  script:
    writer:
    - text: Hello, reader!
      latency_ms: {latency_ms}
  checks:
  - type: exact
    value: Hello, reader!
---
"""


@pytest.fixture(scope="module")
def sweeping_worker(django_db_setup, django_db_blocker):
    from mas_project.celery import app
    from tests.workers import start_worker, stop_worker

    queue = f"evals-durable-{os.getpid()}"
    before = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    worker = start_worker(queue, queue=queue, env=ENV, concurrency=16)
    yield worker
    stop_worker(worker)
    app.conf.task_default_queue = before


def finished(eval_run: EvalRun, timeout: float = 90) -> EvalRun:
    return wait_until(lambda: EvalRun.objects.filter(pk=eval_run.pk, status="finished").first(), timeout,
                      f"eval run {eval_run.pk} to finish")


def test_a_lost_collect_message_still_finishes_the_eval_run_through_the_sweep(team_a, sweeping_worker,
                                                                              monkeypatch):
    agent(team_a, "Writer")
    dataset = define(team_a, EVAL, DATASET.format(latency_ms=0)).row
    sent: list[int] = []
    # The broker loses the first collect message (the only one eval_run_start sends).
    monkeypatch.setattr("evals_app.services.eval_collect_async", lambda *, eval_run_id, **kw: sent.append(eval_run_id))
    eval_run = eval_run_start(team=team_a, dataset=dataset)
    assert sent == [eval_run.pk]
    assert EvalRun.objects.get(pk=eval_run.pk).collect_token == ""  # no pass ever ran

    done = finished(eval_run, timeout=STALE_S + 60)
    case = done.cases.get()
    assert (case.status, case.score, done.totals["passed"]) == ("passed", 1.0, 1)
    assert done.collect_token != "" and done.collecting_until is None  # a pass the sweep sent, then released


def test_a_failed_collection_pass_does_not_end_the_chain(team_a, sweeping_worker):
    agent(team_a, "Writer")
    dataset = define(team_a, EVAL, DATASET.format(latency_ms=4000)).row
    eval_run = eval_run_start(team=team_a, dataset=dataset)
    token = wait_until(lambda: EvalRun.objects.filter(pk=eval_run.pk).exclude(collect_token="")
                       .values_list("collect_token", flat=True).first(), 30, "the first collection pass")
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE evals_app_evalcaseresult RENAME TO evals_app_evalcaseresult_away")
    try:
        gone_at = timezone.now()
        # Every pass now fails at its first read of the cases; one has ended since.
        wait_until(lambda: EvalRun.objects.filter(pk=eval_run.pk, collected_at__gt=gone_at).exists(), 30,
                   "a collection pass to fail")
        assert EvalRun.objects.get(pk=eval_run.pk).status == "running"
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE evals_app_evalcaseresult_away RENAME TO evals_app_evalcaseresult")
    done = finished(eval_run)
    assert done.cases.get().status == "passed"
    # The same chain went on after its failed pass: the sweep never had to take the collection over.
    assert done.collect_token == token


JUDGED = """---
name: Judged
agent: writer
judge:
  model: judges:judge-m
cases:
- id: tides
  task: Explain tides.
  script:
    writer:
    - text: The moon pulls the sea.
  checks:
  - type: judge
    rubric: Mentions the moon.
---
"""

# Row locks (FOR UPDATE, writes) on the eval tables, and connections left in a transaction, of any other backend.
LOCKS = """
SELECT l.relation::regclass::text, l.mode FROM pg_locks l JOIN pg_database d ON d.oid = l.database
WHERE d.datname = current_database() AND l.pid <> pg_backend_pid()
  AND l.relation IN ('evals_app_evalrun'::regclass, 'evals_app_evalcaseresult'::regclass)
  AND l.mode IN ('RowShareLock', 'RowExclusiveLock')
"""
# A transaction held across the judge's call has been idle since before the request: at least HELD_S when the
# judge looks. (Every worker's scheduler claims once a second in a short transaction of its own: idle in it for
# well under a millisecond between statements, those are not what this test is about.)
HELD_S = 0.2
IN_TRANSACTION = """
SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND state LIKE 'idle in transaction%%' AND state_change < clock_timestamp() - make_interval(secs => %s)
"""


def test_the_judge_is_called_with_no_transaction_open_and_no_row_locked(team_a, sweeping_worker):
    server = FakeServer().start()
    seen: list[tuple[list, int]] = []

    def look(_request) -> None:
        try:
            time.sleep(HELD_S)  # the judge answers late: what its caller holds, it holds this long
            with connections["default"].cursor() as cursor:  # this thread's own connection
                cursor.execute(LOCKS)
                locks = cursor.fetchall()
                cursor.execute(IN_TRANSACTION, [HELD_S / 2])
                seen.append((locks, cursor.fetchone()[0]))
        finally:
            connections["default"].close()

    server.on_request = look
    try:
        define(team_a, PROVIDER, "---\nname: Judges\ntype: openai\nbase_url: {url}/v1\nmodels:\n- name: judge-m\n"
                                 "---\n".format(url=server.url))
        agent(team_a, "Writer")
        dataset = define(team_a, EVAL, JUDGED).row
        server.add(sse(openai_stream(text=['{"score": 0.9, "reason": "names the moon"}'], usage=(100, 10))))
        done = finished(eval_run_start(team=team_a, dataset=dataset))
        assert done.cases.get().checks == [
            {"type": "judge", "passed": True, "score": 0.9, "reason": "score 0.9 (at least 0.5): names the moon"}]
        assert seen == [([], 0)]
        assert (done.judge_tokens, done.totals["judge_calls"]) == (110, 1)
    finally:
        server.stop()
