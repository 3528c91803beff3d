"""The shipped dataset (defs/evals/research-and-review-evals.md) passes on the demo team with the bundled recording.

What a new team does after `make demo`: the manual's `manage.py eval research-and-review-evals --team demo`
(docs/concepts/evals.md), run here as the page writes it. The team has no
usable model provider (the shipped OpenAI row names a key variable that is not set), so the agents under test
play the bundled demo recording; the cases run as workflow runs on a real Celery worker.
"""

from __future__ import annotations

import shlex
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from agents_app.execution.modelchoice import NO_PROVIDER_NOTICE
from agents_app.models import Run, Session, WorkspaceFile
from evals_app.models import EvalRun

SLUG = "research-and-review-evals"


def manual_command() -> list[str]:
    """The arguments of the manual's command for the shipped dataset (after `python manage.py`)."""
    from tests.manual import example

    words = shlex.split(example("docs/concepts/evals.md", language="sh", containing=SLUG).text)
    assert words[:2] == ["python", "manage.py"], words
    return words[2:]


def test_the_manual_names_the_shipped_file_and_its_command():
    assert manual_command() == ["eval", SLUG, "--team", "demo"]
    assert Path(settings.BASE_DIR, "defs", "evals", f"{SLUG}.md").is_file()


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_the_shipped_dataset_passes_on_the_demo_team_with_the_bundled_recording(celery_worker_process,
                                                                                demo_secrets):
    call_command("setup_demo", stdout=StringIO())
    out = StringIO()
    call_command(*manual_command(), stdout=out)  # --min-pass is 1.0 by default: raises unless every case passes
    lines = [" ".join(line.split()) for line in out.getvalue().splitlines()]

    eval_run = EvalRun.objects.get()
    assert (eval_run.workflow, eval_run.agent, eval_run.status) == ("research-and-review", "", "finished")
    cases = list(eval_run.cases.all())
    assert [(case.case_id, case.status, case.score) for case in cases] == [("tides", "passed", 1.0),
                                                                           ("scripted-research", "passed", 1.0)]
    assert [len(case.checks) for case in cases] == [14, 5]
    assert all(check["passed"] is True for case in cases for check in case.checks)
    tides = {check["type"] + ":" + str(index): check["reason"] for index, check in enumerate(cases[0].checks)}
    assert tides["file:6"] == "report.md contains '16 m (Burntcoat Head)'"
    assert tides["max_tokens:12"] == "0 tokens, at most 0 allowed"
    totals = eval_run.totals
    assert (totals["cases"], totals["passed"], totals["pass_rate"], totals["cost_usd"], totals["tokens"]) == (
        2, 2, 1.0, "0", 0)
    assert 0 < totals["duration_p50_s"] <= totals["duration_p95_s"]

    # The agents under test replayed the recording (the run says so); the fixture scripted only the researcher.
    runs = {case.case_id: case.run for case in cases}
    assert {(run.workflow, run.is_eval, run.status, run.notice) for run in runs.values()} == {
        ("research-and-review", True, "succeeded", NO_PROVIDER_NOTICE)}
    providers = {case_id: sorted(Session.objects.filter(run=run).values_list("agent", "provider"))
                 for case_id, run in runs.items()}
    assert providers == {
        "tides": [("researcher", "scripted"), ("reviewer", "scripted"), ("reviewer", "scripted"),
                  ("writer", "scripted")],
        "scripted-research": [("researcher", "scripted"), ("reviewer", "scripted"), ("reviewer", "scripted"),
                              ("writer", "scripted")],
    }
    models = {case_id: sorted(set(Session.objects.filter(run=run).values_list("agent", "model")))
              for case_id, run in runs.items()}
    # The case's script, billed as the team's scripted model of the researcher's tier; not the recording.
    assert models["scripted-research"][0] == ("researcher", "scripted-small")
    assert ("writer", "demo-recording") in models["scripted-research"]
    assert set(models["tides"]) == {("researcher", "demo-recording"), ("reviewer", "demo-recording"),
                                    ("writer", "demo-recording")}
    files = {case_id: sorted(WorkspaceFile.objects.filter(run=run).values_list("path", flat=True))
             for case_id, run in runs.items()}
    assert files == {"tides": ["notes/tides-findings.md", "report.md"], "scripted-research": ["report.md"]}

    assert lines[-1] == "pass rate 100% meets --min-pass 100%"
    assert "Pass rate: 100% (2 of 2 cases)" in lines
    assert "PASS file: report.md contains '16 m (Burntcoat Head)'" in lines
    assert Run.objects.filter(is_eval=False).count() == 0  # nothing but the cases' runs
