"""Issue 23, point 13: one collection chain per eval run, and a scoring error never holds an eval run forever.

The passes are called in this process, against the real database (the chain's Celery side is tested with a
real worker in test_collection_durable.py).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents_app.models import Run
from evals_app import collection
from evals_app.collection import COLLECT_EVERY_S, RETRY_AFTER_S, eval_collect_pass, eval_runs_sweep
from evals_app.kinds import EVAL
from evals_app.models import EvalCaseResult, EvalRun
from tests.runs import agent, define

pytestmark = pytest.mark.django_db

DATASET = """---
name: Writer evals
agent: writer
cases:
- id: greet
  task: Greet the reader.
  script:
    writer:
    - text: Hello!
  checks:
  - type: contains
    value: Hello
---
"""


@pytest.fixture
def eval_run(team_a):
    """An eval run of one case whose run has already ended, past nothing yet."""
    agent(team_a, "Writer")
    dataset = define(team_a, EVAL, DATASET).row
    run = Run.objects.create(team=team_a, agent="writer", status="succeeded", result="Hello!", is_eval=True)
    row = EvalRun.objects.create(team=team_a, dataset=dataset, dataset_slug=dataset.slug, dataset_version=1,
                                 agent="writer", deadline=timezone.now() + timedelta(minutes=10))
    EvalCaseResult.objects.create(eval_run=row, case_id="greet", position=0, run=run)
    return row


def test_only_the_chain_holding_the_token_goes_on_and_a_pass_under_way_excludes_others(eval_run):
    EvalRun.objects.filter(pk=eval_run.pk).update(collect_token="current",
                                                  collecting_until=timezone.now() + timedelta(minutes=1))
    # Another pass is under way: neither the chain's next pass nor a takeover runs.
    assert eval_collect_pass(eval_run_id=eval_run.pk, token="current") == (None, "current")
    assert eval_collect_pass(eval_run_id=eval_run.pk)[0] is None
    EvalRun.objects.filter(pk=eval_run.pk).update(collecting_until=None)
    # An old chain (its token replaced by a takeover) stops without scoring anything.
    assert eval_collect_pass(eval_run_id=eval_run.pk, token="old") == (None, "old")
    assert eval_run.cases.get().status == "pending"
    # The chain holding the token scores, closes the eval run and releases it.
    assert eval_collect_pass(eval_run_id=eval_run.pk, token="current") == (None, "current")
    done = EvalRun.objects.get(pk=eval_run.pk)
    assert (done.status, done.cases.get().status, done.collecting_until) == ("finished", "passed", None)
    assert done.collected_at is not None


def test_a_scoring_error_is_retried_then_fails_the_case_past_the_deadline(eval_run, monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("the scorer broke")

    monkeypatch.setattr(collection, "observation_of", broken)
    come_back_in_s, token = eval_collect_pass(eval_run_id=eval_run.pk)
    # Before the deadline the case stays pending and the chain comes back.
    assert (come_back_in_s, eval_run.cases.get().status) == (COLLECT_EVERY_S, "pending")
    EvalRun.objects.filter(pk=eval_run.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    assert eval_collect_pass(eval_run_id=eval_run.pk, token=token) == (None, token)
    done = EvalRun.objects.get(pk=eval_run.pk)
    case = done.cases.get()
    assert (done.status, case.status, case.checks) == ("finished", "failed", [
        {"type": "scoring", "passed": False, "score": 0.0, "reason": "scoring failed: the scorer broke"}])


def test_a_failed_pass_comes_back_after_the_retry_delay(eval_run, monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("database away")

    monkeypatch.setattr(collection, "eval_collect", broken)
    assert eval_collect_pass(eval_run_id=eval_run.pk, token="")[0] == RETRY_AFTER_S
    row = EvalRun.objects.get(pk=eval_run.pk)
    assert (row.status, row.collecting_until, row.collect_token != "") == ("running", None, True)


def test_the_sweep_restarts_only_silent_collections(eval_run, monkeypatch, settings):
    settings.MAS_SESSION_STALE_S = 30
    sent: list[tuple[int, str]] = []
    monkeypatch.setattr(collection, "eval_collect_async",
                        lambda *, eval_run_id, token="", countdown=0.5: sent.append((eval_run_id, token)))
    assert eval_runs_sweep() == []  # it started a moment ago
    EvalRun.objects.filter(pk=eval_run.pk).update(created_at=timezone.now() - timedelta(minutes=1))
    EvalRun.objects.filter(pk=eval_run.pk).update(collected_at=timezone.now())
    assert eval_runs_sweep() == []  # a pass ended a moment ago
    EvalRun.objects.filter(pk=eval_run.pk).update(collected_at=timezone.now() - timedelta(minutes=1),
                                                  collecting_until=timezone.now() + timedelta(minutes=1))
    assert eval_runs_sweep() == []  # a pass is under way
    EvalRun.objects.filter(pk=eval_run.pk).update(collecting_until=timezone.now() - timedelta(seconds=1))
    assert eval_runs_sweep() == [str(eval_run.pk)]  # its pass's lease ran out
    assert sent == [(eval_run.pk, "")]  # a takeover: no token
    EvalRun.objects.filter(pk=eval_run.pk).update(status="finished")
    assert eval_runs_sweep() == []
