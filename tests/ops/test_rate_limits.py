"""Rate limits: failed token authentications per address (HTTP and websockets), run starts per team — in Redis."""

import json
import re
import secrets
import uuid

import pytest
from asgiref.sync import async_to_sync

from agents_app.models import Run
from mas_project.asgi import application
from tests.sockets import Communicator
from tests.runs import agent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("whole_rate_window")]


def address() -> str:
    """A client address of this test alone (the counters live in Redis for a minute)."""
    return f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"


def retry_in(detail: str) -> str:
    return re.fullmatch(r".*; retry in (\d+) s", detail).group(1)


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
    assert refused["Retry-After"] == retry_in(refused.json()["detail"])
    assert 1 <= int(refused["Retry-After"]) <= 60
    # Other addresses are not affected.
    assert good.get("/api/me", REMOTE_ADDR=other).status_code == 200
    assert good.get("/api/me", HTTP_AUTHORIZATION="Bearer mas_wrong", REMOTE_ADDR=other).status_code == 401


def test_a_valid_token_still_works_from_an_address_past_its_failures(team_a, api_for, settings):
    # Tokens cannot be guessed: refusing good ones would lock out everyone behind the guesser's proxy.
    settings.MAS_AUTH_FAILURES_PER_MIN = 3
    good, where = api_for(team_a, "viewer"), address()
    assert [good.get("/api/me", HTTP_AUTHORIZATION="Bearer mas_wrong", REMOTE_ADDR=where).status_code
            for _ in range(5)] == [401, 401, 401, 429, 429]
    me = good.get("/api/me", REMOTE_ADDR=where)
    assert me.status_code == 200 and me.json()["team"]["slug"] == "alpha"
    # ...and it clears nothing: the next wrong token from there is still refused.
    assert good.get("/api/me", HTTP_AUTHORIZATION="Bearer mas_other", REMOTE_ADDR=where).status_code == 429
    assert good.get("/api/me", REMOTE_ADDR=where).status_code == 200


def socket_first_output(path: str, token: str, where: str) -> dict:
    """Open a monitor websocket from ``where`` with ``token``: the server's first output."""

    async def go():
        headers = [(b"authorization", f"Bearer {token}".encode())]
        communicator = Communicator(application, path, headers=headers)
        communicator.scope["client"] = [where, 40000]
        await communicator.connect()
        output = await communicator.receive_output(timeout=5)
        await communicator.disconnect()
        return output

    return async_to_sync(go)()


def socket_answer(path: str, token: str, where: str) -> str | int:
    """The socket's close code, or the ``message`` of its first message."""
    output = socket_first_output(path, token, where)
    return output["code"] if output["type"] == "websocket.close" else json.loads(output["text"])["message"]


@pytest.mark.django_db(transaction=True)
def test_websocket_tokens_share_the_http_failure_count_and_a_valid_one_still_opens(team_a, api_for, settings):
    settings.MAS_AUTH_FAILURES_PER_MIN = 10
    good, where, other = api_for(team_a, "viewer"), address(), address()
    run = Run.objects.create(team=team_a, agent="lead", input="x")
    paths = [f"/ws/runs/{run.id}/", "/ws/runs/"]
    for _ in range(6):
        assert good.get("/api/me", HTTP_AUTHORIZATION=f"Bearer mas_{secrets.token_urlsafe(32)}",
                        REMOTE_ADDR=where).status_code == 401
    # 30 random tokens at once, as a guesser would: four more failures are answered, then 4429.
    codes = [socket_answer(paths[i % 2], f"mas_{secrets.token_urlsafe(32)}", where) for i in range(30)]
    assert codes == [4401] * 4 + [4429] * 26
    # Locked out over the websocket means locked out over HTTP (one count), with Retry-After.
    refused = good.get("/api/me", HTTP_AUTHORIZATION="Bearer mas_wrong", REMOTE_ADDR=where)
    assert refused.status_code == 429 and 1 <= int(refused["Retry-After"]) <= 60
    # A valid token from that address still opens both sockets (and still reads over HTTP).
    assert [socket_answer(path, good.token, where) for path in paths] == ["replayed", "subscribed"]
    assert good.get("/api/me", REMOTE_ADDR=where).status_code == 200
    assert socket_answer(paths[0], "mas_wrong", where) == 4429
    assert re.fullmatch(r"too many failed token authentications from your address; retry in (\d+) s",
                        socket_first_output(paths[0], "mas_wrong", where)["reason"])
    # Another address has its own count.
    assert socket_answer(paths[0], "mas_wrong", other) == 4401


@pytest.mark.django_db(transaction=True)
def test_an_address_locked_out_over_http_is_locked_out_over_the_websocket(team_a, api_for, settings):
    settings.MAS_AUTH_FAILURES_PER_MIN = 2
    good, where = api_for(team_a, "viewer"), address()
    assert [good.get("/api/me", HTTP_AUTHORIZATION="Bearer mas_wrong", REMOTE_ADDR=where).status_code
            for _ in range(3)] == [401, 401, 429]
    assert socket_answer("/ws/runs/", "mas_wrong", where) == 4429
    assert socket_answer("/ws/runs/", good.token, where) == "subscribed"


def test_successful_requests_never_count(team_a, api_for, settings):
    settings.MAS_AUTH_FAILURES_PER_MIN = 3
    client, where = api_for(team_a, "viewer"), address()
    for _ in range(20):
        assert client.get("/api/me", REMOTE_ADDR=where).status_code == 200


def test_run_starts_are_limited_per_team(team_a, team_b, api_for, settings, unserved):
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
