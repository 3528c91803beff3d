"""The admin index is the team's dashboard: exact figures from runs made with known costs and states."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from agents_app import dashboard
from agents_app.dashboard import Panel, day_start, panel_register
from agents_app.models import Activation, Run, Session
from tests.agents_app.test_admin_definitions import client_for

pytestmark = pytest.mark.django_db


def make_run(team, *, agent: str, status: str, costs: dict[str, str] = {}, age: timedelta = timedelta(0),
             workflow: str = "") -> Run:
    """A run and one session per agent of ``costs``, all dated ``age`` ago (no worker involved)."""
    when = timezone.now() - age
    run = Run.objects.create(team=team, agent=agent, workflow=workflow, status=status,
                             cost_usd=sum((Decimal(c) for c in costs.values()), Decimal(0)))
    finished = when if status in {"succeeded", "failed", "cancelled"} else None
    Run.objects.filter(pk=run.pk).update(created_at=when, finished_at=finished)
    for name, cost in costs.items():
        activation = Activation.objects.create(run=run, agent=name)
        session = Session.objects.create(run=run, activation=activation, agent=name, cost_usd=Decimal(cost))
        Session.objects.filter(pk=session.pk).update(started_at=when)
    run.refresh_from_db()
    return run


@pytest.fixture
def history(team_a, team_b):
    now = timezone.now()
    # Far enough into "today" and "this month" that the ages below stay inside (or outside) them.
    since_midnight = now - day_start(now)
    into_month = now - day_start(now).replace(day=1)
    runs = {
        "running": make_run(team_a, agent="lead", status="running", costs={"lead": "0.25", "helper": "0.000001"}),
        "queued_1": make_run(team_a, agent="lead", status="queued"),
        "queued_2": make_run(team_a, agent="writer", status="queued"),
        "waiting": make_run(team_a, agent="writer", status="waiting"),
        "failed_now": make_run(team_a, agent="writer", status="failed", costs={"writer": "1.5"}),
        "succeeded": make_run(team_a, agent="lead", status="succeeded", costs={"lead": "0.75"}),
        # Before midnight but this month (unless today is the 1st: then it is last month).
        "failed_yesterday": make_run(team_a, agent="writer", status="failed", costs={"writer": "2"},
                                     age=since_midnight + timedelta(minutes=1)),
        "last_month": make_run(team_a, agent="lead", status="succeeded", costs={"lead": "100"},
                               age=into_month + timedelta(days=1)),
        # Another team's runs count nowhere on alpha's dashboard.
        "theirs": make_run(team_b, agent="lead", status="failed", costs={"lead": "9"}),
    }
    # Neither the runs page nor the dashboard lists an eval's case or an archived run (their costs count).
    runs["eval_case"] = make_run(team_a, agent="writer", status="failed", costs={"writer": "0.5"})
    runs["archived"] = make_run(team_a, agent="lead", status="failed")
    Run.objects.filter(pk=runs["eval_case"].pk).update(is_eval=True)
    Run.objects.filter(pk=runs["archived"].pk).update(archived_at=now)
    return runs, into_month > since_midnight + timedelta(minutes=1)


def panel(response, name: str):
    board, = response.context["boards"]
    return next(item.context for item in board.panels if item.panel.name == name)


def test_the_dashboard_counts_and_costs_a_teams_runs_exactly(history, team_a, make_member):
    runs, yesterday_in_month = history
    client = client_for(make_member(team_a, "viewer"))
    response = client.get(reverse("admin:index"))
    assert response.status_code == 200
    assert [item.panel.name for item in response.context["boards"][0].panels] == [
        "needs_you", "activity", "costs", "recent_runs"]

    counts = panel(response, "activity")["counts"]
    assert (counts.running, counts.waiting, counts.queued, counts.failed_today) == (1, 1, 2, 1)
    needs = panel(response, "needs_you")
    assert (needs["counts"].approvals, needs["counts"].questions, needs["counts"].failed_today) == (0, 0, 1)
    assert [item["run"].pk for item in needs["failed"]] == [runs["failed_now"].pk]

    costs = panel(response, "costs")
    assert [(row.agent, row.cost) for row in costs["today"].rows] == [
        ("writer", Decimal("2.0")), ("lead", Decimal("1.0")), ("helper", Decimal("0.000001"))]
    assert costs["today"].total == Decimal("3.000001")
    month = [("writer", Decimal("4.0") if yesterday_in_month else Decimal("2.0")), ("lead", Decimal("1.0")),
             ("helper", Decimal("0.000001"))]
    assert [(row.agent, row.cost) for row in costs["month"].rows] == month

    recent = [item["run"].pk for item in panel(response, "recent_runs")["runs"]]
    hidden = {"theirs", "eval_case", "archived"}
    ours = sorted((r for key, r in runs.items() if key not in hidden), key=lambda r: r.created_at, reverse=True)
    assert recent == [r.pk for r in ours]
    # The same runs, in the same order, as the runs page lists them.
    page = client.get(reverse("monitor-runs")).content.decode()
    import re

    assert re.findall(r'<tr data-run="([0-9a-f-]+)"', page) == [str(r.pk) for r in ours]

    html = response.content.decode()
    # Figures as people read them, in the one money format, and each run one click from its monitor.
    assert '<td class="mas-num">$3.000001</td>' in html
    assert '<td>helper</td><td class="mas-num">$0.000001</td>' in html
    for run in ours:
        assert f'href="{reverse("monitor-run", args=[run.pk])}"' in html
    for key in hidden:
        assert f'href="{reverse("monitor-run", args=[runs[key].pk])}"' not in html
    assert f'href="{reverse("monitor-runs")}"' in html  # the header's link to the live monitor


def test_a_user_in_two_teams_sees_one_board_per_team_and_a_user_in_none_a_hint(team_a, team_b, make_member):
    from mas_core.teams import membership_set

    user = make_member(team_a, "viewer")
    membership_set(team=team_b, user=user, role="editor")
    make_run(team_b, agent="lead", status="running")
    response = client_for(user).get(reverse("admin:index"))
    boards = response.context["boards"]
    assert [board.team.slug for board in boards] == ["alpha", "beta"]
    counts = [next(p.context["counts"] for p in board.panels if p.panel.name == "activity") for board in boards]
    assert [(c.running, c.waiting, c.queued, c.failed_today) for c in counts] == [(0, 0, 0, 0), (1, 0, 0, 0)]


def test_a_registered_panel_shows_only_when_it_has_something(team_a, make_member, monkeypatch):
    # How a later feature (pending approvals) adds its box: one registration, no template edit.
    monkeypatch.setattr(dashboard, "_PANELS", dict(dashboard._PANELS))
    shown = {"alpha": True}
    panel_register(Panel("pending", "Pending approvals", "admin/mas/panels/activity.html",
                         lambda *, team, now: {"counts": dashboard.run_counts(team=team, now=now)}
                         if shown.get(team.slug) else None, order=5))
    client = client_for(make_member(team_a, "viewer"))
    names = [p.panel.name for p in client.get(reverse("admin:index")).context["boards"][0].panels]
    assert names == ["needs_you", "pending", "activity", "costs", "recent_runs"]
    shown["alpha"] = False
    names = [p.panel.name for p in client.get(reverse("admin:index")).context["boards"][0].panels]
    assert names == ["needs_you", "activity", "costs", "recent_runs"]
    with pytest.raises(ValueError, match="already registered"):
        panel_register(Panel("costs", "Other", "x.html", lambda **_: None))


def test_no_pending_approvals_panel_before_approvals_exist():
    assert "approvals" not in {panel.name for panel in dashboard.panels()}


def test_a_runs_admin_page_links_to_its_monitor(team_a, make_member):
    run = make_run(team_a, agent="lead", status="succeeded", costs={"lead": "0.000001"})
    client = client_for(make_member(team_a, "viewer"))
    html = client.get(reverse("admin:agents_app_run_change", args=[run.pk])).content.decode()
    assert f"href='{reverse('monitor-run', args=[run.pk])}'" in html
    listing = client.get(reverse("admin:agents_app_run_changelist")).content.decode()
    assert f"href='{reverse('monitor-run', args=[run.pk])}'" in listing
    assert "$0.000001" in listing


def test_what_needs_a_person_tops_the_dashboard_of_their_team_only(team_a, team_b, make_member):
    from agents_app.models import ApprovalRequest

    def request(team, status="pending", run_status="waiting", hours=1, **fields):
        run = make_run(team, agent="lead", status=run_status)
        activation = Activation.objects.create(run=run, agent="lead")
        session = Session.objects.create(run=run, activation=activation, agent="lead")
        return ApprovalRequest.objects.create(
            team=team, run=run, session=session, agent="lead", call_id="call_1", status=status,
            deadline=timezone.now() + timedelta(hours=hours), **fields)

    viewer = client_for(make_member(team_a, "viewer"))
    response = viewer.get(reverse("admin:index"))
    assert [item.panel.name for item in response.context["boards"][0].panels] == [
        "needs_you", "activity", "costs", "recent_runs"]
    assert "Nothing waits for a person: no approval, no question, no run failed today." in response.content.decode()

    tool = request(team_a, kind="approval", tool="code_exec", arguments={"code": "print(1)"}, hours=2)
    question = request(team_a, kind="question", tool="ask_human", question="Which city?", choices=["Oslo", "Rome"])
    gate = request(team_a, kind="gate", tool="step review", hours=3)
    request(team_a, status="approved", kind="approval", tool="web_fetch")
    request(team_a, run_status="failed", kind="approval", tool="vfs_delete")  # its run ended: nothing waits
    theirs = request(team_b, kind="approval", tool="code_exec")
    failed = make_run(team_a, agent="writer", status="failed")
    Run.objects.filter(pk=failed.pk).update(error="the model refused: " + "x" * 300)

    response = viewer.get(reverse("admin:index"))
    needs = panel(response, "needs_you")
    assert (needs["counts"].approvals, needs["counts"].questions, needs["counts"].failed_today) == (2, 1, 2)
    # What expires first comes first.
    assert [item["request"].pk for item in needs["requests"]] == [question.pk, tool.pk, gate.pk]
    assert needs["requests"][1]["arguments"] == '{"code": "print(1)"}'
    failed_runs = [item["run"].pk for item in needs["failed"]]
    assert failed_runs[0] == failed.pk and len(failed_runs) == 2  # and the run of the vfs_delete request
    assert needs["failed"][0]["error"] == ("the model refused: " + "x" * 300)[:199] + "…"
    html = response.content.decode()
    assert '<a data-count="approvals" href="/admin/agents_app/approvalrequest/?status=pending&amp;team=' \
        f'{team_a.pk}"><span class="mas-number">2</span> approvals</a>' in html
    assert f'<p class="mas-need-question">Which city?</p>' in html
    assert f'href="{reverse("monitor-run", args=[tool.run_id])}"' in html
    assert f'<a class="button mas-need-open-run" href="{reverse("monitor-run", args=[failed.pk])}">' in html
    assert str(theirs.pk) not in html and str(theirs.run_id) not in html
    # A viewer sees what waits, and no button; an operator gets the buttons and the token they send.
    assert "data-can-decide" not in html and "mas-need-approve" not in html and "data-csrf" not in html
    assert "Operators and admins of alpha decide these; your role lets you see them." in html
    operator = client_for(make_member(team_a, "operator"))
    html = operator.get(reverse("admin:index")).content.decode()
    assert 'data-can-decide="1" data-csrf="' in html
    assert html.count('<button type="button" class="button default mas-need-approve" data-decision="approve">') == 2
    assert '<button type="button" class="button mas-need-choice" data-decision="answer" data-answer="Rome">' in html
    assert html.count('class="button mas-need-reject" data-decision="reject"') == 3
    assert "mas_admin/needs_you.js" in html


def test_todays_guardrail_firings_are_counted_per_guardrail_and_action_for_the_team_only(team_a, team_b,
                                                                                          make_member):
    from mas_core.eventlog import entry, events_append

    def fired(run, *pairs):
        events_append(run_id=run.id, entries=[entry("guardrail_triggered", agent="a", data={
            "guardrail": slug, "where": "tool_result", "action": action, "excerpt": "[card]"}) for slug, action in pairs])

    client = client_for(make_member(team_a, "viewer"))
    assert "guardrails" not in [p.panel.name for p in client.get(reverse("admin:index")).context["boards"][0].panels]
    today, other = make_run(team_a, agent="a", status="succeeded"), make_run(team_a, agent="a", status="failed")
    fired(today, ("no-cards", "redact"), ("no-cards", "redact"), ("keep-secrets", "block"))
    fired(other, ("no-cards", "redact"), ("no-cards", "warn"))
    fired(make_run(team_a, agent="a", status="succeeded", age=timedelta(days=2)), ("old", "redact"))
    fired(make_run(team_b, agent="a", status="succeeded"), ("theirs", "block"))

    response = client.get(reverse("admin:index"))
    assert panel(response, "guardrails")["rows"] == [
        {"guardrail": "no-cards", "action": "redact", "count": 3},
        {"guardrail": "keep-secrets", "action": "block", "count": 1},
        {"guardrail": "no-cards", "action": "warn", "count": 1}]
    html = response.content.decode()
    assert "theirs" not in html and ">old<" not in html
    assert ('<td><a href="/admin/agents_app/guardrail/?q=no-cards">no-cards</a></td><td>redact</td>'
            '<td class="mas-num">3</td>') in html
