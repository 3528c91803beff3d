"""Roles: viewers and operators read, editors and admins write; the token's role is what counts."""

from __future__ import annotations

import pytest

from agents_app.models import DefinitionVersion
from tests.agents_app.test_api_crud import CASE_IDS, CASES, create, file_of, prepare

pytestmark = pytest.mark.django_db


def writes(case):
    url = f"/api/{case.plural}"
    markdown = f"---\nname: {case.payload['name']}\n---\n"
    return [
        ("post", url, {**case.payload, "name": "Other"}, "application/json"),
        ("put", f"{url}/{case.slug}", case.replace, "application/json"),
        ("patch", f"{url}/{case.slug}", case.patch, "application/json"),
        ("put", f"{url}/{case.slug}/markdown", markdown, "text/markdown"),
        ("delete", f"{url}/{case.slug}", None, None),
    ]


def reads(case):
    url = f"/api/{case.plural}"
    return [url, f"{url}/{case.slug}", f"{url}/{case.slug}/versions", f"{url}/{case.slug}/versions/1",
            f"{url}/{case.slug}/markdown"]


def call(api, method, path, body, content_type):
    if content_type:
        return getattr(api, method)(path, body, content_type=content_type)
    return getattr(api, method)(path)


@pytest.mark.parametrize("role", ["viewer", "operator"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_viewers_and_operators_read_but_do_not_write(case, role, team_a, api_for):
    prepare(case, team_a)
    create(api_for(team_a, "admin"), case)
    before = file_of(case, team_a).read_bytes()
    api = api_for(team_a, role)

    for path in reads(case):
        assert api.get(path).status_code == 200, path
    for method, path, body, content_type in writes(case):
        response = call(api, method, path, body, content_type)
        assert response.status_code == 403, (method, path)
        assert response.json() == {"detail": f"role {role} in team alpha does not allow edit"}

    row = case.kind.model.objects.get(team=team_a)
    assert (row.slug, row.version) == (case.slug, 1)
    assert DefinitionVersion.objects.filter(team=team_a, kind=case.kind.name).count() == 1
    assert file_of(case, team_a).read_bytes() == before


@pytest.mark.parametrize("role", ["editor", "admin"])
def test_editors_and_admins_write(role, team_a, api_for):
    api = api_for(team_a, role)
    create(api, CASES[0])
    for method, path, body, content_type in writes(CASES[0]):
        response = call(api, method, path, body, content_type)
        assert response.status_code in (200, 201), (method, path, response.json())


def test_the_role_is_checked_before_the_body_is_read(team_a, api_for):
    api = api_for(team_a, "viewer")
    assert api.post("/api/agents", "{not json").status_code == 403
    assert api.post("/api/agents", "x" * 3_000_000, content_type="text/plain").status_code == 403


def test_a_token_with_a_lower_role_than_its_user_is_held_to_it(team_a, make_member, make_token):
    from tests.conftest import ApiClient

    editor = make_member(team_a, "editor")
    api = ApiClient(make_token(team_a, editor, role="viewer"))
    assert api.get("/api/agents").status_code == 200
    assert api.post("/api/agents", {"name": "X"}).status_code == 403
    assert api.get("/api/me").json()["role"] == "viewer"


@pytest.mark.parametrize(
    "role, capabilities, stdio",
    [
        ("viewer", ["view"], False),
        ("editor", ["edit", "view"], False),
        ("operator", ["run", "view"], False),
        ("admin", ["edit", "manage", "run", "view"], True),
    ],
)
def test_me_tells_role_and_capabilities(role, capabilities, stdio, team_a, api_for):
    team_a.stdio_mcp_allowed = True  # the operator's grant: stdio MCP servers
    team_a.save(update_fields=["stdio_mcp_allowed"])
    api = api_for(team_a, role)
    response = api.get("/api/me")
    assert response.status_code == 200
    assert response.json() == {
        "user": {"id": api.user.pk, "username": api.user.username},
        "team": {"slug": "alpha", "name": "Alpha"},
        "role": role,
        "capabilities": capabilities,
        "can_manage_stdio": stdio,
        "auth": "token",
    }
