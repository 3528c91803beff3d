"""Live events on Redis pub/sub (issue 24, point 4): what a worker's loop pushes meanwhile goes out in one
round trip, in order; a web process checks its sockets' access once per credential and period.

Real Redis, Postgres and Channels consumers; the spies wrap the real calls.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest
import redis.asyncio
from asgiref.sync import async_to_sync, sync_to_async

from agents_app import ws_reads
from mas_core import events
from mas_core.events import events_push_async, live_redis_url, run_channel, team_runs_channel
from mas_core.models import ApiToken
from mas_core.teams import api_token_revoke
from tests.agents_app.test_consumers import append, bearer, make_run, messages_until, run_ws

pytestmark = pytest.mark.django_db(transaction=True)


def payload(run_id, seq, type="llm_request"):
    return {"run": str(run_id), "seq": seq, "type": type, "agent": "lead", "session": None, "data": {},
            "created_at": "2026-11-26T07:00:00+00:00"}


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
        await events_push_async([payload(run.id, 1)])  # the loop's publisher is made
        publisher = events._publishers[id(asyncio.get_running_loop())]
        round_trips = []
        real_round_trip = publisher.round_trip

        async def counted_round_trip(batch):
            round_trips.append([("PUBLISH", channel) for channel, _ in batch])
            return await real_round_trip(batch)

        publisher.round_trip = counted_round_trip
        # Three sessions push at the same moment; the third changes its run's status (the run list hears).
        await asyncio.gather(
            events_push_async([payload(run.id, 2)]),
            events_push_async([payload(other.id, 1), payload(other.id, 2)]),
            events_push_async([payload(run.id, 3, "run_complete")], team_id=team_a.id),
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
        await events_push_async([payload(run.id, 1)])
        publisher = events._publishers[id(asyncio.get_running_loop())]
        host, port = publisher.writer.get_extra_info("sockname")[:2]
        assert await listener.client_kill(f"{host}:{port}") is True
        await events_push_async([payload(run.id, 2)])
        await events_push_async([payload(run.id, 3)])
        received = []
        while (message := await pubsub.get_message(timeout=1)) is not None:
            received.append([e["seq"] for e in json.loads(message["data"])])
        await pubsub.aclose()
        await listener.aclose()
        return received

    received = async_to_sync(go)()
    assert received == [[1], [3]]
