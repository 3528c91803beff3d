"""Every definition kind in the admin: markdown editing, versions, files, team isolation, roles."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from agents_app.kinds import AGENT

from mas_core.definitions.kinds import KINDS_BY_NAME, Kind
from mas_core.definitions.services import definition_parse, definition_save
from mas_core.definitions.storage import team_defs_dir
from agents_app.models import DefinitionVersion

KIND_NAMES = ("agent", "tool", "mcp", "workflow", "skill", "provider", "guardrail", "remote_agent")


def sample(kind: str, name: str) -> str:
    """Canonical markdown (render(parse(text)) == text) of a valid ``kind`` named ``name``."""
    return {
        "agent": (
            f"---\nname: {name}\ndescription: Finds facts\ntools:\n- vfs_read\n- web_fetch\n---\n\nYou research.\n"
        ),
        "tool": (
            f"---\nname: {name}\ndescription: Summarize a text\nparameters:\n  text:\n    description: The text\n"
            "prompt: 'Summarize: {{text}}'\n---\n"
        ),
        "mcp": (
            f"---\nname: {name}\ntransport: streamable-http\nurl: https://mcp.example.com/mcp\nheaders:\n"
            "  Authorization: Bearer ${SEARCH_TOKEN}\n---\n"
        ),
        "workflow": (
            f"---\nname: {name}\ninputs:\n- topic\nsteps:\n- id: research\n  agent: researcher\n"
            "  prompt: Research {topic}\n  outputs:\n  - findings\n---\n"
        ),
        "skill": f"---\nname: {name}\ndescription: How to cite\n---\n\nAlways cite.\n",
        "guardrail": (
            f"---\nname: {name}\ndescription: No card numbers\napplies_to:\n- tool_result\ndetector:\n  type: pii\n"
            "  kinds:\n  - card\naction: redact\n---\n\nNotes for people.\n"
        ),
        "eval": (
            f"---\nname: {name}\nagent: researcher\ncases:\n- id: tides\n  task: Explain tides\n  checks:\n"
            "  - type: status\n    equals: succeeded\n---\n"
        ),
        "remote_agent": (
            f"---\nname: {name}\ndescription: Researches for us, elsewhere\n"
            "card_url: https://agents.example.com/a2a/researcher/.well-known/agent-card.json\nheaders:\n"
            "  Authorization: Bearer ${LOCAL_PARTNER_TOKEN}\n---\n"
        ),
        "provider": (
            f"---\nname: {name}\ntype: openai\nbase_url: http://127.0.0.1:11434/v1\napi_key_env: LOCAL_KEY\n"
            "models:\n- name: llama3\n  tier: small\n  input_price: '0.1'\n  output_price: '0.2'\n---\n"
        ),
    }[kind]


# Invalid markdown per kind, and the start of the error the form must show.
INVALID = {
    "agent": ("---\nname: broken\ntemperature: hot\n---\n", "Line 3, field temperature: "),
    "tool": ("---\nname: broken\nprompt: p\ncolour: red\n---\n", "Line 4, field colour: unknown field"),
    "mcp": ("---\nname: broken\ntransport: carrier-pigeon\nurl: https://x\n---\n", "Line 3, field transport: "),
    "workflow": (
        "---\nname: broken\ntrigger: sometimes\nsteps:\n- id: a\n  agent: researcher\n---\n",
        "Line 3, field trigger: ",
    ),
    "skill": ("---\nname: [a, b]\n---\n", "Line 2, field name: Input should be a valid string"),
    "provider": (
        "---\nname: broken\ntype: openai\nmodels:\n- name: a\n  tier: huge\n---\n",
        "Line 6, field models.0.tier: ",
    ),
    "guardrail": (
        "---\nname: broken\napplies_to: [model_answer]\ndetector:\n  type: pii\naction: fence\n---\n",
        "Line 6, field action: fence marks a tool",
    ),
    "remote_agent": (
        "---\nname: broken\ncard_url: https://agents.example.com/card.json\nheaders:\n  Authorization: Bearer abc\n"
        "---\n",
        "Line 4, field headers: ",
    ),
}


def admin_url(kind: Kind, view: str, *args) -> str:
    opts = kind.model._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_{view}", args=args)


def prepare_team(kind: Kind, team) -> None:
    """What a valid sample needs in the team: workflows and eval datasets refer to an agent."""
    if kind.name in {"workflow", "eval"}:
        save_definition(AGENT, team, sample("agent", "researcher"))


def save_definition(kind: Kind, team, text: str):
    return definition_save(kind=kind, team=team, parsed=definition_parse(kind=kind, team=team, text=text)).row


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def change_data(kind: Kind, text: str, **extra) -> dict:
    """POST data of a definition's change form (the provider page carries its read-only inline)."""
    data = {"markdown": text, **extra}
    if kind.name == "provider":
        data.update({"models-TOTAL_FORMS": "0", "models-INITIAL_FORMS": "0"})
    if kind.name == "mcp":
        data.setdefault("secrets", "")
    return data


def post_add(client, kind: Kind, team, text: str):
    return client.post(admin_url(kind, "add"), {"team": team.pk, **change_data(kind, text)})


def files_under(team) -> list[str]:
    root = team_defs_dir(team)
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) if root.exists() else []


@pytest.fixture(params=KIND_NAMES)
def kind(request) -> Kind:
    return KINDS_BY_NAME[request.param]


@pytest.fixture
def two_teams(kind, team_a, team_b):
    """One definition in each team (named after it), ready for isolation checks."""
    for team in (team_a, team_b):
        prepare_team(kind, team)
    a = save_definition(kind, team_a, sample(kind.name, "alpha-item"))
    b = save_definition(kind, team_b, sample(kind.name, "beta-item"))
    return a, b


def test_changelist_shows_only_own_team(kind, two_teams, team_a, make_member):
    client = client_for(make_member(team_a, "editor"))
    response = client.get(admin_url(kind, "changelist"))
    assert response.status_code == 200
    body = response.content.decode()
    assert "alpha-item" in body
    assert "beta-item" not in body
    assert list(response.context["cl"].result_list) == [two_teams[0]]


@pytest.mark.parametrize("view", ["change", "delete", "history"])
def test_other_team_object_is_404(kind, two_teams, team_a, make_member, view):
    _, theirs = two_teams
    client = client_for(make_member(team_a, "editor"))
    url = admin_url(kind, view, theirs.pk)
    assert client.get(url).status_code == 404
    post = {"post": "yes"} if view == "delete" else change_data(kind, sample(kind.name, "hijacked"))
    assert client.post(url, post).status_code == 404
    theirs.refresh_from_db()
    assert (theirs.name, theirs.version) == ("beta-item", 1)


def test_unknown_id_is_404_not_redirect(kind, team_a, make_member):
    client = client_for(make_member(team_a, "editor"))
    assert client.get(admin_url(kind, "change", 999999)).status_code == 404
    assert client.get(admin_url(kind, "change", "not-a-number")).status_code == 404


def test_add_creates_row_version_and_file(kind, team_a, make_member):
    prepare_team(kind, team_a)
    user = make_member(team_a, "editor")
    client = client_for(user)
    page = client.get(admin_url(kind, "add"))
    assert page.status_code == 200
    assert "name: " in page.context["adminform"].form["markdown"].value()
    text = sample(kind.name, "fresh-item")
    response = client.post(admin_url(kind, "add"), {"team": team_a.pk, **change_data(kind, text)})
    assert response.status_code == 302, response.context["adminform"].form.errors if response.context else ""
    row = kind.model.objects.get(team=team_a, slug="fresh-item")
    assert (row.name, row.version) == ("fresh-item", 1)
    version = DefinitionVersion.objects.get(team=team_a, kind=kind.name, slug="fresh-item")
    assert (version.number, version.content, version.source, version.author) == (1, text, "admin", user)
    assert (team_defs_dir(team_a) / kind.relative_path("fresh-item")).read_text(encoding="utf-8") == text
    # The change page shows status and history.
    page = client.get(admin_url(kind, "change", row.pk))
    body = page.content.decode()
    assert "in sync" in body
    assert row.content_hash in body
    assert reverse("admin:agents_app_definitionversion_change", args=[version.pk]) in body


def test_change_page_shows_the_markdown_as_saved(kind, two_teams, team_a, make_member):
    """The textarea holds exactly the file that was saved (row_files of the row read back)."""
    ours, _ = two_teams
    page = client_for(make_member(team_a, "editor")).get(admin_url(kind, "change", ours.pk))
    assert page.context["adminform"].form["markdown"].value() == sample(kind.name, "alpha-item")


def test_invalid_markdown_names_line_and_field_and_saves_nothing(kind, team_a, make_member):
    prepare_team(kind, team_a)
    files_before = files_under(team_a)
    versions_before = DefinitionVersion.objects.filter(team=team_a).count()
    client = client_for(make_member(team_a, "editor"))
    text, expected = INVALID[kind.name]
    response = client.post(admin_url(kind, "add"), {"team": team_a.pk, **change_data(kind, text)})
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["markdown"]
    assert errors["markdown"][0].startswith(expected), errors["markdown"][0]
    assert expected in response.content.decode()
    assert not kind.model.objects.filter(team=team_a, slug="broken").exists()
    assert DefinitionVersion.objects.filter(team=team_a).count() == versions_before
    assert files_under(team_a) == files_before


def test_invalid_change_keeps_the_saved_definition(kind, two_teams, team_a, make_member):
    ours, _ = two_teams
    client = client_for(make_member(team_a, "editor"))
    text, expected = INVALID[kind.name]
    response = client.post(admin_url(kind, "change", ours.pk), change_data(kind, text))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["markdown"][0].startswith(expected)
    ours.refresh_from_db()
    assert (ours.version, ours.name) == (1, "alpha-item")
    assert (team_defs_dir(team_a) / kind.relative_path(ours.slug)).read_text() == sample(kind.name, "alpha-item")


def test_change_keeps_slug_and_adds_a_version(kind, two_teams, team_a, make_member):
    ours, _ = two_teams
    user = make_member(team_a, "editor")
    client = client_for(user)
    text = sample(kind.name, "alpha-renamed")
    response = client.post(admin_url(kind, "change", ours.pk), change_data(kind, text))
    assert response.status_code == 302
    ours.refresh_from_db()
    assert (ours.slug, ours.name, ours.version) == ("alpha-item", "alpha-renamed", 2)
    assert (team_defs_dir(team_a) / kind.relative_path("alpha-item")).read_text() == text
    versions = DefinitionVersion.objects.filter(team=team_a, kind=kind.name, slug="alpha-item").order_by("number")
    assert [(v.number, v.source, v.author_id) for v in versions] == [(1, "api", None), (2, "admin", user.pk)]
    assert versions[1].content == text
    history = client.get(admin_url(kind, "history", ours.pk))
    assert history.status_code == 200
    assert [v.number for v in history.context["definition_versions"]] == [2, 1]
    body = history.content.decode()
    assert user.username in body
    assert "alpha-renamed" in body  # the expandable markdown of v2


def test_cannot_add_into_another_team(kind, team_a, team_b, make_member):
    prepare_team(kind, team_b)
    client = client_for(make_member(team_a, "editor"))
    response = client.post(
        admin_url(kind, "add"), {"team": team_b.pk, **change_data(kind, sample(kind.name, "smuggled"))}
    )
    assert response.status_code == 200
    assert "team" in response.context["adminform"].form.errors
    assert not kind.model.objects.filter(slug="smuggled").exists()
    assert [c.pk for c in response.context["adminform"].form.fields["team"].queryset] == [team_a.pk]


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_view_only_roles(kind, two_teams, team_a, make_member, role):
    ours, _ = two_teams
    client = client_for(make_member(team_a, role))
    changelist = client.get(admin_url(kind, "changelist"))
    assert changelist.status_code == 200
    assert "alpha-item" in changelist.content.decode()
    assert admin_url(kind, "add") not in changelist.content.decode()
    assert client.get(admin_url(kind, "add")).status_code == 403
    other = change_data(kind, sample(kind.name, "x"))
    assert client.post(admin_url(kind, "add"), {"team": team_a.pk, **other}).status_code == 403
    page = client.get(admin_url(kind, "change", ours.pk))
    assert page.status_code == 200
    body = page.content.decode()
    assert 'name="_save"' not in body
    assert '<textarea name="markdown"' not in body
    assert "You research." in body if kind.name == "agent" else "alpha-item" in body
    assert client.post(admin_url(kind, "change", ours.pk), other).status_code == 403
    assert client.get(admin_url(kind, "delete", ours.pk)).status_code == 403
    assert client.post(admin_url(kind, "delete", ours.pk), {"post": "yes"}).status_code == 403
    ours.refresh_from_db()
    assert (ours.name, ours.version) == ("alpha-item", 1)
    assert not kind.model.objects.filter(slug="x").exists()


def test_role_is_per_team(kind, two_teams, team_a, team_b, make_member):
    """Editor in B but viewer in A: the Django groups allow editing, the role in A does not."""
    ours, _ = two_teams
    user = make_member(team_a, "viewer")
    from mas_core.teams import membership_set

    membership_set(team=team_b, user=user, role="editor")
    client = client_for(user)
    other = change_data(kind, sample(kind.name, "x"))
    assert client.post(admin_url(kind, "change", ours.pk), other).status_code == 403
    response = client.post(admin_url(kind, "add"), {"team": team_a.pk, **other})
    assert "team" in response.context["adminform"].form.errors
    ours.refresh_from_db()
    assert ours.version == 1
    changelist = client.get(admin_url(kind, "changelist"))
    assert {row.slug for row in changelist.context["cl"].result_list} == {"alpha-item", "beta-item"}


def test_delete_goes_through_the_service(kind, two_teams, team_a, make_member):
    ours, _ = two_teams
    path = team_defs_dir(team_a) / kind.relative_path(ours.slug)
    assert path.exists()
    client = client_for(make_member(team_a, "editor"))
    confirm = client.get(admin_url(kind, "delete", ours.pk))
    assert confirm.status_code == 200
    response = client.post(admin_url(kind, "delete", ours.pk), {"post": "yes"})
    assert response.status_code == 302
    assert not kind.model.objects.filter(pk=ours.pk).exists()
    assert not path.exists()
    # Versions are history: they stay.
    assert DefinitionVersion.objects.filter(team=team_a, kind=kind.name, slug=ours.slug).count() == 1


def test_add_again_after_delete(kind, two_teams, team_a, make_member):
    """A deleted definition's versions stay; adding the same name again must still work."""
    ours, _ = two_teams
    client = client_for(make_member(team_a, "editor"))
    assert client.post(admin_url(kind, "delete", ours.pk), {"post": "yes"}).status_code == 302
    text = sample(kind.name, "alpha-item")
    response = client.post(admin_url(kind, "add"), {"team": team_a.pk, **change_data(kind, text)})
    assert response.status_code == 302
    row = kind.model.objects.get(team=team_a, slug="alpha-item")
    latest = DefinitionVersion.objects.filter(team=team_a, kind=kind.name, slug="alpha-item").order_by("-number")[0]
    assert (latest.number, latest.content) == (row.version, text)


def test_bulk_delete_only_touches_own_team(kind, two_teams, team_a, team_b, make_member):
    ours, theirs = two_teams
    client = client_for(make_member(team_a, "editor"))
    response = client.post(
        admin_url(kind, "changelist"),
        {"action": "delete_selected", "_selected_action": [ours.pk, theirs.pk], "post": "yes"},
    )
    assert response.status_code == 302
    assert not kind.model.objects.filter(pk=ours.pk).exists()
    assert not (team_defs_dir(team_a) / kind.relative_path(ours.slug)).exists()
    assert kind.model.objects.filter(pk=theirs.pk).exists()
    assert (team_defs_dir(team_b) / kind.relative_path(theirs.slug)).exists()


def test_superuser_sees_every_team(kind, two_teams):
    admin_user = get_user_model().objects.create_superuser("root", password="pw-for-tests-1")
    client = client_for(admin_user)
    changelist = client.get(admin_url(kind, "changelist"))
    assert {row.slug for row in changelist.context["cl"].result_list} == {"alpha-item", "beta-item"}
    for row in two_teams:
        assert client.get(admin_url(kind, "change", row.pk)).status_code == 200
        assert client.get(admin_url(kind, "history", row.pk)).status_code == 200


def test_team_filter_offers_only_own_teams(kind, two_teams, team_a, make_member, make_team):
    from mas_core.teams import membership_set

    user = make_member(team_a, "editor")
    other = make_team("gamma")
    membership_set(team=other, user=user, role="viewer")
    changelist = client_for(user).get(admin_url(kind, "changelist"))
    specs = changelist.context["cl"].filter_specs
    [team_filter] = [spec for spec in specs if getattr(spec, "parameter_name", "") == "team"]
    assert [label for _value, label in team_filter.lookup_choices] == ["alpha", "gamma"]


def test_skill_references_are_shown_and_kept(team_a, make_member):
    from agents_app.kinds import SKILL

    text = sample("skill", "citing")
    parsed = definition_parse(kind=SKILL, team=team_a, text=text)
    references = {"refs/style.md": "Use APA <style>."}
    row = definition_save(kind=SKILL, team=team_a, parsed=parsed, references=references).row
    client = client_for(make_member(team_a, "editor"))
    body = client.get(admin_url(SKILL, "change", row.pk)).content.decode()
    assert "refs/style.md" in body
    assert "Use APA &lt;style&gt;." in body
    assert 'name="references"' not in body
    edited = text.replace("Always cite.", "Always cite, with pages.")
    assert client.post(admin_url(SKILL, "change", row.pk), change_data(SKILL, edited)).status_code == 302
    row.refresh_from_db()
    assert row.references == {"refs/style.md": "Use APA <style>."}
    folder = team_defs_dir(team_a) / "skills" / "citing"
    assert (folder / "SKILL.md").read_text() == edited
    assert (folder / "refs" / "style.md").read_text() == "Use APA <style>."


def test_provider_models_are_a_read_only_inline(team_a, make_member):
    from agents_app.kinds import PROVIDER

    row = save_definition(PROVIDER, team_a, sample("provider", "local"))
    client = client_for(make_member(team_a, "editor"))
    page = client.get(admin_url(PROVIDER, "change", row.pk))
    [inline] = page.context["inline_admin_formsets"]
    assert [form.original.name for form in inline] == ["llama3"]
    assert not inline.has_add_permission and not inline.has_change_permission and not inline.has_delete_permission
    body = page.content.decode()
    assert "llama3" in body and 'name="models-0-name"' not in body
    # The models follow the markdown.
    edited = sample("provider", "local").replace("llama3", "qwen2")
    assert client.post(admin_url(PROVIDER, "change", row.pk), change_data(PROVIDER, edited)).status_code == 302
    assert list(row.models.values_list("name", "tier")) == [("qwen2", "small")]


def test_oversized_markdown_is_refused(settings, team_a, make_member):
    settings.MAS_MAX_DEFINITION_BYTES = 200
    client = client_for(make_member(team_a, "editor"))
    text = sample("agent", "big").replace("You research.", "x" * 300)
    response = client.post(admin_url(AGENT, "add"), {"team": team_a.pk, "markdown": text})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["markdown"][0].startswith("The file is ")
    assert not AGENT.model.objects.exists()


HOSTILE = [
    ("---\nname: deep\nk: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n---\n",
     "Line 3: lists and mappings are nested more than 32 deep (limit MAS_YAML_MAX_DEPTH)"),
    ("---\nname: deep\nk: " + "[" * 5000 + "\n---\n",
     "Line 3: lists and mappings are nested more than 32 deep (limit MAS_YAML_MAX_DEPTH)"),
    ("---\nname: deep\na0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
     + "".join(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 9)) + "---\n",
     "Line 7: the alias *a3 repeats 7381 keys and values, making in all more than 10000 keys and values "
     "(limit MAS_YAML_MAX_NODES)"),
]


@pytest.mark.parametrize("text, expected", HOSTILE, ids=["3000-flow-maps", "5000-brackets", "alias-bomb"])
def test_hostile_yaml_is_a_form_error_not_a_500(kind, team_a, make_member, text, expected):
    prepare_team(kind, team_a)
    files_before = files_under(team_a)
    versions_before = DefinitionVersion.objects.filter(team=team_a).count()
    response = post_add(client_for(make_member(team_a, "editor")), kind, team_a, text)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"markdown": [expected]}
    assert not kind.model.objects.filter(team=team_a, slug="deep").exists()
    assert DefinitionVersion.objects.filter(team=team_a).count() == versions_before
    assert files_under(team_a) == files_before


def test_duplicate_name_in_team_is_a_form_error_but_free_in_another(kind, two_teams, team_a, make_member):
    ours, theirs = two_teams
    client = client_for(make_member(team_a, "editor"))
    clash = post_add(client, kind, team_a, sample(kind.name, "alpha-item"))
    assert clash.status_code == 200
    assert clash.context["adminform"].form.errors["markdown"][0].startswith("Field name: a ")
    ours.refresh_from_db()
    assert ours.version == 1
    # Team B's names mean nothing in team A.
    free = post_add(client, kind, team_a, sample(kind.name, "beta-item"))
    assert free.status_code == 302
    assert kind.model.objects.filter(slug="beta-item").count() == 2
    theirs.refresh_from_db()
    assert theirs.version == 1
