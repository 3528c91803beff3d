"""Authentication: bearer tokens, browser sessions (with CSRF and X-MAS-Team), and 401s."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from agents_app.models import ApiToken, Membership
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/api/me", "/api/agents", "/api/workflows/x", "/api/mcp-servers/x/markdown"])
def test_no_credentials_is_401_json(path):
    response = Client().get(path)
    assert response.status_code == 401
    assert response.json() == {"detail": "Unauthorized"}
    assert response["WWW-Authenticate"] == 'Bearer realm="mas"'


def test_unauthenticated_write_is_401_even_with_csrf_checks():
    response = Client(enforce_csrf_checks=True).post("/api/agents", {"name": "x"}, content_type="application/json")
    assert response.status_code == 401


@pytest.mark.parametrize(
    "header",
    ["Bearer nope", "Bearer mas_" + "x" * 43, "Bearer ", "Token abc", "Basic dXNlcjpwYXNz", "Bearer " + "mas_" * 100],
)
def test_bad_tokens_are_401(header):
    assert Client().get("/api/me", HTTP_AUTHORIZATION=header).status_code == 401


def test_revoked_token_and_former_member_are_401(team_a, make_member, make_token):
    user = make_member(team_a, "editor")
    token = make_token(team_a, user)
    api = ApiClient(token)
    assert api.get("/api/me").status_code == 200

    ApiToken.objects.filter(user=user).update(revoked_at=timezone.now())
    assert api.get("/api/me").status_code == 401

    fresh = ApiClient(make_token(team_a, user))
    Membership.objects.filter(user=user).delete()
    assert fresh.get("/api/me").status_code == 401


def test_token_of_a_demoted_member_stops_working_above_the_new_role(team_a, make_member, make_token):
    from mas_core.teams import membership_set

    user = make_member(team_a, "editor")
    api = ApiClient(make_token(team_a, user))  # role editor, from the membership
    membership_set(team=team_a, user=user, role="viewer")
    assert api.get("/api/me").status_code == 401


def test_token_header_ignores_x_mas_team(team_a, team_b, make_member, make_token):
    user = make_member(team_a, "editor")
    api = ApiClient(make_token(team_a, user))
    assert api.get("/api/me", HTTP_X_MAS_TEAM="beta").json()["team"]["slug"] == "alpha"


def test_session_with_one_team(team_a, make_member):
    user = make_member(team_a, "editor")
    client = Client()
    client.force_login(user)
    me = client.get("/api/me")
    assert me.status_code == 200
    assert (me.json()["team"]["slug"], me.json()["role"], me.json()["auth"]) == ("alpha", "editor", "session")


def test_session_with_several_teams_needs_the_header(team_a, team_b, make_member):
    from mas_core.teams import membership_set

    user = make_member(team_a, "viewer")
    membership_set(team=team_b, user=user, role="editor")
    client = Client()
    client.force_login(user)

    missing = client.get("/api/me")
    assert missing.status_code == 400
    assert missing.json() == {"detail": "you are in several teams (alpha, beta): name one in the X-MAS-Team header"}
    assert client.get("/api/me", HTTP_X_MAS_TEAM="alpha").json()["role"] == "viewer"
    assert client.get("/api/me", HTTP_X_MAS_TEAM="beta").json()["role"] == "editor"
    assert client.get("/api/me", HTTP_X_MAS_TEAM="gamma").status_code == 404


def test_session_without_a_team_is_403(db):
    from mas_core.teams import user_create

    client = Client()
    client.force_login(user_create(username="loner", password="pw-for-tests-1"))
    assert client.get("/api/me").json() == {"detail": "you are not a member of any team"}


def test_superuser_session_may_pick_any_team(team_a, team_b):
    from django.contrib.auth import get_user_model

    team_b.stdio_mcp_allowed = True  # the operator's grant: stdio MCP servers
    team_b.save(update_fields=["stdio_mcp_allowed"])
    root = get_user_model().objects.create_superuser("root", "root@example.com", "pw-for-tests-1")
    client = Client()
    client.force_login(root)
    me = client.get("/api/me", HTTP_X_MAS_TEAM="beta")
    assert (me.json()["team"]["slug"], me.json()["role"], me.json()["can_manage_stdio"]) == ("beta", "admin", True)


def test_session_writes_need_the_csrf_token(team_a, make_member):
    user = make_member(team_a, "editor")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)

    refused = client.post("/api/agents", {"name": "Scout"}, content_type="application/json")
    assert refused.status_code == 403
    assert refused.json()["detail"].startswith("CSRF check failed")
    assert client.get("/api/agents").json() == []  # safe methods need none

    token = "k" * 32  # what the csrftoken cookie of a page would hold
    client.cookies["csrftoken"] = token
    accepted = client.post("/api/agents", {"name": "Scout"}, content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert accepted.status_code == 201, accepted.json()


def test_bearer_requests_need_no_csrf_token(team_a, make_member, make_token):
    user = make_member(team_a, "editor")
    client = Client(enforce_csrf_checks=True)
    response = client.post(
        "/api/agents",
        {"name": "Scout"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {make_token(team_a, user)}",
    )
    assert response.status_code == 201


def test_openapi_and_docs_are_public():
    schema = Client().get("/api/openapi.json")
    assert schema.status_code == 200
    assert schema.json()["info"]["title"] == "MAS API"
    # Tokens are the documented way in; the session is the browser's own (no "sessionid" field in Authorize).
    assert set(schema.json()["components"]["securitySchemes"]) == {"TokenAuth"}
    assert "SessionTeamAuth" not in schema.content.decode()
    docs = Client().get("/api/docs")
    assert docs.status_code == 200
    assert b"openapi.json" in docs.content
    assert b'<meta name="viewport" content="width=device-width, initial-scale=1">' in docs.content
