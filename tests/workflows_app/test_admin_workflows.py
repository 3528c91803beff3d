"""Workflows in the admin: validated against the team's own agents, errors that name the step."""

from __future__ import annotations

from agents_app.kinds import AGENT

from workflows_app.kinds import WORKFLOW
from agents_app.models import DefinitionVersion
from tests.agents_app.test_admin_definitions import admin_url, client_for, files_under, sample, save_definition
from workflows_app.models import Workflow


def post_add(client, team, text: str):
    return client.post(admin_url(WORKFLOW, "add"), {"team": team.pk, "markdown": text})


def test_steps_may_only_use_agents_of_the_same_team(team_a, team_b, make_member):
    # "researcher" exists in team B only: team A's workflow cannot use it.
    save_definition(AGENT, team_b, sample("agent", "researcher"))
    client = client_for(make_member(team_a, "editor"))
    response = post_add(client, team_a, sample("workflow", "pipeline"))
    assert response.status_code == 200
    [error] = response.context["adminform"].form.errors["markdown"]
    assert error == "Line 7, field steps[0].agent: agent 'researcher' does not exist in this team"
    assert not Workflow.objects.exists()
    assert files_under(team_a) == []


def test_cycle_is_rejected_and_named(team_a, make_member):
    save_definition(AGENT, team_a, sample("agent", "researcher"))
    client = client_for(make_member(team_a, "editor"))
    text = (
        "---\nname: loop\nsteps:\n- id: a\n  agent: researcher\n  depends_on:\n  - b\n"
        "- id: b\n  agent: researcher\n  depends_on:\n  - a\n---\n"
    )
    response = post_add(client, team_a, text)
    assert response.status_code == 200
    [error] = response.context["adminform"].form.errors["markdown"]
    assert error == "Line 3, field steps: cycle: a → b → a"
    assert not Workflow.objects.exists()
    assert not DefinitionVersion.objects.filter(kind="workflow").exists()


def test_valid_workflow_records_trigger(team_a, make_member):
    save_definition(AGENT, team_a, sample("agent", "researcher"))
    client = client_for(make_member(team_a, "editor"))
    text = sample("workflow", "pipeline").replace("inputs:", "trigger: schedule\nschedule: 0 6 * * 1\ninputs:")
    response = post_add(client, team_a, text)
    assert response.status_code == 302
    row = Workflow.objects.get(team=team_a, slug="pipeline")
    assert (row.trigger, row.spec["schedule"]) == ("schedule", "0 6 * * 1")
