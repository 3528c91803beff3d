"""A workflow edited as a form in the admin: fields and step rows, errors on their cell, the markdown one click away."""

from __future__ import annotations

import itertools
import re

import pytest
from django.contrib import admin
from django.http import QueryDict
from django.test import RequestFactory
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mas_core.admin_fields_editor import RowsField
from agents_app.kinds import AGENT
from workflows_app.kinds import WORKFLOW
from mas_core.definitions.markdown import parse_definition, render_definition, validate_definition
from mas_core.definitions.storage import team_defs_dir
from agents_app.models import DefinitionVersion
from mas_core.teams import membership_set
from tests.agents_app.test_admin_definitions import admin_url, client_for, files_under, sample, save_definition
from tests.agents_app.test_roundtrip_property import TEXT, workflow_data
from workflows_app.models import Workflow

pytestmark = pytest.mark.django_db

RICH = (
    "---\nname: Brief to report\ndescription: Research, review, write\ntrigger: schedule\nschedule: 0 6 * * 1\n"
    "inputs:\n- topic\n- audience\non_failure: continue\nsteps:\n- id: research\n  agent: researcher\n  prompt: |-\n"
    "    Research {topic} for {audience}.\n\n    Notes of the last round: {research.notes}\n  outputs:\n  - notes\n"
    "  output_schemas:\n    notes:\n      type: string\n  max_retries: 2\n  gate:\n  - start\n- id: review\n"
    "  agent: reviewer\n  prompt: 'Review: {research.notes}'\n  depends_on:\n  - research\n  outputs:\n"
    "  - verdict\n  on_failure: stop\n  gate:\n  - start\n  - outputs\n- id: write\n  agent: researcher\n"
    "  prompt: Write it up\n  depends_on:\n  - research\n  - review\nloops:\n- steps:\n  - research\n  - review\n"
    "  until: review.verdict == \"ok\"\n  max_rounds: 3\n---\n\nNotes for people: run it weekly.\n"
)


@pytest.fixture
def agents(team_a):
    save_definition(AGENT, team_a, sample("agent", "researcher"))
    save_definition(AGENT, team_a, sample("agent", "reviewer"))
    return team_a


def posted(page_context, **changes) -> dict:
    """What the browser posts: every input of the form as drawn, the editor "the form", then ``changes``."""
    form = page_context["adminform"].form
    data: dict = {"editor": "fields"}
    for name, field in form.fields.items():
        value = form[name].value()
        if isinstance(field, RowsField):
            data[f"{name}-present"] = "1"
            for row in value or []:
                data[f"{name}-{row.index}-was"] = row.was
                for key, cell in row.values.items():
                    if cell != []:
                        data[f"{name}-{row.index}-{key}"] = cell
        elif value is not None and value is not False and name != "editor":
            data[name] = value
    data.update(changes)
    return {key: value for key, value in data.items() if value is not None}


def change_url(row) -> str:
    return reverse("admin:workflows_app_workflow_change", args=[row.pk])


def test_the_form_shows_the_workflow_and_posting_it_unchanged_composes_the_same_file(agents, make_member):
    row = save_definition(WORKFLOW, agents, RICH)
    assert row.content == RICH  # canonical: what the form composes can be compared as text
    client = client_for(make_member(agents, "editor"))
    page = client.get(change_url(row))
    form = page.context["adminform"].form
    assert (form["workflow_name"].value(), form["inputs"].value(), form["workflow_trigger"].value(),
            form["schedule"].value(), form["on_failure"].value()) == (
        "Brief to report", "topic, audience", "schedule", "0 6 * * 1", "continue")
    steps = form["steps"].value()
    assert [(r.index, r.was) for r in steps] == [(0, "research"), (1, "review"), (2, "write")]
    assert steps[1].values == {"id": "review", "agent": "reviewer", "prompt": "Review: {research.notes}",
                               "depends_on": "research", "outputs": "verdict", "gate": ["start", "outputs"],
                               "on_failure": "stop", "max_retries": ""}
    assert [r.values for r in form["loops"].value()] == [
        {"steps": "research, review", "until": 'review.verdict == "ok"', "max_rounds": "3"}]
    html = page.content.decode()
    assert 'name="steps-1-agent" id="id_steps-1-agent" value="reviewer" list="steps-agent-options"' in html
    assert '<datalist id="steps-agent-options"><option value="researcher"><option value="reviewer"></datalist>' in html
    assert '<svg id="mas-step-graph" class="graph"' in html

    # fields → markdown → parse → the same spec; here even the same text, so no new version
    response = client.post(change_url(row), posted(page.context))
    assert response.status_code == 302, response.context["adminform"].form.errors
    row.refresh_from_db()
    assert (row.version, row.content) == (1, RICH)
    assert DefinitionVersion.objects.filter(kind="workflow", slug=row.slug).count() == 1


def test_edited_fields_round_trip_through_the_markdown(agents, make_member):
    row = save_definition(WORKFLOW, agents, RICH)
    client = client_for(make_member(agents, "editor"))
    page = client.get(change_url(row))
    data = posted(page.context, workflow_description="", inputs="topic, audience, deadline",
                  workflow_trigger="manual", on_failure="stop",
                  **{"steps-2-prompt": "Write it up by {deadline}\r\nin full.", "steps-2-depends_on": "review",
                     "steps-2-gate": ["outputs"], "steps-2-max_retries": "1", "steps-2-on_failure": "continue",
                     "loops-0-max_rounds": "5", "schedule": ""})
    response = client.post(change_url(row), data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    row.refresh_from_db()
    parsed = parse_definition(WORKFLOW, row.content, context={"known_agents": {"researcher", "reviewer"}})
    assert parsed.spec_data() == row.spec
    assert row.spec["inputs"] == ["topic", "audience", "deadline"]
    assert "trigger" not in row.spec and "description" not in row.spec and "on_failure" not in row.spec
    assert row.spec["steps"][2] == {"id": "write", "agent": "researcher", "prompt": "Write it up by {deadline}\nin full.",
                                    "depends_on": ["review"], "max_retries": 1, "on_failure": "continue",
                                    "gate": ["outputs"]}
    assert row.spec["loops"] == [{"steps": ["research", "review"], "until": 'review.verdict == "ok"', "max_rounds": 5}]
    assert (row.version, row.trigger) == (2, "manual")


def test_keys_without_a_field_are_kept_and_follow_a_renamed_step(agents, make_member):
    row = save_definition(WORKFLOW, agents, RICH.replace("  max_retries: 2\n", "  max_retries: 2\n  approval:\n"
                                                                              "  - vfs_write\n"))
    client = client_for(make_member(agents, "editor"))
    page = client.get(change_url(row))
    # "research" renamed "dig" (its dependents and loop follow), and a step added at a new row number
    data = posted(page.context, **{
        "steps-0-id": "dig", "steps-0-prompt": "Research {topic} for {audience}; last time: {dig.notes}",
        "steps-1-prompt": "Review: {dig.notes}", "steps-1-depends_on": "dig", "steps-2-depends_on": "dig, review",
        "loops-0-steps": "dig, review", "steps-7-id": "publish", "steps-7-agent": "reviewer",
        "steps-7-depends_on": "write", "steps-7-was": ""})
    response = client.post(change_url(row), data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    row.refresh_from_db()
    assert [step["id"] for step in row.spec["steps"]] == ["dig", "review", "write", "publish"]
    assert row.spec["steps"][0]["output_schemas"] == {"notes": {"type": "string"}}
    assert row.spec["steps"][0]["approval"] == ["vfs_write"]
    assert row.spec["steps"][3] == {"id": "publish", "agent": "reviewer", "depends_on": ["write"]}
    assert row.body == "Notes for people: run it weekly."
    assert row.content.endswith("max_rounds: 3\n---\n\nNotes for people: run it weekly.\n")


def test_an_error_lands_on_its_cell_and_nothing_is_saved(agents, make_member):
    row = save_definition(WORKFLOW, agents, RICH)
    before = row.content
    files_before = files_under(agents)
    client = client_for(make_member(agents, "editor"))
    page = client.get(change_url(row))

    unknown = client.post(change_url(row), posted(page.context, **{"steps-1-agent": "ghost"}))
    assert unknown.status_code == 200
    form = unknown.context["adminform"].form
    assert form.errors == {"steps": ["Step 2 (review), agent: agent 'ghost' does not exist in this team"]}
    html = unknown.content.decode()
    cell = re.search(r'<div class="mas-cell mas-cell-agent">(?:(?!</div>).)*name="steps-1-agent"(?:(?!</div>).)*</div>',
                     html, re.S).group(0)
    assert 'value="ghost"' in cell and 'aria-invalid="true"' in cell
    assert "<ul class=\"errorlist\"><li>agent &#x27;ghost&#x27; does not exist in this team</li></ul>" in cell

    cycle = client.post(change_url(row), posted(page.context, **{"steps-0-depends_on": "write"}))
    errors = cycle.context["adminform"].form.errors
    assert errors == {"steps": ["Step 1 (research), depends on: cycle: research → write → research"]}
    assert cycle.context["adminform"].form.fields["steps"].widget.cell_errors == {
        (0, "depends_on"): ["cycle: research → write → research"]}

    # Two errors in one check (an unknown agent, then a cycle): each on its cell.
    both = client.post(change_url(row), posted(page.context, **{"steps-0-depends_on": "write", "steps-2-agent": "x"}))
    assert both.context["adminform"].form.errors == {"steps": [
        "Step 3 (write), agent: agent 'x' does not exist in this team",
        "Step 1 (research), depends on: cycle: research → write → research"]}
    assert both.context["adminform"].form.fields["steps"].widget.cell_errors == {
        (2, "agent"): ["agent 'x' does not exist in this team"],
        (0, "depends_on"): ["cycle: research → write → research"]}

    typed = client.post(change_url(row), posted(page.context, **{"steps-2-max_retries": "two", "workflow_name": ""}))
    errors = typed.context["adminform"].form.errors
    assert errors == {"steps": ["Step 3, retries: enter a whole number"]}
    assert typed.context["adminform"].form.fields["steps"].widget.cell_errors == {
        (2, "max_retries"): ["enter a whole number"]}

    nameless = client.post(change_url(row), posted(page.context, workflow_name=""))
    assert nameless.context["adminform"].form.errors == {"workflow_name": ["String should have at least 1 character"]}
    schedule = client.post(change_url(row), posted(page.context, schedule="every monday"))
    assert list(schedule.context["adminform"].form.errors) == ["schedule"]
    loop = client.post(change_url(row), posted(page.context, **{"loops-0-steps": "research, nowhere"}))
    # The loop checks report two errors in one: each lands on its own cell.
    assert loop.context["adminform"].form.errors == {"loops": [
        "Loop 1, steps: unknown step 'nowhere'",
        "Loop 1, until: step 'review' is not in this loop (its steps: research)"]}
    assert loop.context["adminform"].form.fields["loops"].widget.cell_errors == {
        (0, "steps"): ["unknown step 'nowhere'"],
        (0, "until"): ["step 'review' is not in this loop (its steps: research)"]}
    # About a key without a field: said where, to be fixed in the markdown.
    schema = client.post(change_url(row), posted(page.context, **{"steps-0-outputs": "facts"}))
    assert schema.context["adminform"].form.errors == {"steps": [
        "Step 1 (research), output_schemas: 'notes' is not a declared output (outputs: facts) — edit it in the "
        "markdown."]}
    row.refresh_from_db()
    assert (row.version, row.content, files_under(agents)) == (1, before, files_before)
    assert DefinitionVersion.objects.filter(kind="workflow").count() == 1


def test_a_form_save_is_the_markdown_editors_save(agents, team_b, make_member):
    """The same edit, by the form in team A and by the markdown in team B: the same row, version and file."""
    save_definition(AGENT, team_b, sample("agent", "researcher"))
    save_definition(AGENT, team_b, sample("agent", "reviewer"))
    user = make_member(agents, "editor")
    membership_set(team=team_b, user=user, role="editor")
    by_form, by_markdown = save_definition(WORKFLOW, agents, RICH), save_definition(WORKFLOW, team_b, RICH)
    client = client_for(user)
    page = client.get(change_url(by_form))
    assert client.post(change_url(by_form), posted(page.context, **{"steps-1-prompt": "Judge: {research.notes}"})
                       ).status_code == 302
    edited = RICH.replace("  prompt: 'Review: {research.notes}'\n", "  prompt: 'Judge: {research.notes}'\n")
    page = client.get(change_url(by_markdown))
    response = client.post(change_url(by_markdown), posted(page.context, editor="markdown", markdown=edited))
    assert response.status_code == 302
    by_form.refresh_from_db(), by_markdown.refresh_from_db()
    fields = ("version", "spec", "extra", "body", "content", "content_hash", "trigger")
    assert [getattr(by_form, name) for name in fields] == [getattr(by_markdown, name) for name in fields]
    assert by_form.content == edited and by_form.version == 2
    versions = [DefinitionVersion.objects.get(team=team, kind="workflow", slug=by_form.slug, number=2)
                for team in (agents, team_b)]
    assert [(v.content, v.source, v.author_id) for v in versions] == [(edited, "admin", user.pk)] * 2
    for team in (agents, team_b):
        assert (team_defs_dir(team) / "workflows" / f"{by_form.slug}.md").read_text() == edited


def test_the_markdown_editor_ignores_the_hidden_form(agents, make_member):
    row = save_definition(WORKFLOW, agents, RICH)
    client = client_for(make_member(agents, "editor"))
    page = client.get(change_url(row))
    edited = RICH.replace("max_rounds: 3", "max_rounds: 4")
    response = client.post(change_url(row), posted(page.context, editor="markdown", markdown=edited,
                                                   **{"steps-0-max_retries": "not a number", "workflow_name": ""}))
    assert response.status_code == 302, response.context["adminform"].form.errors
    row.refresh_from_db()
    assert (row.version, row.content) == (2, edited)
    wrong = client.post(change_url(row), posted(page.context, editor="markdown", markdown="---\nname: x\n---\n"))
    assert list(wrong.context["adminform"].form.errors) == ["markdown"]


def test_a_new_workflow_by_the_form_from_a_template(agents, make_member):
    client = client_for(make_member(agents, "editor"))
    page = client.get(admin_url(WORKFLOW, "add") + "?template=chain")
    form = page.context["adminform"].form
    assert form["team"].value() == agents.pk
    template_steps = [row.values["id"] for row in form["steps"].value()]
    assert template_steps and "Start from a template" in page.content.decode()
    data = posted(page.context, workflow_name="Chained", **{
        f"steps-{row.index}-agent": "researcher" for row in form["steps"].value()})
    response = client.post(admin_url(WORKFLOW, "add"), data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    row = Workflow.objects.get(team=agents, slug="chained")
    assert [step["id"] for step in row.spec["steps"]] == template_steps
    assert {step["agent"] for step in row.spec["steps"]} == {"researcher"}
    assert row.version == 1 and files_under(agents)[-1] == "workflows/chained.md"


# -- any workflow: its fields, as a browser posts them, compose the same spec ------------------------------

_ids = itertools.count(10**6)
AGENTS = ["researcher", "reviewer"]


def browser_text(text: str) -> str:
    """A textarea's value as the server gets it: a browser sends every line break as CRLF (the form reads LF)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def browser_post(form) -> QueryDict:
    data = QueryDict(mutable=True)
    data["editor"] = "fields"
    for name, field in form.fields.items():
        value = form[name].value()
        if isinstance(field, RowsField):
            data[f"{name}-present"] = "1"
            for row in value:
                data[f"{name}-{row.index}-was"] = row.was
                for column in field.columns:
                    cell = row.values[column.key]
                    if column.kind == "checks":
                        data.setlist(f"{name}-{row.index}-{column.key}", cell)
                    else:
                        data[f"{name}-{row.index}-{column.key}"] = browser_text(cell) if column.kind == "textarea" \
                            else cell
        elif name not in ("editor", "markdown") and value is not None:
            data[name] = browser_text(value) if name == "workflow_description" else value
    return data


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=workflow_data(agents=AGENTS), gates=st.lists(st.lists(st.sampled_from(["start", "outputs"]), unique=True),
                                                         max_size=5), body=TEXT)
def test_any_workflows_fields_compose_the_same_spec(agents, make_member, data, gates, body):
    for step, gate in zip(data["steps"], gates):
        if gate:
            step["gate"] = gate
    context = {"known_agents": set(AGENTS)}
    parsed = validate_definition(WORKFLOW, data, body=body, context=context)
    spec = parsed.spec_data()
    row = Workflow(pk=next(_ids), team=agents, slug="any", name=parsed.spec.name, spec=spec, extra={},
                   body=parsed.body, content=render_definition(spec=spec, extra={}, body=parsed.body))
    request = RequestFactory().post("/")
    request.user = make_member(agents, "editor")
    form_class = admin.site._registry[Workflow].get_form(request, row, change=True)
    posted_form = form_class(data=browser_post(form_class(instance=row)), instance=row)
    assert posted_form.is_valid(), posted_form.errors
    # What a browser cannot send as it was (a lone CR in a textarea) is what the form changes, and only that.
    expected = {**spec, **({"description": browser_text(spec["description"])} if "description" in spec else {}),
                "steps": [{**step, **({"prompt": browser_text(step["prompt"])} if "prompt" in step else {})}
                          for step in spec["steps"]]}
    composed = parse_definition(WORKFLOW, posted_form.cleaned_data["markdown"], context=context)
    assert composed.spec_data() == expected
    assert composed.body == parsed.body


def test_a_viewer_reads_the_markdown_and_gets_no_form(agents, make_member):
    row = save_definition(WORKFLOW, agents, RICH)
    page = client_for(make_member(agents, "viewer")).get(change_url(row))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="steps-0-id"' not in html and 'name="editor"' not in html and 'id="mas-step-graph"' not in html
    assert "Research {topic} for {audience}." in html  # the markdown, as text


def test_switching_views_carries_the_unsaved_steps_both_ways_and_saves_nothing(agents, make_member):
    """The agent form's switch (issue 27, point 1) is the workflow form's too: mas_core.admin_fields_editor."""
    row = save_definition(WORKFLOW, agents, RICH)
    client = client_for(make_member(agents, "editor"))
    page = client.get(change_url(row))
    switch = reverse("admin:workflows_app_workflow_switch", args=[row.pk])
    data = posted(page.context, **{"steps-2-prompt": "Write it up, briefly"})
    markdown = client.post(switch, {**data, "to": "markdown"})
    assert markdown.status_code == 200, markdown.content
    assert markdown.json()["markdown"] == RICH.replace("prompt: Write it up\n", "prompt: Write it up, briefly\n")
    edited = RICH.replace("max_rounds: 3", "max_rounds: 4").replace("  - verdict\n  on_failure: stop",
                                                                    "  - verdict\n  - final\n  on_failure: stop")
    assert edited.count("- final\n") == 1
    answer = client.post(switch, {**data, "editor": "markdown", "markdown": edited, "to": "fields"})
    assert answer.status_code == 200, answer.content
    values = answer.json()["values"]
    assert values["loops"] == [{"was": "0", "values": {"steps": "research, review", "until": 'review.verdict == "ok"',
                                                       "max_rounds": "4"}}]
    assert [step["was"] for step in values["steps"]] == ["research", "review", "write"]
    assert values["steps"][1]["values"]["outputs"] == "verdict, final"
    assert values["steps"][2]["values"]["prompt"] == "Write it up"
    row.refresh_from_db()
    assert (row.version, row.content) == (1, RICH)
    assert DefinitionVersion.objects.filter(kind="workflow", slug=row.slug).count() == 1
