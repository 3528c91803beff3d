"""Guardrails as definitions: markdown, versions, the API, the admin, and what names them (agents, workflow
steps, runs) — each refusal naming its field, nothing of a refused definition saved."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents_app.execution.children import child_spawn
from agents_app.execution.errors import UnknownGuardrails
from agents_app.execution.runs import run_start
from agents_app.kinds import AGENT, GUARDRAIL
from agents_app.models import Activation, DefinitionVersion, Event, Guardrail, Run
from agents_app.selectors_guardrails import guardrail_slugs, team_default_guardrails
from mas_core.definitions import storage
from mas_core.definitions.markdown import DefinitionError
from mas_core.definitions.services import definition_parse, definition_save
from mas_core.definitions.sync import markdown_sync
from mas_core.guardrails import DETECTORS, backtracking_problem
from tests.agents_app.test_admin_definitions import client_for
from workflows_app.kinds import WORKFLOW
from workflows_app.services import workflow_run_start

pytestmark = pytest.mark.django_db

CARDS = (
    "---\nname: Card numbers\ndescription: No card number reaches a model.\napplies_to:\n- run_input\n"
    "- tool_result\ntools:\n- web_fetch\n- mcp__*\ndetector:\n  type: pii\n  kinds:\n  - card\naction: redact\n"
    "default: true\n---\n\nPayment data stays with the payment service.\n"
)
CARDS_SPEC = {"name": "Card numbers", "description": "No card number reaches a model.",
              "applies_to": ["run_input", "tool_result"], "tools": ["web_fetch", "mcp__*"],
              "detector": {"type": "pii", "kinds": ["card"]}, "action": "redact", "default": True}


def save(team, kind, text: str):
    return definition_save(kind=kind, team=team, parsed=definition_parse(kind=kind, team=team, text=text)).row


def guardrail(team, name: str, *, default: bool = False):
    default_line = "default: true\n" if default else ""
    return save(team, GUARDRAIL, f"---\nname: {name}\napplies_to:\n- model_answer\ndetector:\n  type: keywords\n"
                                 f"  words:\n  - confidential\naction: warn\n{default_line}---\n")


def refused(kind, team, text: str) -> tuple:
    with pytest.raises(DefinitionError) as info:
        definition_parse(kind=kind, team=team, text=text, path=f"{kind.folder}/x.md")
    return info.value.line, info.value.field, info.value.message


# -- markdown and versions ------------------------------------------------------------------------


def test_a_guardrail_round_trips_through_its_markdown_file_and_keeps_versions(team_a):
    result = definition_save(kind=GUARDRAIL, team=team_a, parsed=definition_parse(kind=GUARDRAIL, team=team_a,
                                                                                  text=CARDS))
    row = result.row
    assert (result.created, result.file_status, result.warnings) == (True, "written", [])
    assert (row.slug, row.name, row.version, row.action, row.default) == ("card-numbers", "Card numbers", 1,
                                                                           "redact", True)
    assert row.spec == CARDS_SPEC
    assert row.body == "Payment data stays with the payment service."
    root = storage.team_defs_dir(team_a)
    path = root / "guardrails" / "card-numbers.md"
    assert path.read_text(encoding="utf-8") == CARDS  # the file is the canonical form of what was saved
    read_back = definition_parse(kind=GUARDRAIL, team=team_a, text=storage.read_item(GUARDRAIL, root, row.slug).text)
    assert (read_back.spec_data(), read_back.body) == (CARDS_SPEC, row.body)

    # The same content again keeps the version; a change makes version 2, and both are kept.
    again = definition_save(kind=GUARDRAIL, team=team_a, parsed=definition_parse(kind=GUARDRAIL, team=team_a,
                                                                                 text=CARDS))
    assert (again.changed, again.row.version) == (False, 1)
    changed = CARDS.replace("action: redact\ndefault: true\n", "action: mask\n")
    second = definition_save(kind=GUARDRAIL, team=team_a,
                             parsed=definition_parse(kind=GUARDRAIL, team=team_a, text=changed))
    assert (second.changed, second.row.version, second.row.action, second.row.default) == (True, 2, "mask", False)
    assert path.read_text(encoding="utf-8") == changed
    versions = DefinitionVersion.objects.filter(team=team_a, kind="guardrail", slug="card-numbers")
    assert list(versions.order_by("number").values_list("number", "content")) == [(1, CARDS), (2, changed)]


def test_defaults_are_left_out_of_the_file_and_the_team_defaults_are_found_by_their_column(team_a, team_b):
    row = guardrail(team_a, "Quiet")
    assert row.spec == {"name": "Quiet", "applies_to": ["model_answer"],
                        "detector": {"type": "keywords", "words": ["confidential"]}, "action": "warn"}
    assert row.content == ("---\nname: Quiet\napplies_to:\n- model_answer\ndetector:\n  type: keywords\n  words:\n"
                           "  - confidential\naction: warn\n---\n")
    guardrail(team_a, "Loud", default=True)
    guardrail(team_b, "Theirs", default=True)
    assert team_default_guardrails(team_id=team_a.id) == ["loud"]
    assert guardrail_slugs(team=team_a) == {"quiet", "loud"}


def test_a_sync_imports_a_guardrail_before_the_agent_that_names_it(team_a):
    root = storage.team_defs_dir(team_a)
    (root / "guardrails").mkdir(parents=True)
    (root / "agents").mkdir()
    (root / "guardrails" / "card-numbers.md").write_text(CARDS, encoding="utf-8")
    (root / "agents" / "writer.md").write_text("---\nname: Writer\nguardrails:\n- card-numbers\n---\n\nYou write.\n",
                                               encoding="utf-8")

    checked = markdown_sync(team=team_a, mode="check")  # nothing saved: the agent sees the guardrail to import
    assert ([(i.kind, i.slug) for i in checked.imported], checked.errors) == (
        [("guardrail", "card-numbers"), ("agent", "writer")], [])
    assert not Guardrail.objects.exists()
    report = markdown_sync(team=team_a, mode="both")
    assert ([(i.kind, i.slug, i.detail) for i in report.imported], report.errors) == (
        [("guardrail", "card-numbers", "created (version 1)"), ("agent", "writer", "created (version 1)")], [])
    assert Guardrail.objects.get(team=team_a).spec == CARDS_SPEC


# -- refusals, each naming its field -----------------------------------------------------------------

CATASTROPHIC = backtracking_problem("^(a+)+$")
FENCE_REFUSED = ("fence marks a tool's result as untrusted data: it needs applies_to: [tool_result] and nothing "
                 "else")
ASK_REFUSED = ("ask makes a tool call, its result or the answer wait for a person: it needs applies_to "
               "tool_arguments, memory_write, tool_result or model_answer, and nothing else")
UNKNOWN_TYPE = f"'regex' is not a detector: one of {', '.join(DETECTORS)}"
# What a POST sends instead of VALID's fields, where the refusal is (its loc) and what it says.
BAD = {
    "re2": ({"detector": {"type": "pattern", "patterns": ["card", "(unclosed"]}}, ["body", "detector", "patterns", 1],
            "missing ): (unclosed (patterns use RE2 syntax: no look-around or backreferences)"),
    "catastrophic": ({"detector": {"type": "pattern", "patterns": ["^(a+)+$"]}}, ["body", "detector", "patterns", 0],
                     CATASTROPHIC),
    "unknown-type": ({"detector": {"type": "regex"}}, ["body", "detector", "type"], UNKNOWN_TYPE),
    "fence-not-on-tool-results": ({"applies_to": ["model_answer"], "action": "fence"}, ["body", "action"],
                                  FENCE_REFUSED),
    "ask-on-requests": ({"applies_to": ["model_request"], "action": "ask"}, ["body", "action"], ASK_REFUSED),
    "no-point": ({"applies_to": []}, ["body", "applies_to"],
                 "List should have at least 1 item after validation, not 0"),
    "a-point-twice": ({"applies_to": ["tool_result", "tool_result"]}, ["body", "applies_to"],
                      "tool_result appears more than once"),
    "tools-with-no-tool-point": ({"applies_to": ["model_answer"], "tools": ["web_fetch"]}, ["body", "tools"],
                                 "narrows only the tool_arguments, tool_result, memory_write points, and applies_to "
                                 "names none of them"),
    "bad-tool-pattern": ({"tools": ["web fetch"]}, ["body", "tools", 0],
                         "String should match pattern '^[A-Za-z0-9_*?.\\-\\[\\]]+$'"),
}
VALID = {"name": "Probe", "applies_to": ["tool_result"], "detector": {"type": "pii", "kinds": ["card"]},
         "action": "redact"}


@pytest.mark.parametrize("case", list(BAD))
def test_the_api_refuses_a_bad_guardrail_naming_the_field_and_saves_nothing(team_a, api_for, case):
    change, loc, message = BAD[case]
    response = api_for(team_a, "editor").post("/api/guardrails", {**VALID, **change})
    assert response.status_code == 422, response.json()
    [item] = response.json()["detail"]
    assert (item["loc"], item["msg"]) == (loc, message)
    assert not Guardrail.objects.exists()
    assert not DefinitionVersion.objects.exists()
    assert not (storage.team_defs_dir(team_a) / "guardrails").exists()


def test_a_catastrophic_pattern_is_refused_as_such():
    assert CATASTROPHIC.startswith("backtracks catastrophically in a backtracking engine: ")


def test_a_bad_markdown_guardrail_is_refused_naming_its_line_and_field(team_a):
    head = "---\nname: Probe\napplies_to: [tool_result]\n"
    assert refused(GUARDRAIL, team_a, head + "detector:\n  type: pattern\n  patterns:\n  - ok\n  - ^(a+)+$\n"
                                             "action: block\n---\n") == (8, "detector.patterns.1", CATASTROPHIC)
    assert refused(GUARDRAIL, team_a, head + "detector:\n  type: pattern\n  patterns: ['(unclosed']\n"
                                             "action: block\n---\n") == (
        6, "detector.patterns.0", "missing ): (unclosed (patterns use RE2 syntax: no look-around or backreferences)")
    assert refused(GUARDRAIL, team_a, head + "detector:\n  type: regex\naction: block\n---\n") == (
        5, "detector.type", UNKNOWN_TYPE)
    assert refused(GUARDRAIL, team_a, "---\nname: Probe\napplies_to: [model_answer]\ndetector: {type: length, "
                                      "max_chars: 10}\naction: fence\n---\n") == (5, "action", FENCE_REFUSED)
    assert refused(GUARDRAIL, team_a, "---\nname: Probe\napplies_to: []\ndetector: {type: length, max_chars: 10}\n"
                                      "action: warn\n---\n") == (
        3, "applies_to", "List should have at least 1 item after validation, not 0")
    assert refused(GUARDRAIL, team_a, head + "detector: {type: length, max_chars: 10}\n---\n") == (
        None, "action", "required field is missing")
    assert refused(GUARDRAIL, team_a, head + "detector: {type: length, max_chars: 10}\naction: warn\nwhen: always\n"
                                             "---\n") == (
        6, "when", "unknown field (allowed: name, description, applies_to, tools, detector, action, default)")
    assert not Guardrail.objects.exists()


# -- what names guardrails: agents, workflow steps, runs --------------------------------------------


def test_an_agent_names_only_its_own_teams_guardrails(team_a, team_b, api_for):
    guardrail(team_a, "Ours")
    guardrail(team_b, "Theirs")
    api = api_for(team_a, "editor")
    response = api.post("/api/agents", {"name": "Writer", "guardrails": ["ours", "theirs"], "body": "You write."})
    assert response.status_code == 422
    assert response.json()["detail"] == [{"loc": ["body", "guardrails"], "type": "invalid_definition",
                                          "msg": "unknown guardrail(s) theirs; the team's guardrails are: ours"}]
    assert refused(AGENT, team_a, "---\nname: Writer\nguardrails: [ghost]\n---\n") == (
        3, "guardrails", "unknown guardrail(s) ghost; the team's guardrails are: ours")
    assert refused(AGENT, team_a, "---\nname: Writer\nguardrails: [ours, ours]\n---\n")[1:] == (
        "guardrails", "ours appears more than once")

    created = api.post("/api/agents", {"name": "Writer", "guardrails": ["ours"], "body": "You write."})
    assert created.status_code == 201, created.json()
    assert created.json()["guardrails"] == ["ours"]


def test_a_workflow_step_names_the_teams_guardrails_and_hands_them_to_its_activations(team_a, team_b):
    guardrail(team_a, "Ours")
    guardrail(team_b, "Theirs")
    save(team_a, AGENT, "---\nname: Writer\n---\n\nYou write.\n")
    save(team_a, AGENT, "---\nname: Helper\n---\n\nYou help.\n")
    flow = "---\nname: Pipeline\nsteps:\n- id: draft\n  agent: writer\n  prompt: Draft.\n  guardrails: [{}]\n---\n"
    assert refused(WORKFLOW, team_a, flow.format("theirs")) == (
        7, "steps[0].guardrails", "unknown guardrail(s) theirs; the team's guardrails are: ours")
    assert save(team_a, WORKFLOW, flow.format("ours")).spec["steps"][0]["guardrails"] == ["ours"]

    run = workflow_run_start(team=team_a, workflow="pipeline", inputs={})
    step = Activation.objects.get(run=run)
    assert (step.ctx.step, step.ctx.step_guardrails) == ("draft", ["ours"])
    assert step.context["step_guardrails"] == ["ours"]
    child = child_spawn(activation_id=step.id, agent="helper", task="Check the draft.", kind="spawn")
    assert child.ctx.step_guardrails == ["ours"]  # the step's guardrails follow the agents it starts


def test_deleting_a_guardrail_others_name_is_refused_with_the_list(team_a, api_for):
    guardrail(team_a, "Ours")
    save(team_a, AGENT, "---\nname: Writer\nguardrails: [ours]\n---\n\nYou write.\n")
    save(team_a, WORKFLOW, "---\nname: Pipeline\nsteps:\n- id: draft\n  agent: writer\n  prompt: Draft.\n"
                           "  guardrails: [ours]\n---\n")
    api = api_for(team_a, "editor")
    response = api.delete("/api/guardrails/ours")
    assert response.status_code == 409
    assert response.json() == {
        "detail": "Guardrail ours is used by agent writer (guardrails), workflow pipeline (guardrails of step draft): "
                  "change or delete them first",
        "dependents": [{"kind": "agent", "slug": "writer", "name": "Writer", "where": "guardrails"},
                       {"kind": "workflow", "slug": "pipeline", "name": "Pipeline",
                        "where": "guardrails of step draft"}]}
    assert Guardrail.objects.filter(team=team_a, slug="ours").exists()
    assert api.delete("/api/guardrails/ours?force=true").status_code == 200
    assert not Guardrail.objects.exists()


def test_a_run_adds_the_teams_guardrails_at_its_start(team_a, team_b, api_for):
    guardrail(team_a, "Ours")
    guardrail(team_a, "Also ours")
    guardrail(team_b, "Theirs")
    save(team_a, AGENT, "---\nname: Lead\n---\n\nYou lead.\n")
    operator = api_for(team_a, "operator")
    for slugs in (["ghost"], ["ours", "theirs"]):
        response = operator.post("/api/runs", {"agent": "lead", "input": "Go", "guardrails": slugs})
        assert response.status_code == 422
        unknown = slugs[-1]
        assert response.json()["detail"] == [{
            "loc": ["body", "guardrails"], "type": "unknown_guardrail",
            "msg": f"unknown guardrail(s) {unknown}; the team's guardrails are: also-ours, ours"}]
    twice = operator.post("/api/runs", {"agent": "lead", "input": "Go", "guardrails": ["ours", "ours"]})
    assert (twice.status_code, twice.json()["detail"][0]["loc"]) == (422, ["body", "guardrails"])
    assert not Run.objects.exists()

    response = operator.post("/api/runs", {"agent": "lead", "input": "Go", "guardrails": ["ours", "also-ours"]})
    assert response.status_code == 201, response.json()
    run = Run.objects.get(pk=response.json()["id"])
    assert run.guardrails == ["ours", "also-ours"]
    assert response.json()["guardrails"] == ["ours", "also-ours"]
    assert Event.objects.get(run=run, type="run_start").data["guardrails"] == ["ours", "also-ours"]
    # Without guardrails a run adds none, and its start event says nothing of them.
    plain = Run.objects.get(pk=operator.post("/api/runs", {"agent": "lead", "input": "Go"}).json()["id"])
    assert plain.guardrails == []
    assert "guardrails" not in Event.objects.get(run=plain, type="run_start").data

    # The service refuses the same way for every caller (CLI, start form).
    with pytest.raises(UnknownGuardrails, match=r"^unknown guardrail\(s\) theirs; "):
        run_start(team=team_a, agent="lead", input="Go", guardrails=["theirs"])


# -- the admin -------------------------------------------------------------------------------------


def test_the_admin_add_page_offers_a_template_and_saves_a_guardrail(team_a, make_member):
    client = client_for(make_member(team_a, "editor"))
    url = reverse("admin:agents_app_guardrail_add")
    page = client.get(url)
    assert page.status_code == 200
    template = page.context["adminform"].form.fields["markdown"].initial
    assert "type: pii" in template and "- card" in template and "action: redact" in template

    response = client.post(url, {"team": team_a.pk, "markdown": template})
    assert response.status_code == 302, response.context["adminform"].form.errors
    row = Guardrail.objects.get(team=team_a)
    assert (row.slug, row.action, row.default, row.version) == ("card-numbers", "redact", False, 1)
    assert row.spec == {"name": "Card numbers", "description": "Card numbers never reach a model or a memory.",
                        "applies_to": ["run_input", "tool_result", "memory_write"],
                        "detector": {"type": "pii", "kinds": ["card"]}, "action": "redact"}
    path = storage.team_defs_dir(team_a) / "guardrails" / "card-numbers.md"
    assert path.read_text(encoding="utf-8") == template
    listed = client.get(reverse("admin:agents_app_guardrail_changelist"))
    assert list(listed.context["cl"].result_list) == [row]

    bad = client.post(url, {"team": team_a.pk, "markdown": template.replace("type: pii", "type: regex")})
    assert bad.status_code == 200
    assert bad.context["adminform"].form.errors["markdown"][0].startswith("Line 9, field detector.type: ")
    assert Guardrail.objects.count() == 1


# -- the outgoing point ----------------------------------------------------------------------------


def test_an_outgoing_guardrail_round_trips_and_refuses_actions_that_are_not_for_notifications(team_a, api_for):
    text = ("---\nname: Cards stay in\napplies_to:\n- outgoing\ndetector:\n  type: pii\n  kinds:\n  - card\n"
            "action: redact\ndefault: true\n---\n")
    row = save(team_a, GUARDRAIL, text)
    assert (row.slug, row.action, row.default) == ("cards-stay-in", "redact", True)
    assert row.spec == {"name": "Cards stay in", "applies_to": ["outgoing"],
                        "detector": {"type": "pii", "kinds": ["card"]}, "action": "redact", "default": True}
    assert (storage.team_defs_dir(team_a) / "guardrails" / "cards-stay-in.md").read_text(encoding="utf-8") == text

    head = "---\nname: Probe\napplies_to: [outgoing]\ndetector: {type: pii, kinds: [card]}\n"
    assert refused(GUARDRAIL, team_a, head + "action: fence\n---\n") == (5, "action", FENCE_REFUSED)
    assert refused(GUARDRAIL, team_a, head + "action: ask\n---\n") == (5, "action", ASK_REFUSED)
    assert refused(GUARDRAIL, team_a, head + "tools: [web_fetch]\naction: warn\n---\n") == (
        5, "tools", "narrows only the tool_arguments, tool_result, memory_write points, and applies_to names none "
                    "of them")
    response = api_for(team_a, "editor").post("/api/guardrails", {**VALID, "applies_to": ["outgoing", "tool_result"],
                                                                  "action": "fence"})
    assert response.status_code == 422
    assert [(item["loc"], item["msg"]) for item in response.json()["detail"]] == [(["body", "action"], FENCE_REFUSED)]
    assert list(Guardrail.objects.values_list("slug", flat=True)) == ["cards-stay-in"]
