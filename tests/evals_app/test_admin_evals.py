"""The admin: start an eval from a dataset, read its results and comparison, save a run as a case."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from agents_app.execution.runs import run_start
from evals_app.kinds import EVAL
from evals_app.models import EvalDataset, EvalRun
from tests.evals_app.test_eval_runs import DATASET, eval_done
from tests.runs import agent, define, finish


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_the_results_page_lists_cases_checks_and_regressions_first(team_a, make_member, celery_worker_process):
    agent(team_a, "Writer", "tools: [vfs_read, vfs_write]\n")
    agent(team_a, "Writer", "tools: [vfs_read]\n")
    dataset = define(team_a, EVAL, DATASET).row
    admin = client_of(make_member(team_a, "admin"))
    form = reverse("admin:evals_app_evaldataset_run", args=[dataset.pk])
    assert admin.get(form).status_code == 200
    started = admin.post(form, {"agent_version": "2", "compare_to": "1"})
    eval_run = EvalRun.objects.get(baseline__isnull=False)
    assert started["Location"] == reverse("admin:evals_app_evalrun_change", args=[eval_run.pk])
    eval_done(eval_run)
    eval_done(eval_run.baseline)

    page = admin.get(started["Location"]).content.decode()
    cases = page[page.index('id="eval-cases"'):page.index("</table>", page.index('id="eval-cases"'))]
    assert re.findall(r'<tr class="case-(\w+)"><td><b>([\w-]+)</b>', cases) == [("passed", "greet"),
                                                                               ("failed", "report")]
    assert "FAIL file" in cases and "no file report.md in the workspace (files: notes.md)" in cases
    comparison = page[page.index('id="eval-comparison"'):]
    assert re.findall(r'<tr class="change-(\w+)"><td>\w+</td><td>([\w-]+)</td>', comparison) == [
        ("regression", "report"), ("still_passing", "greet")]
    assert "<th>v1</th><th>v2</th>" in comparison
    assert "<tr><th>Pass rate</th><td>50%</td></tr>" in page

    # A viewer may read the results, not start an eval.
    viewer = client_of(make_member(team_a, "viewer"))
    assert viewer.get(started["Location"]).status_code == 200
    assert viewer.post(form, {}).status_code == 403
    assert EvalRun.objects.count() == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_save_as_eval_case_from_the_runs_list(team_a, make_member, celery_worker_process):
    agent(team_a, "Writer")
    run = finish(run_start(team=team_a, agent="writer", input="Say hi.", script={"writer": [{"text": "Hi!"}]}))
    admin = client_of(make_member(team_a, "admin"))
    acted = admin.post(reverse("admin:agents_app_run_changelist"),
                       {"action": "save_as_eval_case", "_selected_action": [str(run.pk)]})
    page = reverse("admin:evals_app_evaldataset_save_case", args=[run.pk])
    assert acted["Location"] == page
    assert 'value="writer-cases"' in admin.get(page).content.decode()
    saved = admin.post(page, {"dataset": "writer-cases", "case_id": "hi"})
    dataset = EvalDataset.objects.get(team=team_a, slug="writer-cases")
    assert saved["Location"] == reverse("admin:evals_app_evaldataset_change", args=[dataset.pk])
    [case] = dataset.spec["cases"]
    assert (case["id"], case["task"], case["reference"], case.get("script")) == ("hi", "Say hi.", "Hi!", None)
    assert dataset.spec["agent"] == "writer"
    # An editor of another team cannot reach the run.
    from mas_core.teams import team_create

    other = team_create(slug="other", name="Other")
    assert client_of(make_member(other, "admin")).get(page).status_code == 404
