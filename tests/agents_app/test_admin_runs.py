"""Runs, sessions, events and files in the admin: read-only, scoped to the user's teams, cancellable by operators."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from agents_app.execution.runs import run_start
from agents_app.execution.tool_requests import workspace_write
from agents_app.models import Event, Run, Session, WorkspaceFile
from tests.agents_app.test_admin_definitions import client_for
from tests.agents_app.test_api_runs import agent

pytestmark = pytest.mark.django_db


def url(model: str, view: str, *args) -> str:
    return reverse(f"admin:agents_app_{model}_{view}", args=args)


@pytest.fixture
def runs(team_a, team_b):
    """A queued run in each team (nothing is dispatched inside the test transaction), with a session and a file."""
    made = {}
    for team in (team_a, team_b):
        agent(team, "Lead")
        run = run_start(team=team, agent="lead", input=f"task of {team.slug}")
        activation = run.activations.get()
        session = Session.objects.create(run=run, activation=activation, agent="lead", tier="medium",
                                         model="scripted", prompt_tokens=12, completion_tokens=3)
        workspace_write(run_id=run.id, path="out/notes.md", content=f"notes of {team.slug}", agent="lead",
                        session_id=session.id)
        made[team.slug] = run
    return made


def test_members_see_only_their_teams_runs_and_what_is_in_them(runs, team_a, make_member):
    client = client_for(make_member(team_a, "viewer"))
    ours, theirs = runs["alpha"], runs["beta"]
    listed = client.get(url("run", "changelist")).context["cl"].result_list
    assert [run.pk for run in listed] == [ours.pk]
    assert [s.run_id for s in client.get(url("session", "changelist")).context["cl"].result_list] == [ours.pk]
    assert {e.run_id for e in client.get(url("event", "changelist")).context["cl"].result_list} == {ours.pk}
    assert [f.run_id for f in client.get(url("workspacefile", "changelist")).context["cl"].result_list] == [ours.pk]

    assert client.get(url("run", "change", ours.pk)).status_code == 200
    assert client.get(url("run", "change", theirs.pk)).status_code == 404
    assert client.get(url("run", "change", "not-a-uuid")).status_code == 404
    assert client.get(url("run", "history", theirs.pk)).status_code == 404
    assert client.get(url("session", "change", theirs.sessions.get().pk)).status_code == 404
    assert client.get(url("event", "change", theirs.events.first().pk)).status_code == 404
    assert client.get(url("workspacefile", "change", theirs.files.get().pk)).status_code == 404
    # A link's filter cannot reach into another team either.
    response = client.get(url("event", "changelist"), {"run": theirs.pk})
    assert list(response.context["cl"].result_list) == []


def test_run_page_is_read_only_with_its_tree_and_links(runs, team_a, make_member):
    client = client_for(make_member(team_a, "admin"))
    run = runs["alpha"]
    response = client.get(url("run", "change", run.pk))
    assert response.status_code == 200
    page = response.content.decode()
    assert "task of alpha" in page
    assert "Cancel selected runs" not in page  # actions live on the list
    assert f"{url('event', 'changelist')}?run={run.pk}" in page
    assert f"{url('workspacefile', 'changelist')}?run={run.pk}" in page
    assert "3 event(s)" in page and "1 file(s)" in page
    assert url("session", "change", run.sessions.get().pk) in page  # the session inline links to it
    assert 'name="_save"' not in page
    assert client.get(url("run", "add")).status_code == 403
    assert client.post(url("run", "change", run.pk), {"agent": "other"}).status_code == 403
    assert client.post(url("run", "delete", run.pk), {"post": "yes"}).status_code == 403
    run.refresh_from_db()
    assert run.agent == "lead"
    assert Run.objects.filter(pk=run.pk).exists()

    events = client.get(url("event", "changelist"), {"run": run.pk}).context["cl"].result_list
    assert [(e.seq, e.type) for e in events] == [(1, "run_start"), (2, "activation_queued"), (3, "file_change")]
    typed = client.get(url("event", "changelist"), {"run": run.pk, "type": "file_change"}).context["cl"].result_list
    assert [e.seq for e in typed] == [3]
    file = run.files.get()
    assert "notes of alpha" in client.get(url("workspacefile", "change", file.pk)).content.decode()
    assert client.get(url("session", "change", run.sessions.get().pk)).status_code == 200
    assert client.post(url("event", "change", events[0].pk), {"type": "x"}).status_code == 403


def cancel(client, *runs):
    return client.post(url("run", "changelist"), {"action": "cancel_runs",
                                                  "_selected_action": [str(run.pk) for run in runs]})


def test_operator_cancels_runs_with_the_action(runs, team_a, make_member):
    operator = make_member(team_a, "operator")
    client = client_for(operator)
    assert "cancel_runs" in dict(client.get(url("run", "changelist")).context["action_form"].fields["action"].choices)
    response = cancel(client, runs["alpha"])
    assert response.status_code == 302
    run = Run.objects.get(pk=runs["alpha"].pk)
    assert run.status == "cancelled"
    assert run.error == f"cancelled by {operator.username}"
    assert run.activations.get().status == "cancelled"
    assert list(run.events.filter(type="run_complete").values_list("data", flat=True)) == [
        {"status": "cancelled", "error": run.error}]
    # Another team's run, posted by id, is not in this user's rows: untouched.
    cancel(client, runs["beta"])
    assert Run.objects.get(pk=runs["beta"].pk).status == "queued"


@pytest.mark.parametrize("role", ["viewer", "editor"])
def test_roles_without_run_cannot_cancel(runs, team_a, make_member, role):
    client = client_for(make_member(team_a, role))
    # No cancel is offered (delete is for superusers only); an editor may save a run as an eval case.
    form = client.get(url("run", "changelist")).context["action_form"]
    offered = [] if form is None else [name for name, _ in form.fields["action"].choices if name]
    assert offered == ([] if role == "viewer" else ["save_as_eval_case"])
    cancel(client, runs["alpha"])
    run = Run.objects.get(pk=runs["alpha"].pk)
    assert run.status == "queued"
    assert not run.events.filter(type="run_complete").exists()


def test_superuser_sees_every_team(runs):
    root = get_user_model().objects.create_superuser("root", password="pw-for-tests-1")
    client = client_for(root)
    listed = {run.pk for run in client.get(url("run", "changelist")).context["cl"].result_list}
    assert listed == {runs["alpha"].pk, runs["beta"].pk}
    cancel(client, runs["beta"])
    assert Run.objects.get(pk=runs["beta"].pk).status == "cancelled"


def test_outsider_sees_no_runs(runs):
    from mas_core.teams import user_create

    outsider = user_create(username="outsider", password="pw-for-tests-1")
    outsider.is_staff = True
    outsider.save()
    client = client_for(outsider)
    assert client.get(url("run", "changelist")).status_code == 403
    assert client.get(url("event", "changelist")).status_code == 403
    assert Event.objects.count() == 6 and WorkspaceFile.objects.count() == 2
