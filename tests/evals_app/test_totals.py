"""An eval run's totals: pass rate, cost, tokens, p50/p95 duration (nearest rank), the judge's spend."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from evals_app.models import EvalCaseResult, EvalRun
from evals_app.services import eval_totals, percentile


def test_percentile_is_the_nearest_rank():
    assert percentile([], 0.5) is None
    assert percentile([4.0], 0.5) == percentile([4.0], 0.95) == 4.0
    values = [float(n) for n in range(20, 0, -1)]  # 20 … 1: the order they come in does not matter
    assert (percentile(values, 0.5), percentile(values, 0.95), percentile(values, 1.0)) == (10.0, 19.0, 20.0)
    assert (percentile([1.0, 2.0, 3.0], 0.5), percentile([1.0, 2.0, 3.0], 0.95)) == (2.0, 3.0)
    assert percentile([0.12345, 9.0], 0.5) == 0.123  # rounded to the millisecond


@pytest.mark.django_db
def test_totals_count_cases_sum_usage_and_take_percentiles_of_the_durations(team_a):
    eval_run = EvalRun.objects.create(team=team_a, dataset_slug="d", dataset_version=1, agent="writer",
                                      deadline=timezone.now() + timedelta(minutes=5),
                                      judge_cost_usd=Decimal("0.25"), judge_tokens=300,
                                      totals={"judge_calls": 4})
    for n in range(1, 11):  # 10 cases: 7 passed, 2 failed, 1 still running (no duration yet)
        status = "passed" if n <= 7 else ("failed" if n <= 9 else "pending")
        EvalCaseResult.objects.create(eval_run=eval_run, case_id=f"c{n}", position=n, status=status,
                                      cost_usd=Decimal("0.010000") * n, tokens=100 * n,
                                      duration_s=None if status == "pending" else float(n))
    assert eval_totals(eval_run=eval_run) == {
        "cases": 10, "passed": 7, "failed": 2, "pending": 1, "pass_rate": 0.7,
        "cost_usd": "0.55", "tokens": 5500,
        # Durations 1 … 9 s (the pending case has none): the 5th and the 9th.
        "duration_p50_s": 5.0, "duration_p95_s": 9.0,
        "judge_cost_usd": "0.25", "judge_tokens": 300, "judge_calls": 4,
    }


@pytest.mark.django_db
def test_totals_of_an_eval_run_without_cases(team_a):
    eval_run = EvalRun.objects.create(team=team_a, dataset_slug="d", dataset_version=1, agent="writer",
                                      deadline=timezone.now())
    assert eval_totals(eval_run=eval_run) == {
        "cases": 0, "passed": 0, "failed": 0, "pending": 0, "pass_rate": 0.0, "cost_usd": "0",
        "tokens": 0, "duration_p50_s": None, "duration_p95_s": None,
        "judge_cost_usd": "0", "judge_tokens": 0, "judge_calls": 0,
    }


def test_the_admin_labels_the_totals_for_a_reader():
    from evals_app.admin import totals_rows

    totals = {"cases": 10, "passed": 7, "failed": 2, "pending": 1, "pass_rate": 0.7, "cost_usd": "0.550000",
              "tokens": 5500, "duration_p50_s": 5.0, "duration_p95_s": 9.0, "judge_cost_usd": "0.250000",
              "judge_tokens": 300, "judge_calls": 4}
    assert totals_rows(totals) == [
        ("Cases", "10"), ("Passed", "7"), ("Failed", "2"), ("Pending", "1"), ("Pass rate", "70%"),
        ("Cost", "$0.55"), ("Tokens", "5500"), ("Duration p50 / p95", "5.0 s / 9.0 s"),
        ("Judge", "$0.25, 300 tokens, 4 calls")]
    # No pending case, no judge call, no duration yet: those rows say so or are left out.
    quiet = {**totals, "pending": 0, "judge_calls": 0, "duration_p50_s": None, "duration_p95_s": None}
    assert [label for label, _ in totals_rows(quiet)] == ["Cases", "Passed", "Failed", "Pass rate", "Cost", "Tokens",
                                                          "Duration p50 / p95"]
    assert totals_rows(quiet)[-1] == ("Duration p50 / p95", "— / —")
