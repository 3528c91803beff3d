"""The live monitor's websockets, through the real ASGI application, Redis channel layer and database."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import transaction
from django.test import Client
from django.utils import timezone

from agents_app import consumers, ws_reads, ws_rooms
from mas_core.eventlog import event_append
from agents_app.models import Event, Run
from mas_project.asgi import application
from tests.sockets import Communicator

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
    # As a browser sends them: the Origin is checked against the Host (tests/mas_project/test_ws_security.py).
    headers = [(b"host", b"testserver"), (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())]
    return headers + ([(b"origin", origin.encode())] if origin else [])


async def messages_until(communicator, predicate, *, limit=5000, timeout=5):
    received = []
    while len(received) < limit:
        message = json.loads(await communicator.receive_from(timeout=timeout))
        received.append(message)
        if predicate(message):
            return received
    raise AssertionError("predicate never held")


def events_of(messages):
    return [event for m in messages if m["message"] == "events" for event in m["events"]]


def seqs_of(messages):
    return [event["seq"] for event in events_of(messages)]


def reaches(seq):
    """The predicate of a message carrying events up to ``seq``."""
    return lambda m: m["message"] == "events" and m["events"][-1]["seq"] >= seq


@pytest.fixture
def member(team_a, make_member, make_token):
    user = make_member(team_a, role="viewer")
    return user, make_token(user=user, team=team_a, role="viewer")


def run_ws(path, headers):
    return Communicator(application, path, headers=headers)


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
    real_read = ws_reads._events_after

    def read_while_the_kernel_writes(run_id, after, limit, before=None):
        page = real_read(run_id, after, limit, before)
        reads.append(after)
        if len(reads) == 1:
            # Committed (and pushed) after the consumer joined the group, before the replay ends.
            append(run, "tool_call", 3)
        return page

    monkeypatch.setattr(ws_reads, "_events_after", read_while_the_kernel_writes)

    async def go():
        communicator = run_ws(f"/ws/runs/{run.id}/", bearer(token))
        await communicator.connect()
        messages = await messages_until(communicator, lambda m: m["message"] == "replayed")
        assert messages[-1] == {"message": "replayed", "last_seq": 1203}
        assert reads == [0, 500, 1000]  # the replay's three pages (later reads are the room's)
        # A page goes out in as few messages as MAX_MESSAGE_CHARS allows: here one per page.
        assert [len(m["events"]) for m in messages[:-1]] == [500, 500, 203]
        # The live copies of 1201..1203 arrive after the replay and are dropped.
        await sync_to_async(append)(run, "llm_response", 1)
        messages += await messages_until(communicator, reaches(1204))
        await communicator.disconnect()
        return messages

    messages = async_to_sync(go)()
    assert seqs_of(messages) == list(range(1, 1205))
    assert [event["type"] for event in events_of(messages)][1200:] == [
        "tool_call", "tool_call", "tool_call", "llm_response"]


def test_a_live_message_after_a_lost_push_is_preceded_by_the_missing_events(team_a, member, monkeypatch):
    monkeypatch.setattr(ws_rooms.Room, "SETTLE_S", 60)  # this test is about the gap, not the quiet-time read
    _, token = member
    run = make_run(team_a)
    append(run, "run_start")
    reads = []
    real_read = ws_reads._events_after
    monkeypatch.setattr(ws_reads, "_events_after", lambda *args: reads.append(args[1:]) or real_read(*args))

    async def go():
        sockets = [run_ws(f"/ws/runs/{run.id}/", bearer(token)) for _ in range(3)]
        for communicator in sockets:
            await communicator.connect()
            await messages_until(communicator, lambda m: m["message"] == "replayed")
        reads.clear()
        await sync_to_async(quietly_append)(run, "tool_result", 2)  # seq 2, 3: never pushed
        await sync_to_async(append)(run, "session_end")  # seq 4, pushed
        received = []
        for communicator in sockets:
            received.append(await messages_until(communicator, reaches(4)))
            assert await communicator.receive_nothing(timeout=0.3)
        await asyncio.gather(*(communicator.disconnect() for communicator in sockets))
        return received

    received = async_to_sync(go)()
    for messages in received:
        assert [(e["seq"], e["type"]) for e in events_of(messages)] == [
            (2, "tool_result"), (3, "tool_result"), (4, "session_end")]
    # The gap is read once for the three sockets: seq > 1 and < 4, a page at most.
    assert reads == [(1, ws_rooms.REPLAY_PAGE, 4)]


def test_a_lost_last_push_is_read_once_soon_after_the_run_goes_quiet(team_a, member, monkeypatch):
    """Nothing after a lost last push shows the gap: the room reads the database once SETTLE_S after the
    last batch, for all its sockets — the ping (15 s) is not waited for."""
    _, token = member
    run = make_run(team_a)
    reads = []
    real_read = ws_reads._events_after
    monkeypatch.setattr(ws_reads, "_events_after", lambda *args: reads.append(args[1:]) or real_read(*args))

    async def go():
        sockets = [run_ws(f"/ws/runs/{run.id}/", bearer(token)) for _ in range(3)]
        for communicator in sockets:
            await communicator.connect()
            await messages_until(communicator, lambda m: m["message"] == "replayed")
        reads.clear()
        await sync_to_async(append)(run, "session_end")  # seq 1, pushed
        await sync_to_async(quietly_append)(run, "run_complete")  # seq 2, its push lost: the run's last event
        started = time.monotonic()
        received = [await messages_until(communicator, reaches(2), timeout=3) for communicator in sockets]
        waited = time.monotonic() - started
        await asyncio.gather(*(communicator.disconnect() for communicator in sockets))
        return received, waited

    received, waited = async_to_sync(go)()
    assert [[(e["seq"], e["type"]) for e in events_of(messages)] for messages in received] == [
        [(1, "session_end"), (2, "run_complete")]] * 3
    assert waited < 2
    # One read after seq 1 for the three sockets; at most a re-check after seq 2 (which finds nothing).
    assert reads[0] == (1, ws_rooms.REPLAY_PAGE, None) and set(reads[1:]) <= {(2, ws_rooms.REPLAY_PAGE, None)}


def test_pushes_that_arrive_out_of_order_are_put_back_in_order_without_reading_the_database(team_a, member,
                                                                                            monkeypatch):
    monkeypatch.setattr(ws_rooms.Room, "SETTLE_S", 60)  # no quiet-time read in between
    from mas_core.events import _sync_redis, event_to_dict, run_channel

    _, token = member
    run = make_run(team_a)
    reads = []
    real_read = ws_reads._events_after
    monkeypatch.setattr(ws_reads, "_events_after", lambda *args: reads.append(args[1]) or real_read(*args))

    async def go():
        communicator = run_ws(f"/ws/runs/{run.id}/", bearer(token))
        await communicator.connect()
        await messages_until(communicator, lambda m: m["message"] == "replayed")
        await sync_to_async(append)(run, "session_start")  # seq 1, pushed: the room now expects seq 2
        await messages_until(communicator, lambda m: m["message"] == "events")
        reads.clear()
        # Two sessions commit seq 2 and 3; their pushes reach Redis the other way round.
        await sync_to_async(quietly_append)(run, "tool_call", 2)
        events = await sync_to_async(lambda: [event_to_dict(e) for e in Event.objects.filter(run=run, seq__gt=1)
                                              .order_by("seq")])()
        _sync_redis().publish(run_channel(run.id), json.dumps([events[1]]))
        _sync_redis().publish(run_channel(run.id), json.dumps([events[0]]))
        messages = await messages_until(communicator, reaches(3))
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()
        return messages

    messages = async_to_sync(go)()
    assert [(e["seq"], e["type"]) for e in events_of(messages)] == [(2, "tool_call"), (3, "tool_call")]
    assert reads == []  # held in the room until seq 2 came, not read by the socket


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
    first = events_of(messages)[0]
    assert first == {
        "run": str(run.id), "seq": 4, "type": "llm_request", "agent": "lead", "session": None,
        "data": {"i": 3}, "created_at": first["created_at"]}
    assert closed == {"type": "websocket.close", "code": 4400,
                      "reason": "after must be a whole number: the last seq the client has"}


def test_the_ping_catches_up_events_whose_push_was_lost(team_a, member, settings):
    settings.MAS_WS_PING_S = 0.3
    _, token = member
    run = make_run(team_a)

    async def go():
        communicator = run_ws(f"/ws/runs/{run.id}/", bearer(token))
        await communicator.connect()
        await messages_until(communicator, lambda m: m["message"] == "replayed")
        await sync_to_async(quietly_append)(run, "run_complete")
        messages = await messages_until(communicator, lambda m: m["message"] == "events")
        await communicator.disconnect()
        return messages

    messages = async_to_sync(go)()
    assert messages[0] == {"message": "ping", "last_seq": 0}
    assert [(e["seq"], e["type"]) for e in events_of(messages)] == [
        (1, "run_complete")]


def test_a_socket_that_falls_behind_drops_live_batches_and_reads_them_back(team_a, member, monkeypatch):
    """The kernel never waits for a socket: a stuck one loses live copies and reads them from the database."""
    monkeypatch.setattr(consumers.RunEventsConsumer, "QUEUE", 2)
    _, token = member
    run = make_run(team_a)
    append(run, "run_start")

    async def go():
        communicator = run_ws(f"/ws/runs/{run.id}/", bearer(token))
        await communicator.connect()
        await messages_until(communicator, lambda m: m["message"] == "replayed")
        room = ws_rooms._rooms[(id(asyncio.get_running_loop()), str(run.id))]
        (socket,) = room.sockets
        async with socket.lock:  # the socket is stuck, as if its client read nothing
            for _ in range(6):  # six commits, six pushes: none of them waits for the socket
                await sync_to_async(append)(run, "stream_chunk")
            deadline = time.monotonic() + 5
            # One batch is held by the stuck deliverer, two wait in the inbox, three are dropped.
            while socket.dropped + socket.inbox.qsize() < 5 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            counts = (socket.dropped, socket.inbox.qsize(), socket.behind)
            assert await communicator.receive_nothing(timeout=0.2)  # nothing while it is stuck
        # Unstuck: the held and queued batches go out, then the dropped ones are read back at once
        # (well before the next ping, 15 s away).
        messages = await messages_until(communicator, reaches(7), timeout=3)
        assert await communicator.receive_nothing(timeout=0.3)
        behind_after = socket.behind
        await communicator.disconnect()
        return counts, messages, behind_after

    counts, messages, behind_after = async_to_sync(go)()
    assert counts == (3, 2, True) and behind_after is False
    assert [(e["seq"], e["type"]) for e in events_of(messages)] == [(seq, "stream_chunk") for seq in range(2, 8)]
    assert Event.objects.filter(run=run).count() == 7


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
    assert message["run"]["totals"] == {"prompt_tokens": 0, "completion_tokens": 0, "cost_usd": "0",
                                        "duration_s": None}


def test_the_run_list_needs_a_team_the_user_is_in(team_a, team_b, make_member):
    user = make_member(team_a, role="viewer")
    from mas_core.teams import membership_set

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


def test_the_run_list_since_sends_first_what_changed_after_the_page_was_drawn(team_a, team_b, member):
    _, token = member
    drawn = timezone.now()
    old = make_run(team_a)
    Run.objects.filter(pk=old.pk).update(status="succeeded", created_at=drawn - timedelta(hours=2),
                                         finished_at=drawn - timedelta(hours=1))
    just_finished = make_run(team_a)
    Run.objects.filter(pk=just_finished.pk).update(status="failed", created_at=drawn - timedelta(hours=2),
                                                   finished_at=drawn + timedelta(seconds=1))
    going = make_run(team_a)
    Run.objects.filter(pk=going.pk).update(status="running", created_at=drawn - timedelta(hours=3))
    make_run(team_b)  # another team's run, new and queued: never sent

    async def go():
        communicator = run_ws(f"/ws/runs/?since={drawn.timestamp()}", bearer(token))
        await communicator.connect()
        messages = [json.loads(await communicator.receive_from(timeout=5)) for _ in range(3)]
        if not await communicator.receive_nothing(timeout=0.4):  # what came, in the failure's message
            messages.append(json.loads(await communicator.receive_from(timeout=1)))
        await communicator.disconnect()
        bad = run_ws("/ws/runs/?since=yesterday", bearer(token))
        await bad.connect()
        return messages, await bad.receive_output(timeout=5)

    messages, bad = async_to_sync(go)()
    assert messages[0] == {"message": "subscribed", "team": team_a.id}
    # Oldest first: the running run (created 3 h ago), then the one that finished after the page was drawn.
    assert [(m["message"], m["run"]["id"], m["run"]["status"]) for m in messages[1:]] == [
        ("run", str(going.id), "running"), ("run", str(just_finished.id), "failed")]
    assert bad == {"type": "websocket.close", "code": 4400}


def test_the_run_list_does_not_lose_a_change_heard_while_it_sends_a_batch(team_a, member, monkeypatch):
    _, token = member
    one, two, three = make_run(team_a), make_run(team_a), make_run(team_a)
    real_summary = ws_reads._run_summary
    summaries = []

    def summary_while_another_run_changes(run_id, team_id):
        summaries.append(run_id)
        if len(summaries) == 1:
            # Pushed while the list is busy with a batch of two runs, and heard before the batch ends
            # (the socket's next dispatch runs between this read and the next).
            append(three, "run_start")
            time.sleep(0.3)
        return real_summary(run_id, team_id)

    monkeypatch.setattr(ws_reads, "_run_summary", summary_while_another_run_changes)

    async def go():
        communicator = run_ws("/ws/runs/", bearer(token))
        await communicator.connect()
        await communicator.receive_from(timeout=5)  # subscribed
        await sync_to_async(append)(one, "run_start")
        await sync_to_async(append)(two, "run_start")  # within FLUSH_S: one batch of two
        messages = [json.loads(await communicator.receive_from(timeout=5)) for _ in range(3)]
        assert await communicator.receive_nothing(timeout=0.6)
        await communicator.disconnect()
        return messages

    messages = async_to_sync(go)()
    batch = sorted([str(one.id), str(two.id)])
    assert [m["run"]["id"] for m in messages] == batch + [str(three.id)]
    assert summaries == batch + [str(three.id)]


def test_sockets_open_no_channel_of_the_layer_and_stay_open_when_idle(team_a, member, monkeypatch):
    """A socket's events come from Redis pub/sub: none opens a channel of the Channels layer (each would hold a
    Redis connection in 5 s blocking pops, and such a pop, cancelled as its loop closed, once hung a test in
    asyncio.run). Sockets idle for longer than such a pop stay open, and see what comes next."""
    from channels_redis.core import RedisChannelLayer

    opened = []
    new_channel = RedisChannelLayer.new_channel

    async def counted(self, prefix="specific"):
        opened.append(prefix)
        return await new_channel(self, prefix)

    monkeypatch.setattr(RedisChannelLayer, "new_channel", counted)
    _, token = member
    run = make_run(team_a)
    append(run, "run_start")

    async def go():
        sockets = [run_ws(f"/ws/runs/{run.id}/", bearer(token)) for _ in range(50)]
        for communicator in sockets:
            await communicator.connect()
            await messages_until(communicator, lambda m: m["message"] == "replayed")
        await asyncio.sleep(RedisChannelLayer.brpop_timeout + 1.5)
        await sync_to_async(append)(run, "run_complete")
        received = [seqs_of(await messages_until(communicator, lambda m: m["message"] == "events"))
                    for communicator in sockets]
        await asyncio.gather(*(communicator.disconnect() for communicator in sockets))
        return received

    assert async_to_sync(go)() == [[2]] * 50
    assert opened == []
