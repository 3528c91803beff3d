"""An agent edited as a form in the admin: fields up front, errors on their field, the markdown one click away."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse
from django.utils.html import escape

from agents_app.kinds import AGENT, PROVIDER, SKILL

from tools_app.kinds import MCP, TOOL
from mas_core.definitions.storage import team_defs_dir
from agents_app.models import Agent, DefinitionVersion
from mas_core.admin_fields_editor import RowsField
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
    """What the browser posts: the form's initial values (rows as their cells), with ``changes``."""
    form = page_context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        value = form[name].value()
        if isinstance(field, RowsField):
            data[f"{name}-present"] = "1"
            for row in value or []:
                data[f"{name}-{row.index}-was"] = row.was
                data.update({f"{name}-{row.index}-{key}": cell for key, cell in row.values.items()})
            continue
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
                     skills=["cite"], max_steps="7", expose="on", prompt="You review.\n\nBe kind.")
    response = client.post(ADD, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    agent = Agent.objects.get(team=team_with_things, slug="reviewer")
    assert agent.content == ("---\nname: Reviewer\ndescription: Reviews drafts\nmodel: local:m2\ntier: medium\n"
                             "tools:\n- vfs_read\n- shout\nlimits:\n  max_steps: 7\nskills:\n- cite\nexpose: true\n"
                             "---\n\nYou review.\n\nBe kind.\n")
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


# -- approval rules in the form (issue 27, point 1) --------------------------------------------------------

GATED = (
    "---\nname: Gated\ntools:\n- vfs_read\n- web_fetch\napproval:\n- code_exec\n- tool: mcp__docs__*\n"
    "  deadline_s: 600\n  default: reject\n  reason: Docs cost money\n---\n\nYou fetch.\n"
)


def rows_of(form, name: str) -> list[dict]:
    return [row.values for row in form[name].value()]


def test_approval_rules_show_as_rows_and_round_trip_to_the_markdown(team_with_things, make_member):
    agent = save_definition(AGENT, team_with_things, GATED)
    url = reverse("admin:agents_app_agent_change", args=[agent.pk])
    client = client_for(make_member(team_with_things, "editor"))
    page = client.get(url)
    assert rows_of(page.context["adminform"].form, "approval") == [
        {"tool": "code_exec", "deadline_s": "", "default": "", "reason": ""},
        {"tool": "mcp__docs__*", "deadline_s": "600", "default": "reject", "reason": "Docs cost money"}]
    html = page.content.decode()
    assert '<option value="mcp_unmarked">' in html and '<option value="mcp__docs__*">' in html  # suggested tools

    # Posted as drawn: the same file (the mapping stays a mapping, the name stays a name).
    unchanged = client.post(url, form_data(page.context))
    assert unchanged.status_code == 302, unchanged.context["adminform"].form.errors
    agent.refresh_from_db()
    assert agent.content == GATED

    # A rule edited, one added (a name alone is written as a name), one taken out.
    data = form_data(page.context, **{"approval-1-deadline_s": "60", "approval-1-default": "fail",
                                      "approval-5-was": "", "approval-5-tool": "web_fetch",
                                      "approval-5-deadline_s": "", "approval-5-default": "", "approval-5-reason": ""})
    for key in [key for key in data if key.startswith("approval-0-")]:
        del data[key]
    response = client.post(url, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    agent.refresh_from_db()
    assert agent.spec["approval"] == [
        {"tool": "mcp__docs__*", "deadline_s": 60, "default": "fail", "reason": "Docs cost money"}, "web_fetch"]
    assert "approval:\n- tool: mcp__docs__*\n  deadline_s: 60\n  default: fail\n  reason: Docs cost money\n" \
           "- web_fetch\n" in agent.content
    # Every rule taken out: no approval key at all.
    data = form_data(client.get(url).context)
    for key in [key for key in data if key.startswith("approval-") and key != "approval-present"]:
        del data[key]
    assert client.post(url, data).status_code == 302
    agent.refresh_from_db()
    assert "approval" not in agent.spec and "approval" not in agent.content


@pytest.mark.parametrize(("cells", "cell", "message"), [
    ({"deadline_s": "0"}, "deadline_s", "deadline_s: 0 must be a whole number of seconds from 1 to 2592000"),
    ({"tool": "web fetch"}, "tool", "tool: 'web fetch' is not a tool name or pattern"),
    ({"tool": "", "reason": "no tool"}, "tool", "tool: None is not a tool name or pattern"),
])
def test_an_approval_rule_is_checked_by_the_markdowns_code_and_nothing_is_saved(team_with_things, make_member,
                                                                                cells, cell, message):
    from agents_app.approvals.policy import entries_check

    agent = save_definition(AGENT, team_with_things, GATED)
    url = reverse("admin:agents_app_agent_change", args=[agent.pk])
    client = client_for(make_member(team_with_things, "editor"))
    page = client.get(url)
    response = client.post(url, form_data(page.context, **{f"approval-1-{key}": value for key, value in cells.items()}))
    assert response.status_code == 200
    form = response.context["adminform"].form
    assert list(form.errors) == ["approval"]
    # The message is the markdown's (approvals.policy), under the cell it is about and in the field's list.
    entry = {"tool": "mcp__docs__*", "deadline_s": 600, "default": "reject", "reason": "Docs cost money"}
    entry.update({key: (int(value) if key == "deadline_s" else value or None) for key, value in cells.items()})
    with pytest.raises(ValueError) as raised:
        entries_check(["code_exec", {key: value for key, value in entry.items() if value is not None}])
    assert str(raised.value) == f"entry 2: {message}"
    shown = message.removeprefix(f"{cell}: ")
    label = {"tool": "tool", "deadline_s": "deadline (s)"}[cell]
    assert form.errors["approval"] == [f"Rule 2, {label}: {shown}"]
    assert form.fields["approval"].widget.cell_errors == {(1, cell): [shown]}
    html = response.content.decode()
    assert f'<div class="mas-cell mas-cell-{cell}">' in html and f"<ul class=\"errorlist\"><li>{escape(shown)}" in html
    agent.refresh_from_db()
    assert (agent.version, agent.content) == (1, GATED)


# -- switching between the form and the markdown keeps what was typed (issue 27, point 1) ----------------------

def switch_url(agent=None) -> str:
    if agent is None:
        return reverse("admin:agents_app_agent_addswitch")
    return reverse("admin:agents_app_agent_switch", args=[agent.pk])


def test_switching_to_the_markdown_composes_the_unsaved_fields_and_saves_nothing(team_with_things, make_member):
    agent = save_definition(AGENT, team_with_things, RICH)
    url = reverse("admin:agents_app_agent_change", args=[agent.pk])
    client = client_for(make_member(team_with_things, "editor"))
    page = client.get(url)
    assert page.context["adminform"].form.fields["editor"].widget.attrs["data-switch-url"] == switch_url(agent)
    file = team_defs_dir(team_with_things) / "agents" / "writer.md"
    before = agent.content
    assert file.read_text() == before
    versions = DefinitionVersion.objects.filter(team=team_with_things).count()

    data = form_data(page.context, agent_tier="small", temperature="0.5", prompt="You write short drafts.",
                     **{"approval-present": "1", "approval-0-was": "", "approval-0-tool": "code_exec"})
    response = client.post(switch_url(agent), {**data, "to": "markdown"})
    assert response.status_code == 200
    # As the save would write it: the keys in the schema's order, the skill by its slug (as the form saves it).
    assert response.json() == {"markdown": (
        "---\nname: Writer\ndescription: Writes drafts\nmodel: local:m1\ntier: small\ntemperature: 0.5\ntools:\n"
        "- vfs_read\n- shout\nmcp_servers:\n- name: docs\n  tools:\n  - search\nexamples:\n- task: a memo\n"
        "  outcome: a memo\nskills:\n- cite\napproval:\n- code_exec\ncolour: blue\n---\n\nYou write short drafts.\n")}
    agent.refresh_from_db()
    assert (agent.version, agent.content, file.read_text()) == (1, before, before)
    assert DefinitionVersion.objects.filter(team=team_with_things).count() == versions


def test_switching_to_the_form_reads_the_unsaved_markdown_and_saves_nothing(team_with_things, make_member):
    agent = save_definition(AGENT, team_with_things, RICH)
    before = agent.content
    url = reverse("admin:agents_app_agent_change", args=[agent.pk])
    client = client_for(make_member(team_with_things, "editor"))
    page = client.get(url)
    edited = RICH.replace("model: local:m1\n", "model: elsewhere:big\ntier: large\nmax_tokens: 900\n").replace(
        "- Cite\n", "- Cite\napproval:\n- tool: vfs_*\n  default: approve\n").replace("You write.", "You edit.")
    response = client.post(switch_url(agent), {**form_data(page.context, editor="markdown", markdown=edited),
                                               "to": "fields"})
    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["values"] == {
        "agent_name": "Writer", "agent_description": "Writes drafts", "agent_model": "elsewhere:big",
        "agent_tier": "large", "escalation": "", "temperature": None, "max_tokens": 900,
        "tools": ["vfs_read", "shout"], "mcp_servers": ["docs"], "skills": ["cite"],
        "max_steps": None, "max_tool_calls": None, "timeout_s": None, "memory_enabled": None, "memory_k": None,
        "expose": None,
        "approval": [{"was": "0", "values": {"tool": "vfs_*", "deadline_s": "", "default": "approve", "reason": ""}}],
        "prompt": "You edit."}
    # A model no provider of the team has is offered as the page would offer it on a reload.
    assert ["elsewhere:big", "elsewhere:big (not a model of the team's providers)"] in answer["choices"]["agent_model"]
    assert ["shout", "shout (custom)"] in answer["choices"]["tools"]
    agent.refresh_from_db()
    assert (agent.version, agent.content) == (1, before)

    # Saved from the form afterwards: the fields, over the markdown's keys that have no field.
    edited_with_key = edited.replace("colour: blue", "colour: green")
    data = form_data(page.context, markdown=edited_with_key, agent_model="elsewhere:big", agent_tier="large",
                     max_tokens="900", prompt="You edit.",
                     **{"approval-0-tool": "vfs_*", "approval-0-default": "approve", "approval-0-was": "0"})
    saved = client.post(url, data)
    assert saved.status_code == 302, saved.context["adminform"].form.errors
    agent.refresh_from_db()
    assert agent.extra == {"colour": "green"}
    assert (agent.spec["model"], agent.spec["max_tokens"], agent.spec["approval"]) == (
        "elsewhere:big", 900, [{"tool": "vfs_*", "default": "approve"}])


@pytest.mark.parametrize(("to", "changes", "errors"), [
    ("markdown", {"temperature": "3", "max_steps": "x"},
     ["Temperature: Ensure this value is less than or equal to 2.", "Max steps: Enter a whole number."]),
    ("markdown", {"approval-present": "1", "approval-0-was": "", "approval-0-tool": "a",
                  "approval-0-deadline_s": "soon"}, ["Approvals: Rule 1, deadline (s): enter a whole number"]),
    ("fields", {"editor": "markdown", "markdown": "---\nname: Writer\ntools: [vfs_read\n---\n"},
     ["Line 3: invalid YAML: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence on line 3)"
      " — fix it in the markdown first."]),
    ("fields", {"editor": "markdown", "markdown": "---\nname: Writer\napproval:\n- tool: x\n  when: later\n---\n"},
     ["Line 3, field approval: entry 1: unknown key(s) when (known: tool, deadline_s, default, reason)"
      " — fix it in the markdown first."]),
    ("sideways", {}, ["to: markdown or fields"]),
])
def test_a_switch_that_cannot_be_made_says_why_and_saves_nothing(team_with_things, make_member, to, changes, errors):
    agent = save_definition(AGENT, team_with_things, RICH)
    client = client_for(make_member(team_with_things, "editor"))
    page = client.get(reverse("admin:agents_app_agent_change", args=[agent.pk]))
    before = agent.content
    response = client.post(switch_url(agent), {**form_data(page.context, **changes), "to": to})
    assert (response.status_code, response.json()) == (400, {"errors": errors})
    agent.refresh_from_db()
    assert (agent.version, agent.content) == (1, before)


def test_a_new_agent_switches_with_its_name_still_blank(team_with_things, make_member):
    client = client_for(make_member(team_with_things, "editor"))
    page = client.get(ADD)
    data = form_data(page.context, team=team_with_things.pk, agent_description="Drafts things")
    markdown = client.post(switch_url(), {**data, "to": "markdown"}).json()["markdown"]
    assert markdown == ("---\nname: ''\ndescription: Drafts things\ntier: medium\n---\n\n"
                        "The system prompt of the agent.\n")
    back = client.post(switch_url(), {**data, "editor": "markdown", "markdown": markdown, "to": "fields"})
    assert back.status_code == 200, back.content
    values = back.json()["values"]
    assert (values["agent_name"], values["agent_description"], values["agent_tier"]) == ("", "Drafts things", "medium")
    assert not Agent.objects.filter(team=team_with_things).exists()


def test_switching_needs_the_right_to_edit_in_the_team(team_with_things, team_b, make_member):
    agent = save_definition(AGENT, team_with_things, RICH)
    data = {"editor": "fields", "to": "markdown", "agent_name": "Writer"}
    assert client_for(make_member(team_with_things, "viewer")).post(switch_url(agent), data).status_code == 403
    assert client_for(make_member(team_b, "editor")).post(switch_url(agent), data).status_code == 404
    editor = client_for(make_member(team_with_things, "editor"))
    assert editor.get(switch_url(agent)).status_code == 405


def test_a_skill_the_team_has_not_stays_on_the_agent_when_the_form_saves(team_with_things, make_member):
    agent = save_definition(AGENT, team_with_things, RICH.replace("skills:\n- Cite\n", "skills:\n- Cite\n- house-style\n"))
    url = reverse("admin:agents_app_agent_change", args=[agent.pk])
    client = client_for(make_member(team_with_things, "editor"))
    page = client.get(url)
    form = page.context["adminform"].form
    assert form["skills"].value() == ["cite", "house-style"]
    assert form.fields["skills"].choices == [("cite", "Cite: Cite sources."), ("house-style", "house-style (missing)")]
    response = client.post(url, form_data(page.context, temperature="0.5"))
    assert response.status_code == 302, response.context["adminform"].form.errors
    agent.refresh_from_db()
    assert (agent.version, agent.spec["skills"], agent.spec["temperature"]) == (2, ["cite", "house-style"], 0.5)
