"""A session's store writes on real Postgres: one retried after its commit's answer was lost applies nothing
twice, and one of a worker whose session was taken over applies nothing."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import timedelta
from decimal import Decimal

import psycopg
import pytest
from django.utils import timezone

from agents_app.execution import store as store_module
from agents_app.execution.lifecycle import session_begin
from agents_app.execution.store import DatabaseStore, DatabaseWorkspace, pool
from agents_app.models import Activation, Event, Run, Session, WorkspaceFile
from tests.runs import agent

pytestmark = [pytest.mark.django_db(transaction=True)]


LOST = "server closed the connection unexpectedly"


class AnswerLost:
    """A connection whose next statement (autocommit) or transaction commits, and whose answer never arrives."""

    def __init__(self, conn, lose: list[bool]) -> None:
        self.conn, self.lose, self.in_transaction = conn, lose, False

    async def execute(self, query, params=None):
        if self.lose and self.lose[-1] == "unsent":  # the connection broke before the statement left
            self.lose.pop()
            raise psycopg.OperationalError(LOST)
        cursor = await self.conn.execute(query, params)
        if not self.in_transaction and self.lose and self.lose.pop():
            raise psycopg.OperationalError(LOST)
        return cursor

    def transaction(self):
        real, outer = self.conn.transaction(), self

        class Committed:
            async def __aenter__(self):
                outer.in_transaction = True
                return await real.__aenter__()

            async def __aexit__(self, *exc):
                outer.in_transaction = False
                await real.__aexit__(*exc)
                if exc[0] is None and outer.lose and outer.lose.pop():
                    raise psycopg.OperationalError(LOST)  # committed: only the answer is lost

        return Committed()

    def __getattr__(self, name):
        return getattr(self.conn, name)


def in_thread(work):
    """Run ``work()`` (a coroutine function) on a fresh event loop in a thread, as a worker does."""
    outcome: dict = {}

    async def main():
        try:
            outcome["value"] = await work()
        except BaseException as error:  # noqa: BLE001 - handed back to the test
            outcome["error"] = error
        finally:  # this loop's connections end with it (the test database is dropped afterwards)
            for conn in pool().idle:
                await conn.close()

    thread = threading.Thread(target=lambda: asyncio.run(main()))
    thread.start()
    thread.join(60)
    return outcome


def rows(team):
    run = Run.objects.create(team=team, agent="lead", status="running")
    activation = Activation.objects.create(run=run, agent="lead", status="running")
    return run, Session.objects.create(run=run, activation=activation, agent="lead", tier="medium")


def store_of(run, session, **more) -> DatabaseStore:
    """The store a worker makes for ``session`` of ``run`` (agent lead, no budget); ``more``: its claim and writes."""
    return DatabaseStore(run_id=run.id, session_id=session.id, agent="lead", tier="medium", cursor=None, budget={},
                         team_id=run.team_id, **more)


def response(cost: str) -> dict:
    return {"model": "m", "finish_reason": "stop", "text": "hi", "tool_calls": [],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20}, "cost_usd": cost}


def test_a_write_retried_after_its_commit_applies_nothing_twice(team_a, monkeypatch, settings):
    # The writes below are the test's own: no live write (20 ms after an llm_request) may take a lost answer first,
    # as one would on a busy machine.
    settings.MAS_LIVE_EVENT_DELAY_MS = 60_000
    run, session = rows(team_a)
    lose: list[bool] = []
    real_connection = store_module.ConnectionPool.connection

    def connection(self):
        context = real_connection(self)

        class Wrapped:
            async def __aenter__(self_inner):
                return AnswerLost(await context.__aenter__(), lose)

            async def __aexit__(self_inner, *exc):
                return await context.__aexit__(*exc)

        return Wrapped()

    monkeypatch.setattr(store_module.ConnectionPool, "connection", connection)

    async def work():
        store = store_of(run, session)
        workspace = DatabaseWorkspace(store=store)
        failures = []
        await store.emit("llm_request", {"model": "m"})
        await store.emit("llm_response", response("0.12345678"))
        lose.append(True)
        try:
            await store.flush()
        except psycopg.OperationalError as error:
            failures.append(str(error))
        await store.emit("tool_call", {"id": "c1", "name": "vfs_write", "arguments": {}})  # new since
        await store.flush()  # the retry, then what is new: the first write's events and usage were committed
        lose.append(True)
        try:
            await workspace.write("notes.md", "first")
        except psycopg.OperationalError as error:
            failures.append(str(error))
        committed = await workspace.read("notes.md")
        await store.close()  # the retry, as a session's end makes it
        version = await workspace.write("notes.md", "second")
        # Lost before it left: its events go with the next write, its file change is not made.
        await store.emit("tool_call", {"id": "c2", "name": "vfs_write", "arguments": {}})
        lose.append("unsent")
        try:
            await workspace.write("never.md", "x")
        except psycopg.OperationalError as error:
            failures.append(str(error))
        await store.close()
        return failures, committed, store.writes, version

    outcome = in_thread(work)
    assert "error" not in outcome, outcome.get("error")
    failures, committed, writes, version = outcome["value"]
    assert (failures, committed) == ([LOST, LOST, LOST], "first")  # the first two answers were of commits
    assert (writes, version) == (5, 2)  # each write applied once; the file's next version is its second
    assert [(e.seq, e.type) for e in Event.objects.filter(run=run).order_by("seq")] == [
        (1, "llm_request"), (2, "llm_response"), (3, "tool_call"), (4, "file_change"), (5, "file_change"),
        (6, "tool_call")]
    assert [e.data["version"] for e in Event.objects.filter(run=run, type="file_change").order_by("seq")] == [1, 2]
    run = Run.objects.get(pk=run.pk)
    assert (run.next_seq, run.prompt_tokens, run.completion_tokens, run.cost_usd) == (
        6, 100, 20, Decimal("0.12345678"))
    session = Session.objects.get(pk=session.pk)
    assert (session.prompt_tokens, session.completion_tokens, session.cost_usd) == (100, 20, Decimal("0.12345678"))
    assert (session.writes, session.last_write) == (5, [5])
    assert [(f.path, f.content, f.version) for f in WorkspaceFile.objects.filter(run=run)] == [
        ("notes.md", "second", 2)]


def test_a_worker_whose_session_was_taken_over_writes_nothing(team_a, settings):
    settings.MAS_SESSION_STALE_S = 5
    agent(team_a, "Lead")
    run, session = rows(team_a)
    session.claim = session.activation.id  # any claim: the first worker's
    session.save(update_fields=["claim"])

    async def first_write():
        store = store_of(run, session, claim=session.claim, writes=0)
        await store.emit("llm_response", response("0.5"))
        await store.flush()
        return store

    outcome = in_thread(first_write)
    old = outcome["value"]
    assert old.writes == 1
    # Its heartbeat stopped: another worker claims the session and resumes it.
    Session.objects.filter(pk=session.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=60))
    start = session_begin(activation_id=session.activation_id, worker="other:2")
    assert (start.resumed, start.session.id, start.session.writes) == (True, session.id, 1)
    assert start.session.claim != session.claim

    async def late_write():
        await old.emit("llm_response", response("0.5"))
        await old.file_write("late.md", "x")

    outcome = in_thread(late_write)
    assert type(outcome["error"]).__name__ == "SessionTakenOver"
    assert str(outcome["error"]) == f"session {session.id} was taken over by another worker"
    run = Run.objects.get(pk=run.pk)
    assert (run.cost_usd, run.prompt_tokens) == (Decimal("0.5"), 100)
    assert [e.type for e in Event.objects.filter(run=run).order_by("seq")] == ["llm_response", "session_start"]
    assert not WorkspaceFile.objects.filter(run=run).exists()

    # The new owner writes on from where the session was.
    async def new_owner():
        store = store_of(run, session, claim=start.session.claim, writes=start.session.writes)
        await store.emit("llm_response", response("0.25"))
        await store.flush()
        return store.writes

    assert in_thread(new_owner) == {"value": 2}
    assert Run.objects.get(pk=run.pk).cost_usd == Decimal("0.75")


def test_writes_of_a_session_whose_run_was_deleted_leave_no_row_behind(team_a):
    """The tables a step appends to keep no foreign key checks in PostgreSQL (a step's commit checked one per
    event, history entry and file row: 10-16 % of its database CPU); the write itself keeps them: every row it adds
    hangs on the run's and the session's rows, locked first, so a run deleted meanwhile gets none — by the
    plain write, the held file write, nor its commit."""
    from agents_app.execution.housekeeping import run_delete
    from agents_app.kernel.loop import SessionState
    from agents_app.models import SessionEntry, WorkspaceFileVersion
    from mas_core.llm_types import Message

    run, session = rows(team_a)
    state = SessionState(messages=[Message(role="user", content="write")])
    stores: dict = {}

    async def before():
        stores["plain"], stores["held"] = store_of(run, session), store_of(run, session)
        await stores["plain"].emit("llm_response", response("0"))
        await stores["plain"].checkpoint(state)
        return stores["plain"].writes

    assert in_thread(before) == {"value": 1}
    Run.objects.filter(pk=run.pk).update(status="succeeded")
    deleted = run_delete(run=run)
    assert (deleted.events, deleted.files) == (1, 0)

    async def plain_after():
        store = stores["plain"]
        await store.emit("tool_call", {"id": "tc-1", "name": "vfs_write", "arguments": {}})
        state.messages.append(Message(role="assistant", content="more"))
        await store.checkpoint(state)

    async def held_after():
        store = stores["held"]
        store.deferring = True
        await store.emit("tool_call", {"id": "tc-2", "name": "vfs_write", "arguments": {}})
        await DatabaseWorkspace(store=store).write("notes.md", "late")

    async def file_after():
        await DatabaseWorkspace(store=store_of(run, session)).write("other.md", "late")

    for write in (plain_after, held_after, file_after):
        outcome = in_thread(write)
        assert type(outcome.get("error")).__name__ == "SessionTakenOver", (write.__name__, outcome)
        assert str(outcome["error"]) == f"session {session.id} was taken over by another worker"
    for model, rows_of in ((Event, {"run_id": run.pk}), (Event, {"session_id": session.pk}),
                           (SessionEntry, {"session_id": session.pk}), (WorkspaceFile, {"run_id": run.pk}),
                           (WorkspaceFileVersion, {"run_id": run.pk})):
        assert not model.objects.filter(**rows_of).exists(), (model, rows_of)


def test_a_tools_held_file_write_is_committed_with_the_checkpoint_that_records_its_result(team_a):
    """ToolCaller lets vfs_write's file write wait in an open transaction for the checkpoint recording its
    result: one commit for both, never one without the other; the events keep their order and numbers."""
    from agents_app.kernel.loop import SessionState
    from mas_core.llm_types import Message

    run, session = rows(team_a)
    seen: dict = {}

    async def work():
        store = store_of(run, session)
        state = SessionState(messages=[Message(role="user", content="write")])
        await store.emit("llm_response", response("0"))
        await store.checkpoint(state, before_tools=True)
        await store.emit("tool_call", {"id": "tc-1", "name": "vfs_write", "arguments": {}})
        store.deferring = True
        version = await DatabaseWorkspace(store=store).write("notes.md", "first")
        store.deferring = False
        # Not committed yet: another connection sees neither the file nor the events.
        async with pool().connection() as conn:
            seen["files"] = (await (await conn.execute(
                "SELECT count(*) FROM agents_app_workspacefile WHERE run_id = %s", [run.id])).fetchone())[0]
            seen["events"] = (await (await conn.execute(
                "SELECT count(*) FROM agents_app_event WHERE run_id = %s", [run.id])).fetchone())[0]
        seen["writes_held"] = store.writes
        state.messages.append(Message(role="tool", content=f"Wrote notes.md (version {version})",
                                      tool_call_id="tc-1", name="vfs_write"))
        await store.emit("tool_result", {"id": "tc-1", "name": "vfs_write", "ok": True})
        await store.checkpoint(state)  # commits both
        seen["held_after"] = store.held
        await store.close()
        return version, store.writes

    outcome = in_thread(work)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["value"] == (1, 2)
    assert seen == {"files": 0, "events": 0, "writes_held": 1, "held_after": None}
    assert [(e.seq, e.type) for e in Event.objects.filter(run=run).order_by("seq")] == [
        (1, "llm_response"), (2, "tool_call"), (3, "file_change"), (4, "tool_result")]
    assert WorkspaceFile.objects.get(run=run, path="notes.md").content == "first"
    session = Session.objects.get(pk=session.pk)
    assert (session.writes, session.last_write) == (2, [3])  # the base of its events
    assert session.entries.count() == 2


def test_a_held_file_write_past_the_workspace_limit_writes_nothing_and_keeps_the_events(team_a, settings):
    from agents_app.execution.workspace_limit import WorkspaceFull

    settings.MAS_WORKSPACE_MAX_BYTES = 10
    run, session = rows(team_a)

    async def work():
        store = store_of(run, session)
        await store.emit("tool_call", {"id": "tc-1", "name": "vfs_write", "arguments": {}})
        store.deferring = True
        try:
            await DatabaseWorkspace(store=store).write("big.md", "x" * 11)
        except WorkspaceFull as error:
            refused = str(error)
        store.deferring = False
        await store.emit("tool_result", {"id": "tc-1", "name": "vfs_write", "ok": False})
        await store.close()
        return refused, store.held, store.writes, len(pool().idle)

    outcome = in_thread(work)
    assert "error" not in outcome, outcome.get("error")
    refused, held, writes, idle = outcome["value"]
    assert refused.startswith("big.md was not written: the run's workspace would hold 11 bytes")
    assert (held, writes) == (None, 1)
    assert [(e.seq, e.type) for e in Event.objects.filter(run=run).order_by("seq")] == [
        (1, "tool_call"), (2, "tool_result")]
    assert not WorkspaceFile.objects.filter(run=run).exists()


def test_a_held_file_write_whose_commit_was_lost_stops_the_session_for_a_resume(team_a, monkeypatch):
    """The checkpoint carrying a held write's commit never arrived: neither was committed, and the tool saw its
    file written, so the session writes nothing more (SessionTakenOver) and is resumed from its last checkpoint,
    where the tool runs again."""
    run, session = rows(team_a)
    lose: list = []
    real_acquire = store_module.ConnectionPool.acquire

    async def acquire(self):
        return AnswerLost(await real_acquire(self), lose)

    monkeypatch.setattr(store_module.ConnectionPool, "acquire", acquire)

    async def work():
        store = store_of(run, session)
        await store.emit("tool_call", {"id": "tc-1", "name": "vfs_write", "arguments": {}})
        store.deferring = True
        version = await DatabaseWorkspace(store=store).write("notes.md", "first")
        store.deferring = False
        await store.emit("tool_result", {"id": "tc-1", "name": "vfs_write", "ok": True})
        lose.append("unsent")
        errors = []
        try:
            await store.flush()
        except psycopg.OperationalError as error:
            errors.append(str(error))
        try:
            await store.close()
        except Exception as error:  # noqa: BLE001 - the test reads it
            errors.append(f"{type(error).__name__}: {error}")
        await store.emit("error", {"where": "session"})
        try:
            await store.flush()  # nothing more is written
        except Exception as error:  # noqa: BLE001
            errors.append(type(error).__name__)
        return version, errors

    outcome = in_thread(work)
    assert "error" not in outcome, outcome.get("error")
    version, errors = outcome["value"]
    assert version == 1
    assert errors == [LOST, f"SessionTakenOver: session {session.id} lost a file write its tool saw succeed: "
                            "it is resumed from its last checkpoint", "SessionTakenOver"]
    assert not Event.objects.filter(run=run).exists()
    assert not WorkspaceFile.objects.filter(run=run).exists()
    assert Session.objects.get(pk=session.pk).writes == 0


def test_a_checkpoints_entries_are_stored_as_their_own_json_texts(team_a):
    """A checkpoint's history entries reach PostgreSQL in one JSON array written around their own JSON texts: each
    row holds exactly the text the journal made, whatever the messages hold, a ``seen`` entry its digest, the last
    new entry the counters; and the journal reads the same messages and counters back."""
    from agents_app.execution import journal
    from agents_app.kernel.loop import SessionState
    from agents_app.models import SessionEntry
    from mas_core import jsontext
    from mas_core.llm_types import Message, ToolCall

    awkward = 'quote " backslash \\ nul \x00 tab \t line\n é 漢字 \u2028 🙂 </script> {"json": [1, null]} \\u0041'
    messages = [
        Message(role="user", content=awkward),
        Message(role="assistant", content="", tool_calls=[
            ToolCall(id="c1", name="vfs_write", arguments={"path": 'a"\\b.md', "content": awkward, "n": 1.5})]),
        Message(role="tool", content=awkward, tool_call_id="c1", name="vfs_write"),
    ]
    run, session = rows(team_a)

    async def work():
        store = store_of(run, session)
        state = SessionState(messages=list(messages), seen_results=['dig"est\\1', "digest-2"])
        await store.checkpoint(state)
        await store.close()
        return {key: value for key, value in state.counters().items() if key != "seen_results"}

    outcome = in_thread(work)
    assert "error" not in outcome, outcome.get("error")
    stored = list(SessionEntry.objects.filter(session=session).order_by("seq")
                  .values_list("seq", "kind", "payload", "replaced_by", "counters"))
    texts = [jsontext.dumps(message.to_dict()) for message in messages]
    assert [row[:4] for row in stored] == [
        (1, "message", texts[0], None), (2, "message", texts[1], None), (3, "message", texts[2], None),
        (4, "seen", 'dig"est\\1', None), (5, "seen", "digest-2", None)]
    assert [row[4] for row in stored[:4]] == [None] * 4
    assert json.loads(stored[4][4]) == outcome["value"]  # the counters, on the checkpoint's last new entry
    counters = Session.objects.get(pk=session.pk).state
    assert counters == outcome["value"]
    state, _ = journal.journal_load(session_id=session.id, counters=counters)
    assert state.messages == messages
    assert state.seen_results == ['dig"est\\1', "digest-2"]


def test_a_stores_connections_plan_a_write_once_and_reuse_the_plan(team_a):
    """The store's connections take PostgreSQL's generic plan for their prepared statements (``plan_cache_mode``):
    a write's statement, prepared at its third run on a connection, is planned once there, not at every write.
    Left to choose, PostgreSQL planned each of its first five runs anew, and kept doing so on some connections:
    0.36 + 0.59 ms of its CPU a step (bench/RESULTS.md)."""
    from agents_app.kernel.loop import SessionState
    from mas_core.llm_types import Message

    run, session = rows(team_a)

    async def work():
        store = store_of(run, session)
        state = SessionState(messages=[Message(role="user", content="go")])
        for step in range(8):  # one at a time: each write on the loop's one connection
            state.messages.append(Message(role="assistant", content=f"step {step}"))
            await store.checkpoint(state)
        async with pool().connection() as conn:
            plans = await (await conn.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE %s",
                ["%WITH l AS (%agents_app_sessionentry%"])).fetchall()
        await store.close()
        return plans

    outcome = in_thread(work)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["value"] == [(6, 0)]  # prepared at the third write: six runs of one generic plan, no custom one
    assert Session.objects.get(pk=session.pk).writes == 8
