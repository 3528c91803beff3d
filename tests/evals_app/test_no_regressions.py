"""Issue 23, point 16: ``manage.py eval --no-regressions`` fails on a regression alone.

A case that passed in the baseline (``--compare-to``, else the dataset's previous finished eval run) and
fails now is exit code 4; a pass rate below 100% with no regression is exit code 0 — unless ``--min-pass``
is given too. Real worker, scripted agents (the writer v1 may write files, v2 may not).
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from evals_app.models import EvalRun
from tests.evals_app.test_eval_runs import writer_versions  # noqa: F401 (fixture)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def run_eval(team, *args: str) -> list[str]:
    out = StringIO()
    call_command("eval", "writer-evals", "--team", team.slug, *args, stdout=out)
    return [" ".join(line.split()) for line in out.getvalue().splitlines()]


def test_no_regressions_fails_on_a_regression_alone(team_a, writer_versions, celery_worker_process):  # noqa: F811
    # The first eval of the dataset: nothing to regress from, and v1 passes every case.
    lines = run_eval(team_a, "--agent-version", "1", "--no-regressions")
    assert lines[-1] == "no earlier eval run of this dataset to compare with: no regression possible"
    first = EvalRun.objects.get()

    # v2 drops vfs_write: "report" passed with v1 (the previous eval run) and fails now.
    with pytest.raises(CommandError) as caught:
        run_eval(team_a, "--agent-version", "2", "--no-regressions")
    assert caught.value.returncode == 4
    assert str(caught.value) == f"1 case(s) passed in eval {first.pk} and fail now: report"
    second = EvalRun.objects.order_by("-pk").first()
    assert second.totals["pass_rate"] == 0.5

    # Again with v2: "report" failed last time too. 50% passes, but nothing regressed: exit code 0.
    lines = run_eval(team_a, "--agent-version", "2", "--no-regressions")
    assert "Comparison, v2 → v2 (regressions first):" in lines
    assert "STILL_FAILING report: failed → failed" in lines
    assert lines[-1] == f"no regression against eval {second.pk}"

    # The pass rate still gates when asked for beside it.
    with pytest.raises(CommandError) as caught:
        run_eval(team_a, "--agent-version", "2", "--no-regressions", "--min-pass", "0.9")
    assert (caught.value.returncode, str(caught.value)) == (1, "pass rate 50% is below --min-pass 90%")

    # With --compare-to, the baseline is that version's eval run, started beside it.
    with pytest.raises(CommandError) as caught:
        run_eval(team_a, "--agent-version", "2", "--compare-to", "1", "--no-regressions")
    baseline = EvalRun.objects.get(pk=EvalRun.objects.order_by("-pk").first().baseline_id)
    assert (caught.value.returncode, str(caught.value)) == (
        4, f"1 case(s) passed in eval {baseline.pk} and fail now: report")
