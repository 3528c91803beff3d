"""Team isolation on every definition endpoint: another team's object is a 404, never a 403 or a 200.

Team B owns a definition with slug S; a token of team A (an admin, so no
role stands in the way) tries every endpoint on S. Nothing of B's is
revealed or changed, and A creating its own S leaves B's alone.
"""

from __future__ import annotations

import pytest
from django.test import Client

from mas_core.definitions.storage import team_defs_dir
from agents_app.models import DefinitionVersion
from tests.agents_app.test_api_crud import CASE_IDS, CASES, create, file_of, prepare

pytestmark = pytest.mark.django_db


def endpoints(case):
    """(method, path suffix, body, content type) of every endpoint that takes a slug."""
    markdown = f"---\nname: {case.payload['name']}\n---\n"
    return [
        ("get", "", None, None),
        ("put", "", case.replace, "application/json"),
        ("patch", "", {"description": "hijacked"}, "application/json"),
        ("delete", "", None, None),
        ("get", "/versions", None, None),
        ("get", "/versions/1", None, None),
        ("get", "/markdown", None, None),
        ("put", "/markdown", markdown, "text/markdown"),
        ("put", "/markdown", {"markdown": markdown}, "application/json"),
    ]


def call(api, method, path, body, content_type):
    if content_type:
        return getattr(api, method)(path, body, content_type=content_type)
    return getattr(api, method)(path)


def snapshot(case, team):
    row = case.kind.model.objects.get(team=team, slug=case.slug)
    versions = list(
        DefinitionVersion.objects.filter(team=team, kind=case.kind.name, slug=case.slug).values_list("number", "content")
    )
    return (row.pk, row.version, row.spec, row.body, row.updated_at), versions, file_of(case, team).read_bytes()


@pytest.fixture
def b_owns(team_a, team_b, api_for):
    """Returns (case → api of team A); team B holds the case's definition."""

    def setup(case):
        prepare(case, team_a)
        prepare(case, team_b)
        create(api_for(team_b, "editor"), case)
        return api_for(team_a, "admin")

    return setup


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_every_endpoint_answers_404_for_another_teams_slug(case, team_a, team_b, b_owns):
    api_a = b_owns(case)
    before = snapshot(case, team_b)
    url = f"/api/{case.plural}/{case.slug}"

    for method, suffix, body, content_type in endpoints(case):
        response = call(api_a, method, url + suffix, body, content_type)
        assert response.status_code == 404, (method, suffix, response.status_code, response.content)
        # Word for word what a slug that exists nowhere gets: nothing to tell them apart.
        nothing = call(api_a, method, f"/api/{case.plural}/no-such-slug{suffix}", body, content_type)
        assert nothing.status_code == 404
        assert response.json()["detail"].replace(case.slug, "X") == nothing.json()["detail"].replace("no-such-slug", "X")

    assert snapshot(case, team_b) == before
    assert not case.kind.model.objects.filter(team=team_a).exists()
    assert not DefinitionVersion.objects.filter(team=team_a, kind=case.kind.name).exists()
    assert not file_of(case, team_a).exists()


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_list_never_shows_another_teams_rows(case, team_a, team_b, b_owns, api_for):
    api_a = b_owns(case)
    assert api_a.get(f"/api/{case.plural}").json() == []
    api_b = api_for(team_b, "viewer")
    assert [item["slug"] for item in api_b.get(f"/api/{case.plural}").json()] == [case.slug]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_creating_the_same_slug_in_another_team_leaves_it_alone(case, team_a, team_b, b_owns, api_for):
    api_a = b_owns(case)
    before = snapshot(case, team_b)

    mine = api_a.post(f"/api/{case.plural}", {**case.payload, "description": "team A's own"})
    assert mine.status_code == 201, mine.json()
    assert (mine.json()["slug"], mine.json()["version"], mine.json()["description"]) == (case.slug, 1, "team A's own")
    assert api_a.patch(f"/api/{case.plural}/{case.slug}", case.patch).json()["version"] == 2
    assert api_a.delete(f"/api/{case.plural}/{case.slug}").status_code == 200

    assert snapshot(case, team_b) == before
    assert team_defs_dir(team_a) != team_defs_dir(team_b)
    theirs = api_for(team_b, "viewer").get(f"/api/{case.plural}/{case.slug}")
    assert theirs.status_code == 200
    assert theirs.json()["description"] == case.payload.get("description", "")


def test_a_session_user_naming_another_team_gets_404(team_a, team_b, make_member, api_for):
    create(api_for(team_b, "editor"), CASES[0])
    user = make_member(team_a, "admin")
    client = Client()
    client.force_login(user)
    for headers in ({"HTTP_X_MAS_TEAM": "beta"}, {"HTTP_X_MAS_TEAM": "no-such-team"}):
        assert client.get("/api/agents", **headers).status_code == 404
        assert client.get("/api/agents/researcher-x", **headers).status_code == 404
    assert client.get("/api/agents/researcher-x").status_code == 404
    assert client.get("/api/agents").json() == []
