"""The live monitor's websockets, through the real ASGI application, Redis channel layer and database."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import transaction
from django.test import Client

from agents_app import consumers
from agents_app.execution.eventlog import event_append
from agents_app.models import Event, Run
from mas_project.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


def make_run(team) -> Run:
    return Run.objects.create(team=team, agent="lead", input="x")


def append(run, type, n=1, **data):
    with transaction.atomic():
        return [event_append(run_id=run.id, type=type, agent="lead", data={"i": i, **data})["seq"] for i in range(n)]


def quietly_append(run, type, n=1):
    """Commit events without pushing them (as if their push were lost)."""
    seqs = []
    for i in range(n):
        run.refresh_from_db()
        seq = run.next_seq + 1
        Event.objects.create(run=run, seq=seq, type=type, agent="lead", data={"i": i})
        Run.objects.filter(pk=run.pk).update(next_seq=seq)
        seqs.append(seq)
    return seqs


def bearer(token):
    return [(b"authorization", f"Bearer {token}".encode())]


def cookie_headers(user, origin="http://testserver"):
    client = Client()
    client.force_login(user)
    headers = [(b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())]
    return headers + ([(b"origin", origin.encode())] if origin else [])


async def messages_until(communicator, predicate, *, limit=5000, timeout=5):
    received = []
    while len(received) < limit:
        message = json.loads(await communicator.receive_from(timeout=timeout))
        received.append(message)
        if predicate(message):
            return received
    raise AssertionError("predicate never held")


def seqs_of(messages):
    return [m["event"]["seq"] for m in messages if m["message"] == "event"]


@pytest.fixture
def member(team_a, make_member, make_token):
    user = make_member(team_a, role="viewer")
    return user, make_token(user=user, team=team_a, role="viewer")


def run_ws(path, headers):
    return WebsocketCommunicator(application, path, headers=headers)


# -- authentication and isolation --------------------------------------------------------------


def test_a_socket_without_credentials_is_closed_4401(team_a):
    run = make_run(team_a)

    async def go():
        communicator = run_ws(f"/ws/runs/{run.id}/", [])
        connected, _ = await communicator.connect()
        assert connected
        assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}

    async_to_sync(go)()


def test_a_revoked_or_wrong_token_is_4401_and_another_teams_run_is_4404(team_a, team_b, member):
    _, token = member
    theirs = make_run(team_b)
    append(theirs, "run_start")

    async def close_code(path, headers):
        communicator = run_ws(path, headers)
        await communicator.connect()
        output = await communicator.receive_output(timeout=5)
        await communicator.disconnect()
        return output

    async def go():
        assert await close_code(f"/ws/runs/{theirs.id}/", bearer("mas_nottoken")) == {
            "type": "websocket.close", "code": 4401}
        # Another team's run and a run that does not exist look the same.
        assert await close_code(f"/ws/runs/{theirs.id}/", bearer(token)) == {"type": "websocket.close", "code": 4404}
        assert await close_code("/ws/runs/not-a-uuid/", bearer(token)) == {"type": "websocket.close", "code": 4404}

    async_to_sync(go)()


def test_a_session_cookie_counts_only_from_our_own_origin(team_a, member):
    user, _ = member
    run = make_run(team_a)
    append(run, "run_start")

    async def go():
        own = run_ws(f"/ws/runs/{run.id}/", await sync_to_async(cookie_headers)(user))
        await own.connect()
        messages = await messages_until(own, lambda m: m["message"] == "replayed")
        assert seqs_of(messages) == [1] and messages[-1] == {"message": "replayed", "last_seq": 1}
        await own.disconnect()
        for origin in ("http://evil.example", None):
            foreign = run_ws(f"/ws/runs/{run.id}/", await sync_to_async(cookie_headers)(user, origin))
            await foreign.connect()
            assert await foreign.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}

    async_to_sync(go)()


# -- replay, live, gaps, reconnect -------------------------------------------------------------


def test_replay_then_live_loses_nothing_committed_during_the_replay(team_a, member, monkeypatch):
    _, token = member
    run = make_run(team_a)
    append(run, "stream_chunk", 1200)  # three pages of replay
    reads = []
    real_read = consumers._events_after

    def read_while_the_kernel_writes(run_id, after, limit):
        page = real_read(run_id, after, limit)
        reads.append(after)
        if len(reads) == 1:
            # Committed (and pushed) after the consumer joined the group, before the replay ends.
            append(run, "tool_call", 3)
        return page

    monkeypatch.setattr(consumers, "_events_after", read_while_the_kernel_writes)

    async def go():
        communicator = run_ws(f"/ws/runs/{run.id}/", bearer(token))
        await communicator.connect()
        messages = await messages_until(communicator, lambda m: m["message"] == "replayed")
        assert messages[-1] == {"message": "replayed", "last_seq": 1203}
        # The live copies of 1201..1203 arrive after the replay and are dropped.
        await sync_to_async(append)(run, "llm_response", 1)
        messages += await messages_until(communicator, lambda m: m.get("event", {}).get("seq") == 1204)
        await communicator.disconnect()
        return messages

    messages = async_to_sync(go)()
    assert seqs_of(messages) == list(range(1, 1205))
    assert reads == [0, 500, 1000]
    assert [m["event"]["type"] for m in messages if m["message"] == "event"][1200:] == [
        "tool_call", "tool_call", "tool_call", "llm_response"]


def test_a_live_message_after_a_lost_push_is_preceded_by_the_missing_events(team_a, member):
    _, token = member
    run = make_run(team_a)
    append(run, "run_start")

    async def go():
        communicator = run_ws(f"/ws/runs/{run.id}/", bearer(token))
        await communicator.connect()
        await messages_until(communicator, lambda m: m["message"] == "replayed")
        await sync_to_async(quietly_append)(run, "tool_result", 2)  # seq 2, 3: never pushed
        await sync_to_async(append)(run, "session_end")  # seq 4, pushed
        messages = await messages_until(communicator, lambda m: m.get("event", {}).get("seq") == 4)
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()
        return messages

    messages = async_to_sync(go)()
    assert [(m["event"]["seq"], m["event"]["type"]) for m in messages] == [
        (2, "tool_result"), (3, "tool_result"), (4, "session_end")]


def test_reconnecting_with_after_resumes_where_the_client_stopped(team_a, member):
    _, token = member
    run = make_run(team_a)
    append(run, "llm_request", 5)

    async def go():
        communicator = run_ws(f"/ws/runs/{run.id}/?after=3", bearer(token))
        await communicator.connect()
        messages = await messages_until(communicator, lambda m: m["message"] == "replayed")
        await communicator.disconnect()
        bad = run_ws(f"/ws/runs/{run.id}/?after=three", bearer(token))
        await bad.connect()
        closed = await bad.receive_output(timeout=5)
        return messages, closed

    messages, closed = async_to_sync(go)()
    assert seqs_of(messages) == [4, 5]
    assert messages[0]["event"] == {
        "run": str(run.id), "seq": 4, "type": "llm_request", "agent": "lead", "session": None,
        "data": {"i": 3}, "created_at": messages[0]["event"]["created_at"]}
    assert closed == {"type": "websocket.close", "code": 4400}


def test_the_ping_catches_up_events_whose_push_was_lost(team_a, member, settings):
    settings.MAS_WS_PING_S = 0.3
    _, token = member
    run = make_run(team_a)

    async def go():
        communicator = run_ws(f"/ws/runs/{run.id}/", bearer(token))
        await communicator.connect()
        await messages_until(communicator, lambda m: m["message"] == "replayed")
        await sync_to_async(quietly_append)(run, "run_complete")
        messages = await messages_until(communicator, lambda m: m["message"] == "event")
        await communicator.disconnect()
        return messages

    messages = async_to_sync(go)()
    assert messages[0] == {"message": "ping", "last_seq": 0}
    assert [(m["event"]["seq"], m["event"]["type"]) for m in messages if m["message"] == "event"] == [
        (1, "run_complete")]


# -- the team's run list -------------------------------------------------------------------------


def test_the_run_list_hears_of_its_own_teams_runs_only(team_a, team_b, member):
    _, token = member
    ours, theirs = make_run(team_a), make_run(team_b)

    async def go():
        communicator = run_ws("/ws/runs/", bearer(token))
        await communicator.connect()
        assert json.loads(await communicator.receive_from(timeout=5)) == {"message": "subscribed",
                                                                            "team": team_a.id}
        await sync_to_async(append)(theirs, "run_start")
        await sync_to_async(append)(ours, "run_start")
        message = json.loads(await communicator.receive_from(timeout=5))
        assert await communicator.receive_nothing(timeout=0.6)
        await communicator.disconnect()
        return message

    message = async_to_sync(go)()
    assert message["message"] == "run"
    assert (message["run"]["id"], message["run"]["status"], message["run"]["agent"]) == (str(ours.id), "queued",
                                                                                          "lead")
    assert message["run"]["totals"] == {"prompt_tokens": 0, "completion_tokens": 0, "cost_usd": "0.000000",
                                        "duration_s": None}


def test_the_run_list_needs_a_team_the_user_is_in(team_a, team_b, make_member):
    user = make_member(team_a, role="viewer")
    from agents_app.services import membership_set

    membership_set(team=team_b, user=user, role="viewer")

    async def code(path):
        communicator = run_ws(path, await sync_to_async(cookie_headers)(user))
        await communicator.connect()
        output = json.loads((await communicator.receive_output(timeout=5)).get("text", "null") or "null")
        return output

    async def go():
        # Two teams and none named: which list? Refused.
        ambiguous = run_ws("/ws/runs/", await sync_to_async(cookie_headers)(user))
        await ambiguous.connect()
        assert await ambiguous.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}
        named = run_ws(f"/ws/runs/?team={team_b.slug}", await sync_to_async(cookie_headers)(user))
        await named.connect()
        assert json.loads(await named.receive_from(timeout=5)) == {"message": "subscribed", "team": team_b.id}
        await named.disconnect()
        stranger = run_ws("/ws/runs/?team=nobody", await sync_to_async(cookie_headers)(user))
        await stranger.connect()
        assert await stranger.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}

    async_to_sync(go)()
