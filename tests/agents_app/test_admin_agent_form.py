"""An agent edited as a form in the admin: fields up front, errors on their field, the markdown one click away."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from agents_app.kinds import AGENT, PROVIDER, SKILL

from tools_app.kinds import MCP, TOOL
from mas_core.definitions.storage import team_defs_dir
from agents_app.models import Agent, DefinitionVersion
from mas_core.teams import membership_set
from tests.agents_app.test_admin_definitions import client_for, save_definition
from tools_app.catalog import BUILTIN_TOOLS, SAFE_DEFAULT_TOOLS

pytestmark = pytest.mark.django_db

ADD = reverse("admin:agents_app_agent_add")

RICH = (
    "---\nname: Writer\ndescription: Writes drafts\nmodel: local:m1\ntools:\n- vfs_read\n- shout\nmcp_servers:\n"
    "- name: docs\n  tools:\n  - search\nskills:\n- Cite\nexamples:\n- task: a memo\n  outcome: a memo\n"
    "colour: blue\n---\n\nYou write.\n"
)


@pytest.fixture
def team_with_things(team_a):
    save_definition(PROVIDER, team_a, "---\nname: local\ntype: openai\nbase_url: http://127.0.0.1:9/v1\nmodels:\n"
                                      "- name: m1\n  tier: small\n- name: m2\n  tier: large\n---\n")
    save_definition(TOOL, team_a, "---\nname: shout\ndescription: Shouts a text back.\nparameters:\n  text:\n"
                                  "    type: string\nprompt: Shout {{text}}\n---\n")
    save_definition(MCP, team_a, "---\nname: Docs\ntransport: streamable-http\nurl: https://example.org/mcp\n---\n")
    save_definition(MCP, team_a, "---\nname: Tracker\ntransport: streamable-http\nurl: https://example.org/t\n---\n")
    save_definition(SKILL, team_a, "---\nname: Cite\ndescription: Cite sources.\n---\n\nCite.\n")
    return team_a


def form_data(page_context, **changes) -> dict:
    """What the browser posts: the form's initial values, with ``changes``."""
    form = page_context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        value = form[name].value()
        if value is None:
            continue
        data[name] = value
    data.update({"editor": "fields", **changes})
    return {key: value for key, value in data.items() if value is not None and value is not False}


def test_the_add_page_offers_every_tool_with_its_description_and_preselects_the_only_team(team_with_things,
                                                                                         make_member):
    client = client_for(make_member(team_with_things, "editor"))
    response = client.get(ADD)
    html = response.content.decode()
    assert response.context["adminform"].form["team"].value() == team_with_things.pk
    assert re.search(rf'<option value="{team_with_things.pk}" selected>alpha</option>', html)
    for name in BUILTIN_TOOLS:
        assert f'value="{name}"' in html, name
    assert "Read a file of the run's shared workspace" in html or "mas-tool-description" in html
    assert "shout (custom) <span class='mas-tool-description'>Shouts a text back.</span>" in html
    assert '<option value="local:m1">local: m1 (small)</option>' in html
    # A new agent starts with the safe default tools ticked.
    assert set(response.context["adminform"].form["tools"].value()) == set(SAFE_DEFAULT_TOOLS)


def test_a_user_in_two_teams_chooses_the_team(team_a, team_b, make_member):
    user = make_member(team_a, "editor")
    membership_set(team=team_b, user=user, role="editor")
    assert client_for(user).get(ADD).context["adminform"].form["team"].value() is None


def test_adding_an_agent_with_the_form(team_with_things, make_member):
    client = client_for(make_member(team_with_things, "editor"))
    data = form_data(client.get(ADD).context, team=team_with_things.pk, agent_name="Reviewer",
                     agent_description="Reviews drafts", agent_model="local:m2", tools=["vfs_read", "shout"],
                     skills=["cite"], max_steps="7", prompt="You review.\n\nBe kind.")
    response = client.post(ADD, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    agent = Agent.objects.get(team=team_with_things, slug="reviewer")
    assert agent.content == ("---\nname: Reviewer\ndescription: Reviews drafts\nmodel: local:m2\ntier: medium\n"
                             "tools:\n- vfs_read\n- shout\nlimits:\n  max_steps: 7\nskills:\n- cite\n---\n\n"
                             "You review.\n\nBe kind.\n")
    assert (team_defs_dir(team_with_things) / "agents" / "reviewer.md").read_text() == agent.content


def test_editing_with_the_form_keeps_what_it_has_no_field_for(team_with_things, make_member):
    agent = save_definition(AGENT, team_with_things, RICH)
    url = reverse("admin:agents_app_agent_change", args=[agent.pk])
    client = client_for(make_member(team_with_things, "editor"))
    page = client.get(url)
    form = page.context["adminform"].form
    assert (form["agent_name"].value(), form["agent_model"].value(), form["skills"].value()) == (
        "Writer", "local:m1", ["cite"])
    assert form["tools"].value() == ["vfs_read", "shout"] and form["mcp_servers"].value() == ["docs"]

    data = form_data(page.context, agent_tier="small", mcp_servers=["docs", "tracker"], temperature="0.5",
                     prompt="You write short drafts.")
    response = client.post(url, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    agent.refresh_from_db()
    assert agent.version == 2
    assert agent.spec["mcp_servers"] == [{"name": "docs", "tools": ["search"]}, "tracker"]  # narrowing kept
    assert agent.spec["examples"] == [{"task": "a memo", "outcome": "a memo"}]
    assert agent.extra == {"colour": "blue"}
    assert (agent.spec["tier"], agent.spec["temperature"], agent.body) == ("small", 0.5, "You write short drafts.")
    assert DefinitionVersion.objects.get(team=team_with_things, kind="agent", slug="writer", number=2).source == \
        "admin"


def test_errors_land_on_their_field_and_nothing_is_saved(team_with_things, make_member):
    agent = save_definition(AGENT, team_with_things, RICH)
    before = agent.content
    url = reverse("admin:agents_app_agent_change", args=[agent.pk])
    client = client_for(make_member(team_with_things, "editor"))
    page = client.get(url)

    ladder = client.post(url, form_data(page.context, escalation="large, small"))
    assert ladder.status_code == 200
    errors = ladder.context["adminform"].form.errors
    assert list(errors) == ["escalation"]
    assert errors["escalation"] == ["small comes after large: a ladder never steps down"]

    bounds = client.post(url, form_data(page.context, max_steps="0", tools=["vfs_read", "no_such_tool"]))
    errors = bounds.context["adminform"].form.errors
    assert errors["max_steps"] == ["Ensure this value is greater than or equal to 1."]
    assert errors["tools"] == ["Select a valid choice. no_such_tool is not one of the available choices."]

    nameless = client.post(url, form_data(page.context, agent_name=""))
    assert list(nameless.context["adminform"].form.errors) == ["agent_name"]
    agent.refresh_from_db()
    assert (agent.version, agent.content) == (1, before)


def test_the_markdown_editor_is_still_there(team_with_things, make_member):
    agent = save_definition(AGENT, team_with_things, RICH)
    url = reverse("admin:agents_app_agent_change", args=[agent.pk])
    client = client_for(make_member(team_with_things, "editor"))
    page = client.get(url)
    assert 'name="markdown"' in page.content.decode() and 'value="markdown"' in page.content.decode()
    edited = agent.content.replace("You write.", "You write well.")
    response = client.post(url, form_data(page.context, editor="markdown", markdown=edited,
                                          prompt="ignored: the markdown is what is saved"))
    assert response.status_code == 302
    agent.refresh_from_db()
    assert agent.content == edited
    bad = client.post(url, form_data(page.context, editor="markdown", markdown="---\nname: x\ntemperature: hot\n---\n"))
    assert list(bad.context["adminform"].form.errors) == ["markdown"]
