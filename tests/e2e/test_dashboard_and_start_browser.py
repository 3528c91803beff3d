"""A newcomer's console in Chromium, at a desk's (1400 px) and a phone's (390 px) width.

The dashboard's first block says what waits for a person — a tool call to approve, a question to answer, a run
that failed today — and an operator decides the first two where they are shown (the monitor's endpoint, with the
page's session and CSRF token), while a real worker resumes the runs; the recent runs are the runs page's (no eval
case) and the page is no wider than the screen. An agent's and a workflow's admin page start a run through the
monitor's start form, which takes a workflow's inputs, and the run opens in its monitor. Screenshots are saved in
``var/artifacts/``.
"""

from __future__ import annotations

import json
import urllib.request
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from agents_app.kinds import AGENT
from agents_app.models import ApprovalRequest, Event, Run, WorkspaceFile
from tests.e2e.test_admin_browser import admin_sign_in, asgi_server, save, width  # noqa: F401 (a fixture)
from tests.e2e.test_approvals_browser import settle
from tests.e2e.test_monitor_browser import ARTIFACTS, chromium  # noqa: F401 (a fixture)
from tests.runs import ENDED, call, events, wait_until
from workflows_app.kinds import WORKFLOW

pytestmark = [pytest.mark.django_db(transaction=True)]

WIDTHS = [1400, 390]


def start(server: str, token: str, agent: str, script: dict, task: str = "Do the job") -> str:
    request = urllib.request.Request(
        f"{server}/api/runs", method="POST", data=json.dumps({"agent": agent, "input": task, "script": script}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
        return json.load(response)["id"]


def overflowing(page, screen: int) -> list[str]:
    """Elements whose right edge passes the screen's (what makes a page wider than a phone)."""
    return page.evaluate("""(w) => [...document.querySelectorAll('body *')]
        .filter((e) => e.getBoundingClientRect().right > w + 0.5 && e.getClientRects().length)
        .map((e) => `${e.tagName}.${e.className}`)""", screen)


@pytest.mark.worker
@pytest.mark.parametrize("screen", WIDTHS)
def test_needs_you_lists_what_waits_and_an_operator_decides_in_place(
        team_a, team_b, make_member, make_token, celery_worker_process, asgi_server, chromium, screen):  # noqa: F811
    save(team_a, AGENT, "---\nname: Filer\ntools: [vfs_write]\napproval: [vfs_write]\n---\n\nYou file notes.\n")
    save(team_a, AGENT, "---\nname: Planner\ntools: [ask_human]\n---\n\nYou plan.\n")
    save(team_a, AGENT, "---\nname: Broken\n---\n\nYou fail.\n")
    olga = make_member(team_a, "operator", username=f"olga-{screen}")
    make_member(team_a, "viewer", username=f"vic-{screen}")
    token, server = make_token(team_a, olga), asgi_server.url
    filed = start(server, token, "filer", {"filer": [
        call("vfs_write", path="notes.md", content="filed"),
        {"latency_ms": 300, "expect": "notes.md", "text": "Filed."}]})
    asked = start(server, token, "planner", {"planner": [
        call("ask_human", question="Which city should the trip start from?"),
        {"latency_ms": 300, "expect": "Oslo", "text": "Starting from Oslo."}]})
    failed = start(server, token, "broken", {"broken": [{"error": "auth"}]})
    # What is not the team's, or not a person's to see to, is not listed: an eval's failed case, another team's.
    Run.objects.create(team=team_a, agent="broken", status="failed", is_eval=True, input="a case",
                       finished_at=timezone.now(), error="an eval case failed")
    Run.objects.create(team=team_b, agent="broken", status="failed", input="theirs", finished_at=timezone.now())
    wait_until(lambda: ApprovalRequest.objects.filter(run_id__in=[filed, asked], status="pending").count() == 2
               and Run.objects.filter(pk__in=[filed, asked], status="waiting").count() == 2
               and Run.objects.filter(pk=failed, status="failed").exists(), 60, "two requests and a failed run")
    approval = ApprovalRequest.objects.get(run_id=filed)
    question = ApprovalRequest.objects.get(run_id=asked)

    operator = chromium.new_context(viewport={"width": screen, "height": 1000})
    viewer = chromium.new_context(viewport={"width": screen, "height": 1000})
    try:
        page = operator.new_page()
        admin_sign_in(page, server, olga.username)
        panels = page.eval_on_selector_all(".mas-panel", "ps => ps.map(p => [p.dataset.panel, p.querySelector('h2')"
                                                         ".textContent])")
        assert panels[0] == ["needs_you", "Needs you"]  # the first block
        counts = {el.get_attribute("data-count"): el.inner_text().replace("\n", " ")
                  for el in page.query_selector_all(".mas-needs-counts a")}
        assert counts == {"approvals": "1 approval", "questions": "1 question", "failed_today": "1 failed today"}
        items = page.eval_on_selector_all(".mas-need", "is => is.map(i => [i.dataset.kind, "
                                                      "i.querySelector('.mas-need-what').innerText])")
        waiting = {approval.deadline: ["approval", f"filer wants to call vfs_write · run {filed[:8]} ↗"],
                   question.deadline: ["question", f"planner asks: · run {asked[:8]} ↗"]}
        broken = Run.objects.get(pk=failed)
        assert items == [*(waiting[deadline] for deadline in sorted(waiting)),  # what expires first, first
                         ["failed", f"broken failed at {timezone.localtime(broken.finished_at):%Y-%m-%d %H:%M}"]]
        approval_item = f'.mas-need[data-request="{approval.pk}"]'
        question_item = f'.mas-need[data-request="{question.pk}"]'
        assert json.loads(page.text_content(f"{approval_item} .mas-need-arguments")) == {
            "path": "notes.md", "content": "filed"}
        assert page.text_content(f"{question_item} .mas-need-question") == "Which city should the trip start from?"
        assert page.get_attribute(".mas-need[data-kind=failed] a.mas-need-open-run", "href") == f"/runs/{failed}/"
        assert page.text_content(".mas-need[data-kind=failed] .mas-need-error-text") == " ".join(broken.error.split())
        assert width(page) == [screen, screen], overflowing(page, screen)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"admin-needs-you-{screen}.png"), full_page=True)

        # A viewer sees the same, without a button.
        watcher = viewer.new_page()
        admin_sign_in(watcher, server, f"vic-{screen}")
        assert watcher.query_selector_all(".mas-need") and watcher.query_selector(".mas-need-actions button") is None
        assert watcher.text_content(".mas-needs-view-only") == (
            "Operators and admins of alpha decide these; your role lets you see them.")

        # The endpoint's own checks hold: a post without the page's CSRF token is refused, nothing decided.
        refused = page.evaluate("""(id) => fetch(`/api/approvals/${id}`, {method: "POST", credentials: "same-origin",
            headers: {"Content-Type": "application/json", "X-MAS-Team": "alpha"},
            body: JSON.stringify({decision: "approve"})}).then((r) => r.status)""", str(approval.pk))
        assert refused == 403
        assert ApprovalRequest.objects.get(pk=approval.pk).status == "pending"

        # Approve in place: the row says so, the count goes down, the run resumes on the worker.
        page.click(f"{approval_item} button.mas-need-approve")
        page.wait_for_selector(f'{approval_item}[data-status="approved"]', timeout=15_000)
        assert page.text_content(f"{approval_item} .mas-need-outcome") == f"Approved by {olga.username}."
        assert page.query_selector(f"{approval_item} .mas-need-actions") is None
        assert page.inner_text("[data-count=approvals] .mas-number") == "0"
        # An empty answer is refused with the service's reason; the question still waits.
        page.click(f"{question_item} button.mas-need-send")
        page.wait_for_selector(f"{question_item} .mas-need-error:not([hidden])", timeout=15_000)
        assert page.text_content(f"{question_item} .mas-need-error") == (
            "answer: the answer to the question, a non-empty text")
        assert ApprovalRequest.objects.get(pk=question.pk).status == "pending"
        page.fill(f"{question_item} textarea.mas-need-answer", "Oslo")
        page.click(f"{question_item} button.mas-need-send")
        page.wait_for_selector(f'{question_item}[data-status="answered"]', timeout=15_000)
        assert page.text_content(f"{question_item} .mas-need-outcome") == f"Answered by {olga.username}: “Oslo”"
        assert page.inner_text("[data-count=questions] .mas-number") == "0"
        assert width(page) == [screen, screen], overflowing(page, screen)

        # The failed run is one click from its monitor.
        page.click(".mas-need[data-kind=failed] a.mas-need-open-run")
        page.wait_for_url(f"{server}/runs/{failed}/", timeout=30_000)
        page.wait_for_selector("#status.failed", timeout=10_000)
        # Inside the try: the finally settles (cancels) only what a failed step left waiting, not a run resuming.
        wait_until(lambda: Run.objects.filter(pk__in=[filed, asked], status__in=ENDED).count() == 2, 60,
                   "both runs end")
    finally:
        operator.close()
        viewer.close()
        settle(filed)
        settle(asked)

    assert (Run.objects.get(pk=filed).status, Run.objects.get(pk=filed).result) == ("succeeded", "Filed.")
    assert (Run.objects.get(pk=asked).status, Run.objects.get(pk=asked).result) == ("succeeded", "Starting from Oslo.")
    assert WorkspaceFile.objects.get(run_id=filed, path="notes.md").content == "filed"
    # By kind (approval, then question): the two runs start together, and either may ask first.
    assert list(ApprovalRequest.objects.filter(team=team_a).order_by("kind").values_list(
        "run_id", "status", "decided_by", "decision")) == [
        (Run.objects.get(pk=filed).pk, "approved", olga.pk, {"decision": "approve", "message": ""}),
        (Run.objects.get(pk=asked).pk, "answered", olga.pk, {"decision": "answer", "answer": "Oslo"})]
    # One decision each, nothing started by the page, the failed run left as it was.
    assert [len(events(Run.objects.get(pk=pk), "approval_decided")) for pk in (filed, asked)] == [1, 1]
    assert Run.objects.filter(team=team_a).count() == 4
    assert Run.objects.get(pk=failed).status == "failed"


@pytest.mark.parametrize("screen", WIDTHS)
def test_the_dashboards_recent_runs_are_the_runs_pages_and_fit_the_screen(team_a, make_member, asgi_server,
                                                                          chromium, screen):  # noqa: F811
    user = make_member(team_a, "operator", username="pat")
    now = timezone.now()
    runs = []
    for n, agent in enumerate(["lead", "a-writer-with-a-long-name-that-goes-on-and-on", "lead", "reviewer"]):
        run = Run.objects.create(team=team_a, agent=agent, status="succeeded", input=f"task {n}")
        Run.objects.filter(pk=run.pk).update(created_at=now - timedelta(minutes=10 - n))
        runs.append(run)
    case = Run.objects.create(team=team_a, agent="lead", status="succeeded", input="an eval case", is_eval=True)
    archived = Run.objects.create(team=team_a, agent="lead", status="succeeded", input="old", archived_at=now)
    listed = "rows => rows.map(r => r.dataset.run)"
    context = chromium.new_context(viewport={"width": screen, "height": 1000})
    try:
        page = context.new_page()
        admin_sign_in(page, asgi_server.url, user.username)
        recent = page.eval_on_selector_all("#mas-panel-recent_runs-alpha tr[data-run]", listed)
        assert recent == [str(run.pk) for run in reversed(runs)]
        assert str(case.pk) not in page.content() and str(archived.pk) not in page.content()
        assert width(page) == [screen, screen], overflowing(page, screen)
        page.screenshot(path=str(ARTIFACTS / f"admin-dashboard-{screen}.png"), full_page=True)
        page.goto(f"{asgi_server.url}/runs/")
        assert page.eval_on_selector_all("#runs tr[data-run]", listed) == recent  # the same runs, in order
    finally:
        context.close()


FLOW = ("---\nname: Trip plan\ndescription: Plans a trip in two steps\ninputs: [city, days]\nsteps:\n"
        "- id: draft\n  agent: lead\n  prompt: Plan {days} days in {city}\n- id: check\n  agent: checker\n"
        "  depends_on: [draft]\n  prompt: Check the plan\n---\n")


@pytest.mark.worker
@pytest.mark.parametrize("screen", WIDTHS)
def test_run_buttons_start_an_agent_and_a_workflow_through_the_start_form(
        team_a, make_member, celery_worker_process, asgi_server, chromium, screen):  # noqa: F811
    lead = save(team_a, AGENT, "---\nname: Lead\ndescription: Leads\n---\n\nYou lead.\n")
    save(team_a, AGENT, "---\nname: Checker\n---\n\nYou check.\n")
    flow = save(team_a, WORKFLOW, FLOW)
    olga = make_member(team_a, "operator", username=f"otto-{screen}")
    make_member(team_a, "viewer", username=f"vera-{screen}")
    server = asgi_server.url
    context = chromium.new_context(viewport={"width": screen, "height": 1000})
    started = []
    try:
        page = context.new_page()
        admin_sign_in(page, server, olga.username)
        # The agent's page: Run… opens the start form with the agent chosen.
        page.goto(f"{server}{reverse('admin:agents_app_agent_change', args=[lead.pk])}")
        page.click("#mas-run-button")
        page.wait_for_url(f"{server}/runs/start/?team=alpha&agent=lead")
        assert page.input_value("#start-target") == "agent:lead"
        assert page.is_visible("#start-task") and not page.is_visible("fieldset[data-for='workflow:trip-plan']")
        assert width(page) == [screen, screen], overflowing(page, screen)
        page.fill("#start-task", "Plan a weekend")
        page.click("#start-submit")
        page.wait_for_url(f"{server}/runs/*/", timeout=30_000)
        run = Run.objects.get(team=team_a, agent="lead")
        started.append(str(run.pk))
        assert page.url == f"{server}/runs/{run.pk}/"
        assert (run.workflow, run.input, run.created_by_id) == ("", "Plan a weekend", olga.pk)
        page.wait_for_selector("#status.succeeded", timeout=60_000)  # the demo recording answers: no provider
        assert f"Started run {run.pk} of lead." in page.inner_text(".messages")

        # The workflow's page: Run… asks for its declared inputs, nothing else.
        page.goto(f"{server}{reverse('admin:workflows_app_workflow_change', args=[flow.pk])}")
        page.click("#mas-run-button")
        page.wait_for_url(f"{server}/runs/start/?team=alpha&workflow=trip-plan")
        assert page.input_value("#start-target") == "workflow:trip-plan"
        fields = page.eval_on_selector_all("#start-run textarea", "ts => ts.map(t => [t.name, t.matches(':disabled'), "
                                                                  "t.offsetParent !== null])")
        assert fields == [["input", True, False], ["script", True, False], ["wf:trip-plan:city", False, True],
                          ["wf:trip-plan:days", False, True]]
        assert width(page) == [screen, screen], overflowing(page, screen)
        page.screenshot(path=str(ARTIFACTS / f"monitor-start-workflow-{screen}.png"), full_page=True)
        page.fill("textarea[name='wf:trip-plan:city']", "Lisbon")
        page.click("#start-submit")  # one input left empty: the browser asks for it, nothing is sent
        assert page.eval_on_selector("textarea[name='wf:trip-plan:days']", "t => t.validity.valueMissing") is True
        assert page.url == f"{server}/runs/start/?team=alpha&workflow=trip-plan"
        assert Run.objects.filter(team=team_a).count() == 1
        page.fill("textarea[name='wf:trip-plan:days']", "3")
        page.click("#start-submit")
        page.wait_for_url(f"{server}/runs/*/", timeout=30_000)
        run = Run.objects.get(team=team_a, workflow="trip-plan")
        started.append(str(run.pk))
        assert page.url == f"{server}/runs/{run.pk}/"
        assert (run.agent, run.input, run.created_by_id) == ("", "city: Lisbon\ndays: 3", olga.pk)
        page.wait_for_selector("#status.succeeded", timeout=60_000)
        page.wait_for_selector("#dag g.node[data-step=check][data-status=succeeded]", timeout=10_000)
        start_event = Event.objects.get(run=run, type="workflow_start")
        assert (start_event.data["inputs"], start_event.data["trigger"]) == ({"city": "Lisbon", "days": "3"}, "manual")

        # The runs page's own form: choosing the workflow there shows its inputs instead of the task.
        page.goto(f"{server}/runs/")
        assert page.input_value("#start-target") == "agent:checker" and page.is_visible("#start-task")  # the first
        page.select_option("#start-target", "workflow:trip-plan")
        assert not page.is_visible("#start-task")
        assert page.is_visible("textarea[name='wf:trip-plan:city']")
        assert width(page) == [screen, screen], overflowing(page, screen)
    finally:
        context.close()
        for run_id in started:
            settle(run_id)

    # A viewer gets no button and no form.
    context = chromium.new_context(viewport={"width": screen, "height": 1000})
    try:
        page = context.new_page()
        admin_sign_in(page, server, f"vera-{screen}")
        page.goto(f"{server}{reverse('admin:agents_app_agent_change', args=[lead.pk])}")
        assert page.query_selector("#mas-run-button") is None
        assert page.goto(f"{server}/runs/start/?team=alpha&agent=lead").status == 404
    finally:
        context.close()
    assert sorted(Run.objects.filter(team=team_a).values_list("agent", "workflow", "status")) == [
        ("", "trip-plan", "succeeded"), ("lead", "", "succeeded")]


@pytest.mark.worker
@pytest.mark.parametrize("screen", WIDTHS)
def test_try_without_a_model_fills_an_example_and_the_run_calls_its_tool(
        team_a, make_member, celery_worker_process, asgi_server, chromium, screen):  # noqa: F811
    from agents_app.script_examples import script_example

    save(team_a, AGENT, "---\nname: Greeter\ntools: [vfs_write, vfs_read]\n---\n\nYou greet.\n")
    save(team_a, AGENT, "---\nname: Mute\ntools: []\n---\n\nYou say nothing.\n")
    olga = make_member(team_a, "operator", username=f"tina-{screen}")
    server = asgi_server.url
    context = chromium.new_context(viewport={"width": screen, "height": 1000})
    started = []
    try:
        page = context.new_page()
        admin_sign_in(page, server, olga.username)
        page.goto(f"{server}/runs/start/?team=alpha&agent=mute")
        page.click("#start-try summary")
        # An agent without tools has no example to show, and says what to write instead.
        assert page.is_disabled("#start-example") and page.is_visible("#start-example-none")
        page.select_option("#start-target", "agent:greeter")
        assert page.eval_on_selector_all("#start-example option", "os => os.map(o => o.value)") == [
            "", "vfs_read", "vfs_write"]
        assert not page.is_visible("#start-example-none")
        page.select_option("#start-example", "vfs_read")
        page.wait_for_function("document.getElementById('start-script').value !== ''")
        assert json.loads(page.input_value("#start-script")) == script_example(tool="vfs_read", agent="greeter")
        assert page.input_value("#start-task") == "Show how vfs_read works."  # it was empty
        assert width(page) == [screen, screen], overflowing(page, screen)
        page.screenshot(path=str(ARTIFACTS / f"monitor-start-try-{screen}.png"), full_page=True)
        page.click("#start-submit")
        page.wait_for_url(f"{server}/runs/*/", timeout=30_000)
        run = Run.objects.get(team=team_a, agent="greeter")
        started.append(str(run.pk))
        page.wait_for_selector("#status.succeeded", timeout=60_000)
        run.refresh_from_db()
        assert (run.input, run.result) == ("Show how vfs_read works.", "notes/hello.md says hello.")
        assert [(e.data["name"], e.data["ok"]) for e in events(run, "tool_result")] == [
            ("vfs_write", True), ("vfs_read", True)]
        assert WorkspaceFile.objects.filter(run=run, path="notes/hello.md").count() == 1

        # Closed again, the box sends no script: the agent's own model answers (here the demo recording).
        page.goto(f"{server}/runs/start/?team=alpha&agent=greeter")
        page.click("#start-try summary")
        page.fill("#start-script", '{"greeter": [{"text": "never sent"}]}')
        page.click("#start-try summary")
        page.fill("#start-task", "Greet me")
        page.click("#start-submit")
        page.wait_for_url(f"{server}/runs/*/", timeout=30_000)
        run = Run.objects.get(team=team_a, agent="greeter", input="Greet me")
        started.append(str(run.pk))
        assert run.script is None
        page.wait_for_selector("#status.succeeded", timeout=60_000)
    finally:
        context.close()
        for run_id in started:
            settle(run_id)
