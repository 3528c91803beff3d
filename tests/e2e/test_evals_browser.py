"""Evals in a real browser (Debian's Chromium, Playwright): the comparison page, and "save as eval case" on the monitor.

Two versions of the writer run the same dataset on a real Celery worker with scripted models; v2 lost
`vfs_write`, so its *report* case regresses. The admin's page of the eval run lists that regression first
and names it, shows each case with each check's result and reason, and the totals — and is no wider than
the screen. On the monitor, an editor saves a run as a case once it has finished (the form appears when the
run ends), through the API's ``POST /api/runs/{id}/eval-case``. Screenshots are saved in ``var/artifacts/``.
"""

from __future__ import annotations

import json
import urllib.request

import pytest
from django.urls import reverse

from agents_app.models import Run
from evals_app.kinds import EVAL
from evals_app.models import EvalDataset, EvalRun
from tests.e2e.test_admin_browser import admin_sign_in, asgi_server, width  # noqa: F401 (a fixture)
from tests.e2e.test_monitor_browser import ARTIFACTS, chromium, sign_in  # noqa: F401 (a fixture)
from tests.evals_app.test_eval_runs import DATASET, eval_done, writer_versions  # noqa: F401 (a fixture)
from tests.runs import agent, define

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


@pytest.fixture
def compared(team_a, writer_versions, make_member, make_token, celery_worker_process, asgi_server):  # noqa: F811
    """The dataset run on writer v1 (the baseline) and v2 through the API of the server the browser uses."""
    user = make_member(team_a, "admin", username="eval-admin")
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    request = urllib.request.Request(
        f"{asgi_server.url}/api/evals/{writer_versions.slug}/runs", method="POST",
        data=json.dumps({"agent_version": 2, "compare_to": 1}).encode(),
        headers={"Authorization": f"Bearer {make_token(team_a, user)}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
        started = json.load(response)
    eval_run = eval_done(EvalRun.objects.get(pk=started["id"]))
    eval_done(EvalRun.objects.get(pk=started["baseline"]))
    return {"user": user, "eval_run": eval_run}


def rows(page, table: str) -> list[list[str]]:
    """The text of each cell, row by row (the header row included), as the reader sees it."""
    return page.evaluate("""(table) => [...document.querySelectorAll(`#${table} tr`)].map(
        (row) => [...row.querySelectorAll("th, td")].map((cell) => cell.innerText.trim()))""", table)


def test_the_comparison_page_lists_the_regression_first_with_each_case_check_and_the_totals(
        compared, asgi_server, chromium):  # noqa: F811
    server, eval_run = asgi_server.url, compared["eval_run"]
    path = reverse("admin:evals_app_evalrun_change", args=[eval_run.pk])
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for screen in (1400, 390):
        context = chromium.new_context(viewport={"width": screen, "height": 900})
        page = context.new_page()
        admin_sign_in(page, server, compared["user"].username)
        response = page.goto(f"{server}{path}")
        assert response.status == 200

        comparison = rows(page, "eval-comparison")
        assert comparison == [
            ["Change", "Case", "v1", "v2", "Failed checks"],
            ["regression", "report", "passed", "failed", "no file report.md in the workspace (files: notes.md)"],
            ["still_passing", "greet", "passed", "passed", ""],
        ]
        # On the page, the comparison comes before the cases, and the regression first in it.
        tops = page.evaluate("""() => ["eval-totals", "eval-comparison", "eval-cases"].map(
            (id) => document.getElementById(id).getBoundingClientRect().top)""")
        assert tops == sorted(tops)
        first = page.locator("#eval-comparison tr").nth(1)
        assert first.get_attribute("class") == "change-regression"
        assert first.is_visible()

        cases = rows(page, "eval-cases")
        assert cases[0] == ["Case", "Status", "Score", "Run", "Reason"]
        greet_run, report_run = (str(case.run_id)[:8] for case in eval_run.cases.order_by("position"))
        assert cases[1:] == [
            ["greet", "passed", "1.0", greet_run, ""],
            ["", "PASS exact", "result equals the expected text"],
            ["", "PASS max_tool_calls", "0 tool calls, at most 0 allowed"],
            ["report", "failed", "0.6667", report_run, ""],
            ["", "FAIL file", "no file report.md in the workspace (files: notes.md)"],
            ["", "PASS tool_called", "vfs_write was called with the expected arguments"],
            ["", "PASS status", "the run succeeded"],
        ]
        assert page.locator("#eval-cases").get_by_text("FAIL file").is_visible()
        # Each case links to its run.
        link = page.locator("#eval-cases a", has_text=report_run)
        assert link.get_attribute("href") == reverse("admin:agents_app_run_change", args=[eval_run.cases.get(
            case_id="report").run_id])

        totals = dict(row for row in rows(page, "eval-totals"))
        assert {key: totals[key] for key in ("Cases", "Passed", "Failed", "Pass rate", "Cost", "Tokens")} == {
            "Cases": "2", "Passed": "1", "Failed": "1", "Pass rate": "50%", "Cost": "$0.00",
            "Tokens": str(eval_run.totals["tokens"])}
        assert totals["Duration p50 / p95"] == (f"{eval_run.totals['duration_p50_s']} s / "
                                                f"{eval_run.totals['duration_p95_s']} s")
        page.screenshot(path=str(ARTIFACTS / f"admin-eval-comparison-{screen}.png"), full_page=True)
        # A table wider than a phone scrolls inside its box: scrolled to its end, its last column is on screen.
        for table in ("eval-totals", "eval-cases", "eval-comparison"):
            right = page.evaluate("""(id) => { const box = document.getElementById(id).parentElement;
                box.scrollLeft = box.scrollWidth;
                const cells = document.querySelectorAll(`#${id} tr:first-child > *`);
                return [getComputedStyle(box).overflowX, cells[cells.length - 1].getBoundingClientRect().right]; }""",
                                  table)
            assert right[0] == "auto" and right[1] <= screen, (table, right)
            # Each cell on one line: the table scrolls in its box, no column squeezed to a word a line.
            wrapped = page.evaluate("""(id) => [...document.querySelectorAll(`#${id} th, #${id} td`)].filter((cell) => {
                const range = document.createRange(); range.selectNodeContents(cell);
                return new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size > 1;
            }).map((cell) => cell.innerText)""", table)
            assert wrapped == [], (table, screen, wrapped)
        scroll_width, inner_width = width(page)
        assert (scroll_width <= screen, inner_width) == (True, screen), scroll_width  # no wider than the screen
        context.close()


def start_run(server: str, token: str, *, agent: str, task: str, script: dict) -> str:
    request = urllib.request.Request(
        f"{server}/api/runs", method="POST",
        data=json.dumps({"agent": agent, "input": task, "script": script}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
        return json.load(response)["id"]


@pytest.mark.parametrize("screen", [1400, 390])
def test_the_monitor_saves_a_finished_run_as_an_eval_case(team_a, make_member, make_token, celery_worker_process,
                                                          asgi_server, chromium, screen):  # noqa: F811
    agent(team_a, "Writer")
    agent(team_a, "Reviewer")
    define(team_a, EVAL, DATASET)  # the writer's dataset, offered in the form
    define(team_a, EVAL, DATASET.replace("name: Writer evals\nagent: writer", "name: Reviewer evals\nagent: reviewer"))
    editor, viewer = make_member(team_a, "editor"), make_member(team_a, "viewer")
    operator = make_token(team_a, make_member(team_a, "operator"))
    server = asgi_server.url
    run_id = start_run(server, operator, agent="writer", task="Explain tides in one line.",
                       script={"writer": [{"latency_ms": 6000, "text": "Tides come from the moon."}]})

    context = chromium.new_context(viewport={"width": screen, "height": 900})
    page = context.new_page()
    sign_in(page, server, editor.username, f"/runs/{run_id}/")
    box = page.locator("#eval-case")
    # While the run works there is nothing to save yet (shown, it must have ended: a slow sign-in on a busy machine).
    assert box.is_hidden() or Run.objects.get(pk=run_id).status == "succeeded"
    page.wait_for_selector("#status.succeeded", timeout=30_000)
    box.wait_for(state="visible", timeout=5_000)
    page.wait_for_function("document.querySelectorAll('#eval-datasets option').length > 0", timeout=5_000)
    assert page.eval_on_selector_all("#eval-datasets option", "(options) => options.map((o) => o.value)") == [
        "writer-evals"]  # the reviewer's dataset is not offered for a run of the writer
    assert page.input_value("#eval-case input[name=dataset]") == "writer-cases"

    page.fill("#eval-case input[name=case_id]", "tides")
    page.click("#eval-case button[type=submit]")
    outcome = page.locator("#eval-case-outcome")
    outcome.wait_for(state="visible", timeout=10_000)
    assert outcome.inner_text() == "Saved as case tides of writer-cases (version 1, 1 case). Open the dataset writer-cases"
    dataset = EvalDataset.objects.get(team=team_a, slug="writer-cases")
    link = page.locator("#eval-case-outcome a#eval-case-dataset")
    assert link.get_attribute("href") == f"/admin/evals_app/evaldataset/by-slug/{team_a.slug}/writer-cases/"
    [case] = dataset.spec["cases"]
    assert (dataset.spec["agent"], case["id"], case["task"], case["reference"], case["checks"]) == (
        "writer", "tides", "Explain tides in one line.", "Tides come from the moon.",
        [{"type": "status", "equals": "succeeded"}, {"type": "exact"}])
    assert "script" not in case  # the writer is the agent under test: its turns are not replayed

    page.click("#eval-case button[type=submit]")  # the same case again: refused, saying why
    page.wait_for_function("document.getElementById('eval-case-outcome').className === 'error'", timeout=10_000)
    assert outcome.inner_text() == "Not saved: dataset 'writer-cases' already has a case 'tides'"
    assert EvalDataset.objects.get(team=team_a, slug="writer-cases").version == 1
    page.screenshot(path=str(ARTIFACTS / f"monitor-save-as-eval-case-{screen}.png"), full_page=True)
    scroll_width, inner_width = width(page)
    assert (scroll_width <= screen, inner_width) == (True, screen), scroll_width
    # The dataset is one click away: its page in the admin, with the new case in its markdown.
    page.goto(f"{server}/runs/{run_id}/")
    page.wait_for_selector("#status.succeeded", timeout=10_000)
    page.fill("#eval-case input[name=dataset]", "writer-more-cases")
    page.click("#eval-case button[type=submit]")
    page.wait_for_selector("#eval-case-dataset", timeout=10_000)
    page.click("#eval-case-dataset")
    more = EvalDataset.objects.get(team=team_a, slug="writer-more-cases")
    page.wait_for_url(f"{server}{reverse('admin:evals_app_evaldataset_change', args=[more.pk])}", timeout=30_000)
    assert page.locator("#content h2").first.inner_text() == "writer-more-cases"
    context.close()

    # A viewer (and an operator) may not edit datasets: no form.
    context = chromium.new_context()
    page = context.new_page()
    sign_in(page, server, viewer.username, f"/runs/{run_id}/")
    assert page.locator("#status.succeeded").count() == 1
    assert page.locator("#eval-case").count() == 0
    context.close()
    assert EvalDataset.objects.filter(team=team_a).count() == 4
