"""A definition's versions in the admin: paged, any two compared, any one restored as a new version."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents_app.kinds import AGENT

from mas_core.definitions.kinds import KINDS
from mas_core.definitions.services import definition_parse, definition_save, definition_version_diff
from mas_core.definitions.storage import team_defs_dir
from agents_app.models import Agent, DefinitionVersion
from tests.agents_app.test_admin_definitions import admin_url, client_for, prepare_team, sample, save_definition

pytestmark = pytest.mark.django_db


def agent_text(n: int) -> str:
    return f"---\nname: Writer\ndescription: Draft {n}\n---\n\nYou write, take {n}.\n"


@pytest.fixture
def writer(team_a):
    for n in range(1, 13):
        definition_save(kind=AGENT, team=team_a, parsed=definition_parse(kind=AGENT, team=team_a, text=agent_text(n)))
    return Agent.objects.get(team=team_a, slug="writer")


def test_the_page_shows_the_last_ten_versions_and_save_on_top(writer, team_a, make_member):
    client = client_for(make_member(team_a, "editor"))
    page = client.get(admin_url(AGENT, "change", writer.pk)).content.decode()
    shown = [n for n in range(1, 13) if f">v{n}</a>" in page]
    assert shown == list(range(3, 13))
    assert "All 12 versions →" in page and admin_url(AGENT, "history", writer.pk) in page
    # Save buttons above the form as well as below it.
    assert page.count('name="_save"') == 2
    assert page.index('name="_save"') < page.index('name="markdown"')
    restore = reverse("admin:agents_app_agent_restore", args=[writer.pk])
    assert f"{restore}?version=11" in page
    assert f"{restore}?version=12" not in page  # the current one


def test_all_versions_are_paged(writer, team_a, make_member, monkeypatch):
    from mas_core import admin_versions

    monkeypatch.setattr(admin_versions, "VERSIONS_PER_PAGE", 5)
    client = client_for(make_member(team_a, "viewer"))
    first = client.get(admin_url(AGENT, "history", writer.pk))
    assert [v.number for v in first.context["definition_versions"]] == [12, 11, 10, 9, 8]
    last = client.get(admin_url(AGENT, "history", writer.pk), {"vp": 3})
    assert [v.number for v in last.context["definition_versions"]] == [2, 1]
    assert "page 3 of 3 (12 versions)" in last.content.decode()
    # A viewer compares but is offered no restore.
    assert "restore…" not in first.content.decode() and "compare with current" in first.content.decode()


def test_any_two_versions_are_compared(writer, team_a, make_member):
    lines = definition_version_diff(kind=AGENT, team=team_a, slug="writer", old=2, new=5)
    assert [(line.kind, line.text) for line in lines] == [
        ("file", "--- v2"), ("file", "+++ v5"), ("hunk", "@@ -1,6 +1,6 @@"), ("same", " ---"),
        ("same", " name: Writer"), ("del", "-description: Draft 2"), ("add", "+description: Draft 5"), ("same", " ---"),
        ("same", " "), ("del", "-You write, take 2."), ("add", "+You write, take 5."),
    ]
    client = client_for(make_member(team_a, "viewer"))
    url = reverse("admin:agents_app_agent_diff", args=[writer.pk])
    page = client.get(url, {"old": 2, "new": 5}).content.decode()
    assert '<span class="mas-del">-description: Draft 2</span>' in page
    assert '<span class="mas-add">+description: Draft 5</span>' in page
    assert client.get(url, {"old": 2, "new": 99}).status_code == 404
    assert client.get(url, {"old": "x", "new": 5}).status_code == 404
    assert client.get(url).status_code == 404


def test_restore_makes_a_new_version_with_the_old_content(writer, team_a, make_member):
    user = make_member(team_a, "editor")
    client = client_for(user)
    url = reverse("admin:agents_app_agent_restore", args=[writer.pk])
    confirm = client.get(url, {"version": 3})
    assert confirm.status_code == 200
    assert '<span class="mas-add">+description: Draft 3</span>' in confirm.content.decode()
    writer.refresh_from_db()
    assert writer.version == 12  # looking changes nothing

    response = client.post(url, {"version": 3})
    assert response.status_code == 302 and response["Location"] == admin_url(AGENT, "change", writer.pk)
    writer.refresh_from_db()
    assert (writer.version, writer.description, writer.body) == (13, "Draft 3", "You write, take 3.")
    v13 = DefinitionVersion.objects.get(team=team_a, kind="agent", slug="writer", number=13)
    assert (v13.content, v13.source, v13.author_id) == (agent_text(3), "admin", user.pk)
    assert DefinitionVersion.objects.filter(team=team_a, kind="agent", slug="writer").count() == 13
    assert (team_defs_dir(team_a) / "agents" / "writer.md").read_text() == agent_text(3)

    # Restoring what is already current adds nothing.
    again = client.post(url, {"version": 13}, follow=True)
    assert "nothing changed" in again.content.decode()
    assert DefinitionVersion.objects.filter(team=team_a, kind="agent", slug="writer").count() == 13


def test_viewers_and_other_teams_cannot_restore(writer, team_a, team_b, make_member):
    url = reverse("admin:agents_app_agent_restore", args=[writer.pk])
    assert client_for(make_member(team_a, "viewer")).post(url, {"version": 3}).status_code == 403
    assert client_for(make_member(team_b, "admin")).post(url, {"version": 3}).status_code == 404
    assert client_for(make_member(team_a, "editor")).post(url, {"version": "x"}).status_code == 404
    assert client_for(make_member(team_a, "editor")).post(url, {"version": 99}).status_code == 404
    diff = reverse("admin:agents_app_agent_diff", args=[writer.pk])
    assert client_for(make_member(team_b, "admin")).get(diff, {"old": 1, "new": 2}).status_code == 404
    writer.refresh_from_db()
    assert writer.version == 12


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_every_kind_compares_and_restores(kind, team_a, make_member):
    prepare_team(kind, team_a)
    row = save_definition(kind, team_a, sample(kind.name, "first"))
    definition_save(kind=kind, team=team_a, slug=row.slug,
                    parsed=definition_parse(kind=kind, team=team_a, text=sample(kind.name, "second")))
    row.refresh_from_db()
    assert row.version == 2
    client = client_for(make_member(team_a, "admin"))
    opts = kind.model._meta
    diff = reverse(f"admin:{opts.app_label}_{opts.model_name}_diff", args=[row.pk])
    assert client.get(diff, {"old": 1, "new": 2}).status_code == 200
    restore = reverse(f"admin:{opts.app_label}_{opts.model_name}_restore", args=[row.pk])
    assert client.post(restore, {"version": 1}).status_code == 302
    row.refresh_from_db()
    assert row.version == 3
    assert row.content == DefinitionVersion.objects.get(team=team_a, kind=kind.name, slug=row.slug, number=1).content
