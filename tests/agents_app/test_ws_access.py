"""Open monitor sockets follow revocations (issue 23, points 4 and 8).

A revoked token's run socket delivered events for 40 s after the revocation,
and the team socket a run started after it; the same for a removed member or a
lowered role. Now each socket re-checks every ``MAS_WS_ACCESS_CHECK_S`` (1 s)
and the team socket before each batch: closed 4401 within 2 s, nothing after.
Real Channels (Redis layer) and Postgres; the default check period.
"""

from __future__ import annotations

import json
import time

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.contrib.sessions.backends.db import SessionStore

from mas_core.models import ApiToken
from mas_core.teams import api_token_revoke, membership_delete, membership_set
from tests.agents_app.test_consumers import (
    append,
    bearer,
    cookie_headers,
    events_of,
    make_run,
    messages_until,
    run_ws,
    seqs_of,
)

pytestmark = pytest.mark.django_db(transaction=True)

BOUND_S = 2.0  # the bound between a revocation and the socket's close
ACCESS_GONE = "your access to this team ended (token revoked, membership removed or role lowered, or signed out)"


def closed_4401(output) -> bool:
    return output == {"type": "websocket.close", "code": 4401, "reason": ACCESS_GONE}


async def outputs_until_close(communicator, *, timeout=BOUND_S + 3):
    """Everything the socket sends up to and including its close, and the seconds until the close."""
    started = time.monotonic()
    outputs = []
    while True:
        output = await communicator.receive_output(timeout=timeout)
        outputs.append(output)
        if output["type"] == "websocket.close":
            return outputs, time.monotonic() - started


def texts(outputs) -> list[dict]:
    return [json.loads(o["text"]) for o in outputs if o["type"] == "websocket.send"]


def test_a_revoked_tokens_run_socket_closes_4401_within_2s_and_sends_nothing_after(team_a, make_member, make_token):
    user = make_member(team_a, role="viewer")
    token = make_token(team_a, user)
    run = make_run(team_a)
    append(run, "run_start")

    async def go():
        communicator = run_ws(f"/ws/runs/{run.id}/", bearer(token))
        await communicator.connect()
        await messages_until(communicator, lambda m: m["message"] == "replayed")
        await sync_to_async(append)(run, "llm_request")
        assert seqs_of(await messages_until(communicator, lambda m: m["message"] == "events")) == [2]
        await sync_to_async(api_token_revoke)(token=await sync_to_async(ApiToken.objects.get)(user=user))
        outputs, seconds = await outputs_until_close(communicator)
        await sync_to_async(append)(run, "llm_request", 3)  # after the close: never sent
        assert await communicator.receive_nothing(timeout=1.5)
        return outputs, seconds

    outputs, seconds = async_to_sync(go)()
    assert closed_4401(outputs[-1])
    assert seconds < BOUND_S
    assert [m for m in texts(outputs) if m["message"] == "events"] == []  # nothing was committed meanwhile


def test_a_removed_members_team_socket_never_sends_a_run_started_after_the_removal(team_a, make_member):
    user = make_member(team_a, role="viewer")

    async def go():
        communicator = run_ws("/ws/runs/", await sync_to_async(cookie_headers)(user))
        await communicator.connect()
        assert json.loads(await communicator.receive_from(timeout=5)) == {"message": "subscribed", "team": team_a.id}
        before = await sync_to_async(make_run)(team_a)
        await sync_to_async(append)(before, "run_start")
        heard = json.loads(await communicator.receive_from(timeout=5))
        await sync_to_async(membership_delete)(team=team_a, user=user)
        after = await sync_to_async(make_run)(team_a)
        await sync_to_async(append)(after, "run_start")
        outputs, seconds = await outputs_until_close(communicator)
        return before, heard, outputs, seconds

    before, heard, outputs, seconds = async_to_sync(go)()
    assert (heard["message"], heard["run"]["id"]) == ("run", str(before.id))
    assert texts(outputs) == []  # the run started after the removal was not sent
    assert closed_4401(outputs[-1])
    assert seconds < BOUND_S


def test_a_tokens_socket_closes_when_its_members_role_is_lowered_below_the_token(team_a, make_member, make_token):
    user = make_member(team_a, role="operator")
    token = make_token(team_a, user, role="operator")
    run = make_run(team_a)

    async def go():
        communicator = run_ws(f"/ws/runs/{run.id}/", bearer(token))
        await communicator.connect()
        await messages_until(communicator, lambda m: m["message"] == "replayed")
        await sync_to_async(membership_set)(team=team_a, user=user, role="viewer")
        return await outputs_until_close(communicator)

    outputs, seconds = async_to_sync(go)()
    assert closed_4401(outputs[-1]) and seconds < BOUND_S


def test_a_lowered_role_that_may_still_view_keeps_its_session_socket(team_a, make_member):
    user = make_member(team_a, role="admin")
    run = make_run(team_a)

    async def go():
        communicator = run_ws(f"/ws/runs/{run.id}/", await sync_to_async(cookie_headers)(user))
        await communicator.connect()
        await messages_until(communicator, lambda m: m["message"] == "replayed")
        await sync_to_async(membership_set)(team=team_a, user=user, role="viewer")
        assert await communicator.receive_nothing(timeout=BOUND_S + 0.5)  # three checks passed: still open
        await sync_to_async(append)(run, "run_start")
        messages = await messages_until(communicator, lambda m: m["message"] == "events")
        await communicator.disconnect()
        return messages

    assert [e["type"] for e in events_of(async_to_sync(go)())] == ["run_start"]


def test_signing_out_closes_the_sessions_sockets(team_a, make_member):
    user = make_member(team_a, role="viewer")
    run = make_run(team_a)

    async def go():
        headers = await sync_to_async(cookie_headers)(user)
        communicator = run_ws(f"/ws/runs/{run.id}/", headers)
        await communicator.connect()
        await messages_until(communicator, lambda m: m["message"] == "replayed")
        session_key = dict(headers)[b"cookie"].decode().partition("=")[2]
        await sync_to_async(SessionStore(session_key=session_key).delete)()  # what logout() does to it
        return await outputs_until_close(communicator)

    outputs, seconds = async_to_sync(go)()
    assert closed_4401(outputs[-1]) and seconds < BOUND_S


# -- paths and ?after= ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/ws/nothing/", "/ws/runs/a/b/", "/ws/", "/elsewhere"])
def test_a_path_that_names_no_socket_closes_4404(team_a, make_member, make_token, path):
    token = make_token(team_a, make_member(team_a, role="viewer"))

    async def go():
        communicator = run_ws(path, bearer(token))
        connected, _ = await communicator.connect()
        assert connected
        return await communicator.receive_output(timeout=5)

    assert async_to_sync(go)() == {"type": "websocket.close", "code": 4404}


def test_after_beyond_the_runs_last_event_is_refused_4400(team_a, make_member, make_token):
    token = make_token(team_a, make_member(team_a, role="viewer"))
    run = make_run(team_a)
    append(run, "llm_request", 3)

    async def first(path):
        communicator = run_ws(path, bearer(token))
        await communicator.connect()
        output = await communicator.receive_output(timeout=5)
        await communicator.disconnect()
        return output

    assert async_to_sync(first)(f"/ws/runs/{run.id}/?after=4") == {
        "type": "websocket.close", "code": 4400, "reason": "after=4 is beyond this run's last event (3)"}
    at_end = async_to_sync(first)(f"/ws/runs/{run.id}/?after=3")  # nothing missed: accepted
    assert json.loads(at_end["text"]) == {"message": "replayed", "last_seq": 3}
