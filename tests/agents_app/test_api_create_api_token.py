"""`manage.py create_api_token`: the token is printed once, works, and only its hash is stored."""

from __future__ import annotations

import hashlib
import io

import pytest
from django.core.management import CommandError, call_command

from agents_app.models import ApiToken
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("create_api_token", *args, stdout=out)
    return out.getvalue()


def test_prints_a_working_token_once_and_stores_only_its_hash(team_a, make_member):
    user = make_member(team_a, "editor", username="alice")

    output = run("alice", "--team", "alpha", "--name", "ci")

    lines = output.strip().splitlines()
    token = lines[-1]
    assert token.startswith("mas_") and len(token) > 40
    assert output.count(token) == 1
    assert lines[:-1] == [
        f"API token for alice in team alpha (role editor, starts {token[:12]}). It is shown only now; store it safely:"
    ]
    row = ApiToken.objects.get(user=user)
    assert (row.team, row.role, row.name, row.prefix) == (team_a, "editor", "ci", token[:12])
    assert row.token_hash == hashlib.sha256(token.encode()).hexdigest()
    stored = [str(value) for value in ApiToken.objects.values_list().get(pk=row.pk)]
    assert token not in stored

    me = ApiClient(token).get("/api/me")
    assert me.status_code == 200
    assert (me.json()["user"]["username"], me.json()["team"]["slug"], me.json()["role"]) == ("alice", "alpha", "editor")


def test_a_lower_role_can_be_asked_for(team_a, make_member):
    make_member(team_a, "admin", username="bob")
    token = run("bob", "--team", "alpha", "--role", "viewer").strip().splitlines()[-1]
    api = ApiClient(token)
    assert api.get("/api/me").json()["role"] == "viewer"
    assert api.post("/api/agents", {"name": "X"}).status_code == 403


@pytest.mark.parametrize(
    "args, message",
    [
        (("carol", "--team", "beta"), "carol is not a member of team beta"),
        (("nobody", "--team", "alpha"), "no user 'nobody'"),
        (("carol", "--team", "gamma"), "no team 'gamma'"),
        (("carol", "--team", "alpha", "--role", "admin"), "role admin exceeds carol's role viewer in alpha"),
    ],
)
def test_errors_are_clear_and_issue_nothing(team_a, team_b, make_member, args, message):
    make_member(team_a, "viewer", username="carol")
    with pytest.raises(CommandError) as raised:
        run(*args)
    assert message in str(raised.value)
    assert not ApiToken.objects.exists()


def test_an_unknown_role_is_refused_by_the_parser(team_a, make_member):
    make_member(team_a, "viewer", username="dave")
    with pytest.raises(CommandError, match="invalid choice: 'root'"):
        run("dave", "--team", "alpha", "--role", "root")
