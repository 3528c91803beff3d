"""Rate limits: failed token authentications per address, run starts per team — counted in Redis."""

import uuid

import pytest

from agents_app.models import Run
from tests.runs import agent

pytestmark = [pytest.mark.django_db]


def address() -> str:
    """A client address of this test alone (the counters live in Redis for a minute)."""
    return f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"


def test_guessing_tokens_is_stopped_after_ten_failures_a_minute(team_a, api_for, settings):
    settings.MAS_AUTH_FAILURES_PER_MIN = 10
    good = api_for(team_a, "viewer")
    guesser, other = address(), address()
    for _ in range(10):
        response = good.get("/api/me", HTTP_AUTHORIZATION="Bearer mas_wrong", REMOTE_ADDR=guesser)
        assert response.status_code == 401
    refused = good.get("/api/me", HTTP_AUTHORIZATION="Bearer mas_wrong", REMOTE_ADDR=guesser)
    assert refused.status_code == 429
    assert refused.json()["detail"].startswith(
        "too many failed token authentications from your address (10 a minute); retry in ")
    # Even a right token from that address waits out the minute; other addresses are not affected.
    assert good.get("/api/me", REMOTE_ADDR=guesser).status_code == 429
    assert good.get("/api/me", REMOTE_ADDR=other).status_code == 200
    assert good.get("/api/me", HTTP_AUTHORIZATION="Bearer mas_wrong", REMOTE_ADDR=other).status_code == 401


def test_successful_requests_never_count(team_a, api_for, settings):
    settings.MAS_AUTH_FAILURES_PER_MIN = 3
    client, where = api_for(team_a, "viewer"), address()
    for _ in range(20):
        assert client.get("/api/me", REMOTE_ADDR=where).status_code == 200


def test_run_starts_are_limited_per_team(team_a, team_b, api_for, settings, monkeypatch):
    from agents_app.tasks import execute_activation

    monkeypatch.setattr(execute_activation, "delay", lambda activation_id: None)
    settings.MAS_RUNS_PER_MIN = 3
    for team in (team_a, team_b):
        agent(team, "Lead")
    a, b = api_for(team_a, "operator"), api_for(team_b, "operator")
    body = {"agent": "lead", "input": "x", "script": {"lead": [{"text": "-"}]}}
    assert [a.post("/api/runs", body).status_code for _ in range(3)] == [201, 201, 201]
    refused = a.post("/api/runs", body)
    assert refused.status_code == 429
    assert refused.json()["detail"].startswith("team alpha may start 3 runs a minute; retry in ")
    assert a.post("/api/orchestrate", {"planner": "lead", "task": "x"}).status_code == 429
    assert b.post("/api/runs", body).status_code == 201  # another team has its own count
    assert Run.objects.filter(team=team_a).count() == 3
