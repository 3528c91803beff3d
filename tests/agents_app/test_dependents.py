"""Deleting a definition that others use: refused with the list of its dependents, in the API and the admin."""

from __future__ import annotations

import pytest
from django.urls import reverse

from mas_core.definitions.dependents import DefinitionInUse, definition_dependents
from agents_app.kinds import AGENT, PROVIDER, SKILL
from tools_app.kinds import MCP, TOOL
from workflows_app.kinds import WORKFLOW
from mas_core.definitions.services import definition_delete, definition_parse, definition_save
from agents_app.models import Agent, DefinitionVersion, Skill
from tests.agents_app.test_admin_definitions import client_for
from tools_app.models import CustomTool, MCPServer
from workflows_app.models import Workflow

pytestmark = pytest.mark.django_db


def save(team, kind, text: str):
    return definition_save(kind=kind, team=team, parsed=definition_parse(kind=kind, team=team, text=text)).row


@pytest.fixture
def world(team_a, team_b):
    save(team_a, PROVIDER, "---\nname: local\ntype: openai\nbase_url: http://127.0.0.1:9/v1\nmodels:\n- name: m1\n"
                           "  tier: small\n---\n")
    save(team_a, TOOL, "---\nname: shout\ndescription: Shouts.\nparameters:\n  text:\n    type: string\n"
                       "prompt: Shout {{text}}\n---\n")
    save(team_a, MCP, "---\nname: Docs\ntransport: streamable-http\nurl: https://example.org/mcp\n---\n")
    save(team_a, SKILL, "---\nname: Cite\ndescription: Cite sources.\n---\n\nCite.\n")
    save(team_a, AGENT, "---\nname: Writer\nmodel: local:m1\ntools: [shout, vfs_read]\nmcp_servers: [docs]\n"
                        "skills: [Cite]\n---\n\nYou write.\n")
    save(team_a, AGENT, "---\nname: Critic\n---\n\nYou criticise.\n")
    save(team_a, AGENT, "---\nname: Idle\n---\n\nYou idle.\n")
    save(team_a, WORKFLOW, "---\nname: Pipeline\nsteps:\n- id: draft\n  agent: writer\n  prompt: Draft.\n"
                           "- id: redraft\n  agent: writer\n  prompt: Again.\n  depends_on: [draft]\n"
                           "- id: review\n  agent: critic\n  prompt: Review.\n  depends_on: [redraft]\n---\n")
    # Another team's workflow using an agent of the same slug is none of alpha's business.
    save(team_b, AGENT, "---\nname: Idle\n---\n\nYou idle.\n")
    save(team_b, WORKFLOW, "---\nname: Theirs\nsteps:\n- id: one\n  agent: idle\n  prompt: Go.\n---\n")


def dependents(team, kind, slug):
    row = kind.model.objects.get(team=team, slug=slug)
    return [(d.kind, d.slug, d.where) for d in definition_dependents(kind=kind, team=team, row=row)]


def test_each_kind_lists_what_uses_it(world, team_a):
    assert dependents(team_a, AGENT, "writer") == [("workflow", "pipeline", "steps draft, redraft")]
    assert dependents(team_a, AGENT, "critic") == [("workflow", "pipeline", "step review")]
    assert dependents(team_a, AGENT, "idle") == []
    assert dependents(team_a, TOOL, "shout") == [("agent", "writer", "tools")]
    assert dependents(team_a, MCP, "docs") == [("agent", "writer", "mcp_servers")]
    assert dependents(team_a, SKILL, "cite") == [("agent", "writer", "skills")]
    assert dependents(team_a, PROVIDER, "local") == [("agent", "writer", "model")]
    assert dependents(team_a, WORKFLOW, "pipeline") == []


def test_the_service_refuses_unless_forced(world, team_a):
    with pytest.raises(DefinitionInUse) as refused:
        definition_delete(kind=AGENT, team=team_a, slug="writer")
    assert str(refused.value) == ("Agent writer is used by workflow pipeline (steps draft, redraft): "
                                  "change or delete them first")
    assert Agent.objects.filter(team=team_a, slug="writer").exists()
    warnings = definition_delete(kind=AGENT, team=team_a, slug="writer", force=True)
    assert warnings == ["Agent writer is used by workflow pipeline (steps draft, redraft): they fail until they are "
                        "changed"]
    assert not Agent.objects.filter(team=team_a, slug="writer").exists()


def test_the_api_answers_409_with_the_dependents_unless_force(world, team_a, team_b, api_for):
    api = api_for(team_a, "editor")
    refused = api.delete("/api/tools/shout")
    assert refused.status_code == 409
    assert refused.json() == {
        "detail": "Custom tool shout is used by agent writer (tools): change or delete them first",
        "dependents": [{"kind": "agent", "slug": "writer", "name": "Writer", "where": "tools"}]}
    assert CustomTool.objects.filter(team=team_a, slug="shout").exists()
    for path in ("/api/agents/writer", "/api/mcp-servers/docs", "/api/skills/cite"):
        assert api.delete(path).status_code == 409, path
    assert api.delete("/api/agents/writer?force=nonsense").status_code == 422
    assert MCPServer.objects.filter(team=team_a).count() == 1 and Skill.objects.filter(team=team_a).count() == 1

    forced = api.delete("/api/agents/writer?force=true")
    assert forced.status_code == 200
    assert forced.json()["warnings"] == [
        "Agent writer is used by workflow pipeline (steps draft, redraft): they fail until they are changed"]
    # Nothing used it in beta: deleted at once.
    assert api_for(team_b, "editor").delete("/api/agents/idle").status_code == 409  # theirs uses their idle
    assert api.delete("/api/agents/idle").status_code == 200


def test_the_admin_lists_the_dependents_and_asks_again(world, team_a, make_member):
    client = client_for(make_member(team_a, "editor"))
    writer = Agent.objects.get(team=team_a, slug="writer")
    url = reverse("admin:agents_app_agent_delete", args=[writer.pk])
    page = client.get(url).content.decode()
    assert "Agent writer is used by workflow pipeline (steps draft, redraft)." in page
    assert 'name="force"' in page

    # The plain confirmation (as Django's page posts it) does not delete a definition others use.
    refused = client.post(url, {"post": "yes"})
    assert refused.status_code == 302 and refused["Location"] == url
    assert Agent.objects.filter(pk=writer.pk).exists()
    assert "Not deleted: other definitions use it" in client.get(url).content.decode()

    done = client.post(url, {"post": "yes", "force": "1"}, follow=True)
    assert done.status_code == 200
    assert not Agent.objects.filter(pk=writer.pk).exists()
    assert DefinitionVersion.objects.filter(team=team_a, kind="agent", slug="writer").exists()  # versions stay
    assert "they fail until they are changed" in done.content.decode()

    # The bulk action deletes the free ones and names the others.
    critic, idle = (Agent.objects.get(team=team_a, slug=s) for s in ("critic", "idle"))
    response = client.post(reverse("admin:agents_app_agent_changelist"),
                           {"action": "delete_selected", "_selected_action": [critic.pk, idle.pk], "post": "yes"},
                           follow=True)
    assert "Not deleted: Agent critic is used by workflow pipeline (step review)" in response.content.decode()
    assert set(Agent.objects.filter(team=team_a).values_list("slug", flat=True)) == {"critic"}


def test_a_workflow_whose_agent_is_gone_does_not_say_in_sync(world, team_a, make_member):
    client = client_for(make_member(team_a, "editor"))
    pipeline = Workflow.objects.get(team=team_a, slug="pipeline")
    url = reverse("admin:workflows_app_workflow_change", args=[pipeline.pk])
    assert "broken" not in client.get(url).content.decode()
    definition_delete(kind=AGENT, team=team_a, slug="critic", force=True)
    page = client.get(url).content.decode()
    assert "in sync; <strong class='mas-broken'>broken: agent critic missing</strong>" in page
