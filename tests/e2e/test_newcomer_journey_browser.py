"""A newcomer's journey at a phone's width (390 px), from what `make demo` prints to the recorded scenario's end.

`make demo` runs setup_demo (the demo user's password, printed once) and demo_scenario, which prints the dashboard's
URL. From there, in Chromium: sign in as demo, answer the launch lead's question under "Needs you", reload when
the specialists have done their part, approve the plan's write there too, and watch the run end on its monitor —
a real worker runs every turn from the bundled demo recording. No page of the way is wider than the screen.
"""

from __future__ import annotations

import re
import time
from io import StringIO

import pytest
from django.core.management import call_command

from agents_app.management.commands.demo_scenario import AGENT
from agents_app.models import ApprovalRequest, Run, Team, WorkspaceFile
from memory_app.models import Memory
from tests.e2e.test_admin_browser import asgi_server, width  # noqa: F401 (a fixture)
from tests.e2e.test_approvals_browser import settle
from tests.e2e.test_dashboard_and_start_browser import overflowing
from tests.e2e.test_monitor_browser import ARTIFACTS, chromium  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker,
              pytest.mark.usefixtures("demo_secrets")]

SCREEN = 390
LABEL = "Recorded answer (MAS demo recording, no model called)."


def test_from_make_demos_url_to_the_scenarios_answer_on_a_phone(celery_worker_process, asgi_server, chromium):  # noqa: F811
    server = asgi_server.url
    out = StringIO()
    call_command("setup_demo", stdout=out)
    [password] = re.findall(r"Created admin user demo with password: (\S+)", out.getvalue())
    out = StringIO()
    call_command("demo_scenario", "--base-url", server, stdout=out)
    [dashboard] = re.findall(r"on the dashboard (\S+) ", out.getvalue())
    assert dashboard == f"{server}/admin/"
    run = Run.objects.get(team=Team.objects.get(slug="demo"), agent=AGENT)

    context = chromium.new_context(viewport={"width": SCREEN, "height": 900})
    try:
        page = context.new_page()
        page.goto(dashboard)
        page.wait_for_url(f"{server}/admin/login/?next=/admin/")
        assert width(page) == [SCREEN, SCREEN], overflowing(page, SCREEN)
        page.fill("input[name=username]", "demo")
        page.fill("input[name=password]", password)
        page.click("input[type=submit]")
        page.wait_for_url(dashboard)

        # The question: its choices are buttons; one click answers it.
        question = f".mas-need[data-kind=question]"
        reloaded_until(page, question)
        assert page.text_content(f"{question} .mas-need-question") == "Who is the launch note for?"
        assert page.eval_on_selector_all(f"{question} button.mas-need-choice", "bs => bs.map(b => b.textContent)") == [
            "Engineers evaluating MAS", "Managers deciding on MAS"]
        assert width(page) == [SCREEN, SCREEN], overflowing(page, SCREEN)
        page.screenshot(path=str(ARTIFACTS / "journey-question-390.png"), full_page=True)
        page.click(f"{question} button.mas-need-choice >> text=Engineers evaluating MAS")
        page.wait_for_selector(f'{question}[data-status="answered"]', timeout=15_000)
        assert page.text_content(f"{question} .mas-need-outcome") == "Answered by demo: “Engineers evaluating MAS”"

        # The two specialists work; then the lead's write of its plan waits for an approval, shown on reload.
        approval = ".mas-need[data-kind=approval]"
        reloaded_until(page, approval)
        assert page.inner_text(f"{approval} .mas-need-what").startswith(f"{AGENT} wants to call vfs_write")
        assert width(page) == [SCREEN, SCREEN], overflowing(page, SCREEN)
        page.screenshot(path=str(ARTIFACTS / "journey-approval-390.png"), full_page=True)
        page.click(f"{approval} button.mas-need-approve")
        page.wait_for_selector(f'{approval}[data-status="approved"]', timeout=15_000)

        # The run's monitor: it ends, its answer labelled as a recording.
        page.click(f"{approval} a.mas-need-run")
        page.wait_for_url(f"{server}/runs/{run.pk}/", timeout=30_000)
        page.wait_for_selector("#status.succeeded", timeout=120_000)
        assert width(page) == [SCREEN, SCREEN], overflowing(page, SCREEN)
        page.screenshot(path=str(ARTIFACTS / "journey-monitor-390.png"), full_page=True)
    finally:
        context.close()
        settle(str(run.pk))

    run.refresh_from_db()
    assert run.status == "succeeded" and run.result.startswith(f"*{LABEL}*"), (run.status, run.error)
    assert list(ApprovalRequest.objects.filter(run=run).order_by("created_at").values_list(
        "kind", "status", "decided_by__username")) == [("question", "answered", "demo"),
                                                       ("approval", "approved", "demo")]
    assert WorkspaceFile.objects.filter(run=run, path="launch-plan.md", author=AGENT).count() == 1
    assert Memory.objects.filter(run_id=run.pk, agent=AGENT).count() == 1


def reloaded_until(page, selector: str, timeout: float = 90) -> None:
    """Reload the dashboard until ``selector`` shows a request still to decide, as a person would."""
    deadline = time.monotonic() + timeout
    while page.query_selector(f"{selector}[data-status=pending] .mas-need-actions") is None:
        assert time.monotonic() < deadline, f"no {selector} to decide after {timeout} s"
        page.wait_for_timeout(1000)
        page.reload()
