"""The API docs' "Try it out" works for a user in two teams: X-MAS-Team is a header parameter of every operation."""

from __future__ import annotations

import pytest
from django.test import Client

from mas_core.teams import membership_set

pytestmark = pytest.mark.django_db


def test_every_operation_a_session_may_call_names_the_team_header():
    schema = Client().get("/api/openapi.json").json()
    # Every operation that needs a token may be called with a session too (mas_core.api_auth.api_auth), which is
    # not a documented scheme (mas_project.api.MasNinjaAPI).
    with_session = [(path, method, op) for path, ops in schema["paths"].items() for method, op in ops.items()
                    if {"TokenAuth": []} in op.get("security", [])]
    assert len(with_session) > 50
    assert all(op.get("security") in (None, [{"TokenAuth": []}]) for ops in schema["paths"].values()
               for op in ops.values())
    for path, method, op in with_session:
        headers = [p for p in op.get("parameters", []) if p["in"] == "header" and p["name"] == "X-MAS-Team"]
        assert len(headers) == 1, (path, method)
        assert headers[0]["required"] is False
    health = schema["paths"]["/api/health"]["get"]
    assert "X-MAS-Team" not in {p["name"] for p in health.get("parameters", [])}  # needs no sign-in


def test_what_try_it_out_sends_picks_the_team(team_a, team_b, make_member):
    from agents_app.kinds import AGENT
    from mas_core.definitions.services import definition_parse, definition_save

    for team, name in ((team_a, "Alpha agent"), (team_b, "Beta agent")):
        definition_save(kind=AGENT, team=team, parsed=definition_parse(kind=AGENT, team=team,
                                                                       text=f"---\nname: {name}\n---\n"))
    user = make_member(team_a, "viewer")
    membership_set(team=team_b, user=user, role="viewer")
    browser = Client()
    browser.force_login(user)
    without = browser.get("/api/agents")
    assert without.status_code == 400
    assert without.json() == {"detail": "you are in several teams (alpha, beta): name one in the X-MAS-Team header"}
    assert [a["slug"] for a in browser.get("/api/agents", headers={"X-MAS-Team": "beta"}).json()] == ["beta-agent"]
    assert [a["slug"] for a in browser.get("/api/agents", headers={"X-MAS-Team": "alpha"}).json()] == ["alpha-agent"]
