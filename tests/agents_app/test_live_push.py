"""Live events on Redis pub/sub (issue 24, point 4): what a worker's loop pushes meanwhile goes out in one
round trip, in order; a web process checks its sockets' access once per credential and period.

Real Redis, Postgres and Channels consumers; the spies wrap the real calls.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest
import redis
import redis.asyncio
from asgiref.sync import async_to_sync, sync_to_async
from django.db import transaction

from agents_app import ws_reads
from mas_core import events
from agents_app.execution.store import DatabaseStore, DatabaseWorkspace
from mas_core.eventlog import event_append
from mas_core.events import events_push_async, live_redis_url, run_channel, team_runs_channel
from mas_core.models import ApiToken
from mas_core.teams import api_token_revoke
from tests.agents_app.test_consumers import append, bearer, make_run, messages_until, run_ws

pytestmark = pytest.mark.django_db(transaction=True)


def pushed(run_id, *seqs, type="llm_request"):
    """The arguments of a push of one run's events (their JSON texts)."""
    return str(run_id), [json.dumps({"run": str(run_id), "seq": seq, "type": type, "agent": "lead", "session": None,
                                     "data": {}, "created_at": "2026-11-26T07:00:00+00:00"}) for seq in seqs]


def test_the_channels_carry_the_layers_prefix():
    # Pub/sub channels are global to a Redis server: the tests (each pytest process), the benches and the
    # demo each keep theirs.
    prefix = os.environ["MAS_TEST_CHANNELS_PREFIX"]  # mas_project.settings_test: mas-test-<pytest's pid>
    assert prefix.startswith("mas-test-") and prefix != "mas-test-"
    assert run_channel("r-1") == f"{prefix}:run.r-1"
    assert team_runs_channel(7) == f"{prefix}:team.7.runs"


def test_pushes_made_meanwhile_go_out_in_one_round_trip_in_commit_order(team_a):
    run, other = make_run(team_a), make_run(team_a)

    async def go():
        listener = redis.asyncio.Redis.from_url(live_redis_url())
        pubsub = listener.pubsub()
        await pubsub.subscribe(run_channel(run.id), run_channel(other.id), team_runs_channel(team_a.id))
        for _ in range(3):
            assert (await pubsub.get_message(timeout=5))["type"] == "subscribe"
        await events_push_async(*pushed(run.id, 1))  # the loop's publisher is made
        publisher = events._publishers[id(asyncio.get_running_loop())]
        round_trips = []
        real_round_trip = publisher.round_trip

        async def counted_round_trip(batch):
            round_trips.append([("PUBLISH", channel) for channel, _ in batch])
            return await real_round_trip(batch)

        publisher.round_trip = counted_round_trip
        # Three sessions push at the same moment; the third changes its run's status (the run list hears).
        await asyncio.gather(
            events_push_async(*pushed(run.id, 2)),
            events_push_async(*pushed(other.id, 1, 2)),
            events_push_async(*pushed(run.id, 3, type="run_complete"), team_id=team_a.id),
        )
        received = []
        while len(received) < 5:
            message = await pubsub.get_message(timeout=5)
            received.append((message["channel"].decode(), message["data"].decode()))
        await pubsub.aclose()
        await listener.aclose()
        return round_trips, received

    round_trips, received = async_to_sync(go)()
    channel, other_channel, team = run_channel(run.id), run_channel(other.id), team_runs_channel(team_a.id)
    assert round_trips == [[("PUBLISH", channel), ("PUBLISH", other_channel), ("PUBLISH", channel),
                            ("PUBLISH", team)]]
    assert [(c, [e["seq"] for e in json.loads(d)] if c != team else d) for c, d in received] == [
        (channel, [1]), (channel, [2]), (other_channel, [1, 2]), (channel, [3]), (team, str(run.id))]


def test_a_processs_sockets_are_checked_once_per_credential_and_still_closed_on_revocation(
        team_a, make_member, make_token, monkeypatch, settings):
    settings.MAS_WS_ACCESS_CHECK_S = 0.3
    user = make_member(team_a, role="viewer")
    token, other_token = make_token(team_a, user), make_token(team_a, user)
    run = make_run(team_a)
    append(run, "run_start")
    rounds = []
    real = ws_reads._access_holds_all
    monkeypatch.setattr(ws_reads, "_access_holds_all",
                        lambda checks: rounds.append(sorted(key[1] for key in checks)) or real(checks))

    async def go():
        sockets = [run_ws(f"/ws/runs/{run.id}/", bearer(t)) for t in (token, token, token, other_token)]
        for communicator in sockets:
            await communicator.connect()
            await messages_until(communicator, lambda m: m["message"] == "replayed")
        joined = len(rounds)  # a round while they joined saw only those that had (on a busy machine, one token)
        await asyncio.sleep(1.0)
        before = rounds[joined:]
        await sync_to_async(api_token_revoke)(token=await sync_to_async(
            ApiToken.objects.filter(user=user).order_by("pk").first)())
        closes = [await communicator.receive_output(timeout=2) for communicator in sockets[:3]]
        assert await sockets[3].receive_nothing(timeout=0.5)  # the other token's socket stays
        await sockets[3].disconnect()
        return before, closes

    before, closes = async_to_sync(go)()
    # Four sockets, two tokens: each round checks each token once, all in one thread hop.
    assert len(before) >= 2 and all(checked == sorted([token, other_token]) for checked in before)
    assert [close["code"] for close in closes] == [4401, 4401, 4401]


def test_a_push_after_the_connection_was_cut_goes_out_on_a_new_one(team_a):
    # Redis drops the publisher's connection (a restart, a timeout): the push that finds it gone is lost and
    # logged (the sockets read it back from the database), the next one connects again and is delivered.
    run = make_run(team_a)

    async def go():
        listener = redis.asyncio.Redis.from_url(live_redis_url())
        pubsub = listener.pubsub()
        await pubsub.subscribe(run_channel(run.id))
        assert (await pubsub.get_message(timeout=5))["type"] == "subscribe"
        await events_push_async(*pushed(run.id, 1))
        publisher = events._publishers[id(asyncio.get_running_loop())]
        host, port = publisher.writer.get_extra_info("sockname")[:2]
        assert await listener.client_kill(f"{host}:{port}") is True
        await events_push_async(*pushed(run.id, 2))
        await events_push_async(*pushed(run.id, 3))
        received = []
        while (message := await pubsub.get_message(timeout=1)) is not None:
            received.append([e["seq"] for e in json.loads(message["data"])])
        await pubsub.aclose()
        await listener.aclose()
        return received

    received = async_to_sync(go)()
    assert received == [[1], [3]]


def test_live_events_are_what_the_api_reads_back_from_either_writer(team_a):
    # The pushed JSON is written around each event's data text (encoded once, for the insert and the push):
    # what a socket receives live must be, value for value, what the REST API and a socket's replay read from
    # the rows, whichever path wrote them — a worker's session store, or services through Django's connection.
    from decimal import Decimal

    from agents_app.kernel.loop import SessionState
    from agents_app.models import Event
    from mas_core.events import event_to_dict
    from mas_core.llm_types import Message
    from tests.agents_app.test_store_writes import in_thread, rows

    run, session = rows(team_a)
    subscriber = redis.Redis.from_url(live_redis_url()).pubsub()
    subscriber.subscribe(run_channel(run.id), team_runs_channel(team_a.id))
    for _ in range(2):
        assert subscriber.get_message(timeout=5)["type"] == "subscribe"
    awkward = {"text": 'quotes " and \\ backslash, é ü 雪, a \u2028 separator, \x01 control', "n": None,
               "nested": {"list": [1, 2.5, True], "empty": {}}, "cost": Decimal("0.000123")}

    async def work():
        store = DatabaseStore(run_id=run.id, session_id=session.id, agent="lead", tier="medium", cursor=None,
                              budget={}, team_id=team_a.id)
        state = SessionState(messages=[Message(role="user", content="write")])
        await store.emit("llm_response", {"model": "m", "finish_reason": "tool_calls", "text": awkward["text"],
                                          "tool_calls": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4},
                                          "cost_usd": "0"})
        await store.checkpoint(state, before_tools=True)
        await store.emit("tool_call", {"id": "tc-1", "name": "vfs_write", "arguments": awkward})
        store.deferring = True
        await DatabaseWorkspace(store=store).write("notes/é.md", "fïrst")
        store.deferring = False
        await store.emit("tool_result", {"id": "tc-1", "name": "vfs_write", "ok": True, "content": "Wrote"})
        await store.checkpoint(state)
        await store.close()

    outcome = in_thread(work)
    assert "error" not in outcome, outcome.get("error")
    with transaction.atomic():  # the services' path: pushed once it commits, from this (sync) thread
        event_append(run_id=run.id, type="run_complete", agent="", data=awkward)
    received = []
    while (message := subscriber.get_message(timeout=1)) is not None:
        if message["type"] == "message":
            received.append((message["channel"].decode(), message["data"].decode()))
    subscriber.close()
    channel, team = run_channel(run.id), team_runs_channel(team_a.id)
    live = [event for c, data in received if c == channel for event in json.loads(data)]
    expected = [event_to_dict(event) for event in Event.objects.filter(run=run).order_by("seq")]
    assert [e["type"] for e in expected] == ["llm_response", "tool_call", "file_change", "tool_result",
                                             "run_complete"]
    assert live == expected
    assert expected[1]["data"]["arguments"] == {**awkward, "cost": "0.000123"}
    assert expected[2]["data"] == {"path": "notes/é.md", "version": 1, "action": "created", "bytes": 6}
    # The run list hears of the run for the pushes holding an event that changes it (llm_response, run_complete).
    assert [data for c, data in received if c == team] == [str(run.id), str(run.id)]
