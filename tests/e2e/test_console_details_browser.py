"""Small things a newcomer trips over, in Chromium at 1400 and 390 px.

Every page writes a moment the same way (``2026-03-04 05:06``, the server's time zone), the server's pages and
the runs list's live rows alike; an unknown agent in one workflow step marks that step's agent only; a step graph's
long names stay inside their boxes, whole in the step's tooltip.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone as dt_timezone

import pytest
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from agents_app.kinds import AGENT
from agents_app.models import Activation, ApprovalRequest, DefinitionVersion, Run, Session
from mas_core.teams import invitation_create
from tests.e2e.test_admin_browser import admin_sign_in, asgi_server, save, width  # noqa: F401 (a fixture)
from tests.e2e.test_monitor_browser import ARTIFACTS, chromium, in_thread  # noqa: F401 (a fixture)
from workflows_app.kinds import WORKFLOW

pytestmark = [pytest.mark.django_db(transaction=True)]

WIDTHS = [1400, 390]
CREATED = datetime(2026, 3, 4, 5, 6, 7, tzinfo=dt_timezone.utc)
VERSIONED = datetime(2026, 2, 1, 23, 59, 59, tzinfo=dt_timezone.utc)
DECIDED = datetime(2026, 3, 5, 6, 7, 8, tzinfo=dt_timezone.utc)


def moment(value: datetime) -> str:
    return f"{timezone.localtime(value):%Y-%m-%d %H:%M}"


@pytest.mark.parametrize("screen", WIDTHS)
def test_every_page_writes_a_moment_the_same_way(team_a, make_member, asgi_server, chromium, screen):  # noqa: F811
    from mas_core.events import event_emit

    user = make_member(team_a, "operator", username="dora")
    lead = save(team_a, AGENT, "---\nname: Lead\n---\n\nYou lead.\n")
    DefinitionVersion.objects.filter(team=team_a, kind="agent", slug="lead").update(created_at=VERSIONED)
    run = Run.objects.create(team=team_a, agent="lead", status="failed", input="a task", error="it broke",
                             finished_at=timezone.now())
    Run.objects.filter(pk=run.pk).update(created_at=CREATED)
    run.refresh_from_db()
    waiting = Run.objects.create(team=team_a, agent="lead", status="waiting", input="another task")
    session = Session.objects.create(run=waiting, activation=Activation.objects.create(run=waiting, agent="lead"),
                                     agent="lead")
    request = ApprovalRequest.objects.create(team=team_a, run=waiting, session=session, agent="lead", call_id="c1",
                                             kind="approval", tool="vfs_write",
                                             deadline=timezone.now() + timedelta(days=1, minutes=7))
    ApprovalRequest.objects.create(team=team_a, run=waiting, session=session, agent="lead", call_id="c0",
                                   kind="approval", tool="vfs_delete", status="approved", decided_by=user,
                                   decided_at=DECIDED, deadline=DECIDED)
    invitation = invitation_create(team=team_a, role="viewer")
    server = asgi_server.url
    context = chromium.new_context(viewport={"width": screen, "height": 1000})
    try:
        page = context.new_page()
        admin_sign_in(page, server, user.username)
        seen = {
            "dashboard: recent run": page.text_content(f"#mas-panel-recent_runs-alpha tr[data-run='{run.pk}'] "
                                                       ".mas-started"),
            "dashboard: failed run": page.inner_text(f".mas-need[data-run='{run.pk}'] .mas-need-what"),
            "dashboard: deadline": page.inner_text(f".mas-need[data-request='{request.pk}'] .mas-need-why"),
        }
        page.goto(f"{server}{reverse('admin:agents_app_run_changelist')}")
        seen["admin runs"] = page.inner_text(f"#result_list tr:has(a[href*='{run.pk}']) .field-created_at")
        page.goto(f"{server}{reverse('admin:agents_app_agent_history', args=[lead.pk])}")
        seen["versions"] = page.inner_text(".mas-versions tbody tr td:nth-child(4)")
        page.goto(f"{server}{reverse('admin:agents_app_approvalrequest_changelist')}")
        seen["inbox: deadline"] = page.inner_text("#result_list .field-due")
        page.goto(f"{server}{reverse('admin:agents_app_approvalrequest_changelist')}?status=approved")
        seen["inbox: decided"] = page.inner_text("#result_list .field-decided")
        page.goto(f"{server}/")
        seen["home"] = page.inner_text(f"li:has(a[href='/runs/{run.pk}/']) .muted").split(" — ")[0]
        page.goto(f"{server}/runs/")
        page.wait_for_selector("#live:not(.off)", timeout=10_000)
        seen["runs"] = page.inner_text(f"#runs tr[data-run='{run.pk}'] td[data-label=Started] a")
        # A run that appears while the page is open is written by the page's script: the same way.
        # Created and dated in one transaction: the page's poll of new runs could otherwise see it at its real
        # creation time first (and show that row, which the test would read).
        with transaction.atomic():
            fresh = Run.objects.create(team=team_a, agent="lead", input="new")
            Run.objects.filter(pk=fresh.pk).update(created_at=VERSIONED)
        in_thread(event_emit, run_id=fresh.id, type="run_start")
        page.wait_for_selector(f"#runs tr[data-run='{fresh.pk}']", timeout=15_000)
        seen["runs: live row"] = page.inner_text(f"#runs tr[data-run='{fresh.pk}'] td[data-label=Started] a")
        assert width(page)[0] <= screen
        admin = context.new_page()
        admin.goto(f"{server}{invitation.link}")
        seen["invitation"] = admin.inner_text("main").split("The link works once, until ")[1][:16]
    finally:
        context.close()
    assert seen == {
        "dashboard: recent run": moment(CREATED),
        "dashboard: failed run": f"lead failed at {moment(run.finished_at)}",
        "dashboard: deadline": f"deadline {moment(request.deadline)}, then reject",
        "admin runs": moment(CREATED),
        "versions": moment(VERSIONED),
        "inbox: deadline": moment(request.deadline),
        "inbox: decided": f"dora, {moment(DECIDED)}",
        "home": moment(CREATED),
        "runs": moment(CREATED),
        "runs: live row": moment(VERSIONED),
        "invitation": moment(invitation.row.expires_at),
    }


FLOW = ("---\nname: Three steps\nsteps:\n- id: draft\n  agent: lead\n  prompt: Draft\n- id: check\n  agent: lead\n"
        "  prompt: Check\n  depends_on: [draft]\n- id: publish\n  agent: lead\n  prompt: Publish\n"
        "  depends_on: [check]\n---\n")


@pytest.mark.parametrize("screen", WIDTHS)
def test_an_unknown_agent_in_one_step_marks_that_cell_only(team_a, make_member, asgi_server, chromium,
                                                          screen):  # noqa: F811
    user = make_member(team_a, "editor", username="eddie")
    save(team_a, AGENT, "---\nname: Lead\n---\n\nYou lead.\n")
    flow = save(team_a, WORKFLOW, FLOW)
    page = chromium.new_page(viewport={"width": screen, "height": 1000})
    try:
        admin_sign_in(page, asgi_server.url, user.username)
        page.goto(f"{asgi_server.url}{reverse('admin:workflows_app_workflow_change', args=[flow.pk])}")
        page.fill("input[name=steps-1-agent]", "ghost")
        page.click("input[name=_save] >> nth=0")
        page.wait_for_selector(".mas-row[data-index='1'] .mas-cell-agent .errorlist", timeout=60_000)
        assert page.inner_text(".mas-row[data-index='1'] .mas-cell-agent .errorlist") == (
            "agent 'ghost' does not exist in this team")
        # Each control of the steps' rows, with its border colour: the offending one only is the error colour.
        colours = page.eval_on_selector_all(
            ".mas-rows[data-name=steps] .mas-row input:not([type=hidden]):not([type=checkbox]),"
            ".mas-rows[data-name=steps] .mas-row textarea, .mas-rows[data-name=steps] .mas-row select",
            "cs => cs.map(c => [c.name, getComputedStyle(c).borderTopColor])")
        error = page.evaluate("getComputedStyle(document.querySelector('.errornote')).color")
        red = [name for name, colour in colours if colour == error]
        assert red == ["steps-1-agent"], colours
        assert len(colours) >= 18  # three rows of six controls or more, all looked at
        assert page.get_attribute("input[name=steps-1-agent]", "aria-invalid") == "true"
        assert width(page) == [screen, screen]
        page.screenshot(path=str(ARTIFACTS / f"admin-workflow-step-error-{screen}.png"), full_page=True)
    finally:
        page.close()
    assert flow.__class__.objects.get(pk=flow.pk).version == 1  # nothing saved


LONG_STEP = "gather_every_source_on_the_northern_tides_of_the_atlantic"
LONG_AGENT = "an-agent-whose-name-is-far-longer-than-any-box-could-hold"


@pytest.mark.parametrize("screen", WIDTHS)
def test_a_step_graphs_long_names_stay_in_their_boxes(team_a, make_member, asgi_server, chromium,
                                                      screen):  # noqa: F811
    user = make_member(team_a, "editor", username="gina")
    save(team_a, AGENT, f"---\nname: {LONG_AGENT}\n---\n\nYou work.\n")
    save(team_a, AGENT, "---\nname: Lead\n---\n\nYou lead.\n")
    flow = save(team_a, WORKFLOW, f"---\nname: Long names\nsteps:\n- id: {LONG_STEP}\n  agent: {LONG_AGENT}\n"
                                  f"  prompt: Gather\n- id: sum\n  agent: lead\n  prompt: Sum up\n"
                                  f"  depends_on: [{LONG_STEP}]\n---\n")
    page = chromium.new_page(viewport={"width": screen, "height": 1000})
    try:
        admin_sign_in(page, asgi_server.url, user.username)
        page.goto(f"{asgi_server.url}{reverse('admin:workflows_app_workflow_change', args=[flow.pk])}")
        page.wait_for_selector("#mas-step-graph g.node[data-step=sum]")
        nodes = page.eval_on_selector_all("#mas-step-graph g.node", """gs => gs.map(g => {
            const box = g.querySelector('rect').getBBox();
            return [g.dataset.step, g.dataset.cut || null, g.querySelector('title')?.textContent ?? null,
                    [...g.querySelectorAll('text')].map(t => [t.textContent,
                        t.getBBox().x + t.getBBox().width <= box.x + box.width - 4])]; })""")
        [long_node, short_node] = nodes
        assert long_node[:3] == [LONG_STEP, "1", f"{LONG_STEP}\n{LONG_AGENT}"]
        for text, inside in long_node[3]:
            assert inside and text.endswith("…") and len(text) > 8, (text, inside)
        assert LONG_STEP.startswith(long_node[3][0][0][:-1]) and LONG_AGENT.startswith(long_node[3][1][0][:-1])
        assert short_node == ["sum", None, "sum\nlead", [["sum", True], ["lead", True]]]
        assert width(page) == [screen, screen]
        page.screenshot(path=str(ARTIFACTS / f"admin-step-graph-long-names-{screen}.png"), full_page=True)
    finally:
        page.close()
