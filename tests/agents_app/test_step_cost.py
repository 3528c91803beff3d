"""What one step of a session costs the database, pinned: a regression that adds a statement, a commit, a
thread hop or an ORM query to every step fails here; so does one that adds a statement to a session's begin, its
reads, or a root session's settle, paid once per run (bench/kernel_overhead.py measures the time)."""

from __future__ import annotations

import pytest

from agents_app.execution.runs import run_start
from agents_app.execution.store import monitor
from agents_app.models import Activation, Run, WorkspaceFile
from mas_core import phases
from mas_core.runner import runner
from tests.runs import agent, wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]


def script(steps: int) -> dict:
    turns = [{"tool_calls": [{"name": "vfs_write", "arguments": {"path": f"notes/{i}.md", "content": f"step {i}"}}]}
             for i in range(steps)]
    return {"stepper": turns + [{"text": "done"}]}


def session_cost(team, steps: int, monkeypatch) -> dict[str, int]:
    """Run one session of ``steps`` vfs_write steps on this process's loop; what it counted, by name (the
    test's work is in a pool no worker serves: see the ``unserved`` fixture)."""
    from agents_app.execution.session import execute_activation

    run = run_start(team=team, agent="stepper", input="Write notes", script=script(steps))
    [root] = Activation.objects.filter(run=run)
    monkeypatch.setattr(phases, "ON", True)
    monkeypatch.setattr(phases, "totals", {})
    # The session monitor's once-a-second tick (heartbeats, cancellations) is no step's cost: a session that
    # lasts more than a second on a busy machine would count one.
    monkeypatch.setattr(monitor, "watch", lambda *args: None)
    runner.run(execute_activation(str(root.id)))  # what a worker's scheduler loop runs, here
    counted = {name: int(values[0]) for name, values in phases.totals.items()}
    monkeypatch.setattr(phases, "ON", False)
    assert Run.objects.get(pk=run.pk).status == "succeeded"
    assert WorkspaceFile.objects.filter(run=run).count() == steps
    return counted


def test_a_tool_step_is_two_round_trips_one_commit_and_no_thread_hop(team_a, monkeypatch, loop_connections_closed,
                                                                     unserved):
    agent(team_a, "Stepper", "limits:\n  max_steps: 20\n")
    short, long = session_cost(team_a, 2, monkeypatch), session_cost(team_a, 6, monkeypatch)
    per_step = {name: (long.get(name, 0) - short.get(name, 0)) / 4 for name in {*short, *long}}
    per_step = {name: count for name, count in per_step.items() if count}
    # One vfs_write step: the model's turn, the tool's file write in a transaction left open (BEGIN, the
    # write, the workspace's total: one round trip), then the checkpoint recording its result and the
    # COMMIT (one round trip). Four events emitted (llm_request, llm_response, tool_call, tool_result; the
    # file_change is the write's own). No ORM query, no hop to a database thread.
    pushes = per_step.pop("push (after commit)", 0)
    assert per_step == {
        "step": 1, "statement": 2, "async connection use": 1,
        "events": 4, "checkpoint staging": 2, "context count": 2, "budget reserve": 1, "model call": 1,
        "gate": 1, "tool": 1, "tool result kept": 1, "file write": 1, "checkpoint+events write": 1,
    }
    # One PUBLISH per commit at most: a commit made while the last push is still on its way rides along with the
    # next one (on a loaded machine, 0.75 a step was seen), never one of its own beside it.
    assert 0 < pushes <= 1


def test_a_step_reads_its_writes_results_after_the_pipeline_syncs(team_a, monkeypatch, loop_connections_closed,
                                                                     unserved):
    """A result fetched inside a pipeline asks the server to flush first, and the pipeline's sync at its end is
    then a second round trip: the store's pipelined writes (the held file write, the checkpoint committing it)
    read their results once the pipeline is synced, so each is one round trip."""
    import psycopg

    fetched = {"in a pipeline": 0, "after": 0}
    fetchone = psycopg.AsyncCursor.fetchone

    async def counted(cursor):
        pipelined = cursor.connection.pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF
        fetched["in a pipeline" if pipelined else "after"] += 1
        return await fetchone(cursor)

    agent(team_a, "Stepper", "limits:\n  max_steps: 20\n")
    monkeypatch.setattr(psycopg.AsyncCursor, "fetchone", counted)
    session_cost(team_a, 2, monkeypatch)
    assert fetched["in a pipeline"] == 0
    # Per step: the file write's row and the workspace's total, the checkpoint's row; then the final answer's
    # checkpoint.
    assert fetched["after"] == 2 * 3 + 1


def test_a_new_session_begins_in_three_statements_and_reads_in_three(team_a, monkeypatch, loop_connections_closed,
                                                                    unserved):
    agent(team_a, "Stepper", "limits:\n  max_steps: 20\n")
    counted = session_cost(team_a, 1, monkeypatch)
    # session_begin, in its transaction: the run's and the activation's rows locked (one statement); the session
    # to resume and the agent's definition (the run's own file, the team's row) read (one); the session
    # inserted, its activation and its run marked running and its session_start event appended (one).
    # session_reads: the team's rules, its skills' existence (it has none: no skill is read), the agent's earlier
    # activations and the execution context's reads (one); the script's model (one), recorded on the session
    # (one).
    assert {hop: counted[f"django query: {hop}"] for hop in ("session_begin", "session_reads")} == {
        "session_begin": 3, "session_reads": 3}
    # The hops to a database thread: the begin, the reads, the settle (an agent with few tools offers them all,
    # with no hop to learn which).
    assert sorted(name for name in counted if name.startswith("db hop")) == [
        "db hop: session_begin", "db hop: session_reads", "db hop: session_settle"]


def root_session_begun(team):
    """A plain agent run whose root session has begun on worker host:1: the run and that session."""
    from agents_app.execution.lifecycle import session_begin

    agent(team, "Stepper")
    run = run_start(team=team, agent="stepper", input="Write notes", script=script(0))
    [root] = Activation.objects.filter(run=run)
    return run, session_begin(activation_id=root.id, worker="host:1").session


def test_a_root_session_ending_its_run_settles_in_five_statements(team_a, unserved):
    """A plain agent run's root session ends, and the run with it: one transaction of five statements."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agents_app.execution.lifecycle import session_settle
    from tests.runs import events

    run, session = root_session_begun(team_a)
    with CaptureQueriesContext(connection) as queries:
        session_settle(run_id=run.id, session_id=session.id, status="ok", result="done",
                       meta={"steps": 1, "tool_calls": 0}, failure=None, ladder=[])
    # The run, the session and its activation locked and read together; the session's end and the
    # activation's written; the admission round finding nothing left; the run's outcome written (its
    # team's webhook read with it); the session's and the run's end events appended together.
    statements = [query["sql"].split(None, 2)[:2] for query in queries]
    assert statements[0] == ["BEGIN"] and statements[-1] == ["COMMIT"], statements
    assert len(statements) - 2 == 5, statements
    run = Run.objects.get(pk=run.pk)
    assert (run.status, run.result, run.error) == ("succeeded", "done", "")
    assert [(e.type, e.data["status"]) for e in events(run)[-2:]] == [("session_end", "ok"),
                                                                       ("run_complete", "succeeded")]


@pytest.mark.parametrize("held", ["run", "session"])
def test_the_settles_one_read_locks_the_run_then_the_session_then_its_activation(team_a, unserved, held):
    """The order every writer of a run locks in: a settle waiting for one of these rows holds none after it."""
    import threading

    from django.db import connection, connections, transaction

    from agents_app.execution.lifecycle import session_settle

    run, session = root_session_begun(team_a)
    rows = {"run": run.id, "session": session.id, "activation": session.activation_id}
    after = list(rows)[list(rows).index(held) + 1:]
    settling: dict = {}

    def settle() -> None:
        try:
            connection.ensure_connection()
            settling["pid"] = connection.connection.info.backend_pid
            session_settle(run_id=run.id, session_id=session.id, status="ok", result="done", meta={},
                           failure=None, ladder=[])
        finally:
            connections.close_all()

    thread = threading.Thread(target=settle)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM agents_app_{held} WHERE id = %s FOR UPDATE", [rows[held]])
        thread.start()
        wait_until(lambda: settling.get("pid") and _waits_for_a_lock(cursor, settling["pid"]), 10,
                   f"the settle waiting for the {held}'s lock")
        for name in after:  # not locked by the settle: NOWAIT would raise
            cursor.execute(f"SELECT 1 FROM agents_app_{name} WHERE id = %s FOR UPDATE NOWAIT", [rows[name]])
    thread.join(10)
    assert Run.objects.get(pk=run.pk).status == "succeeded"


def _waits_for_a_lock(cursor, pid: int) -> bool:
    cursor.execute("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted)", [pid])
    return cursor.fetchone()[0]


def test_the_sessions_model_is_recorded_without_waiting_for_the_disks_flush(team_a, unserved):
    """Recording the session's resolved model is a transaction of its own: its commit does not wait for the WAL's
    flush (this backend's fsyncs, as PostgreSQL counts them), where a plain statement's does."""
    from django.db import connection

    from agents_app.execution.lifecycle import session_begin
    from agents_app.execution.session import _MODEL_SQL, session_prepare
    from agents_app.llm.scripted import MemoryCursor
    from agents_app.models import Session

    def fsyncs():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")  # this backend's counts, as of its last commit
            cursor.execute("SELECT fsyncs FROM pg_stat_get_backend_io(pg_backend_pid()) "
                           "WHERE object = 'wal' AND context = 'normal'")
            return cursor.fetchone()[0]

    agent(team_a, "Stepper")
    run = run_start(team=team_a, agent="stepper", input="Write notes", script=script(0))
    [root] = Activation.objects.filter(run=run)
    start = session_begin(activation_id=root.id, worker="host:1")
    before = fsyncs()
    resolved, _ = session_prepare(run=start.run, session=start.session, agent=start.agent, ref="",
                                  cursor=MemoryCursor(dict(start.run.script_cursor)))
    after = fsyncs()
    with connection.cursor() as cursor:
        cursor.execute(_MODEL_SQL, [resolved.provider_slug, resolved.model, "small", start.session.id])
    plain = fsyncs()
    assert (after - before, plain - after) == (0, 1)
    row = Session.objects.values("provider", "model", "tier").get(pk=start.session.id)
    assert row == {"provider": resolved.provider_slug, "model": resolved.model, "tier": "small"}


def test_a_runs_start_writes_in_three_round_trips(team_a, unserved, tmp_path):
    """The API's start, once its checks have read the agent: BEGIN (psycopg waits for its answer), the two
    INSERTs in one round trip (a pipeline), the COMMIT; the run, its root and its first events all written."""
    from django.db import connection
    from psycopg import pq

    from agents_app.execution.runs import start_rows
    from tests.runs import events

    agent(team_a, "Stepper")
    rows = start_rows(team=team_a, agent="stepper", script=script(0))
    trace = tmp_path / "libpq.trace"
    with open(trace, "w") as out:
        pgconn = connection.connection.pgconn
        pgconn.trace(out.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            run = run_start(team=team_a, agent="stepper", input="Write notes", script=script(0), rows=rows)
        finally:
            pgconn.untrace()
    messages = trace.read_text().splitlines()
    answered = [line for line in messages if "\tReadyForQuery\t" in line]
    assert len(answered) == 3, messages
    sent = [line.split("\t")[2:] for line in messages if line.startswith("F\t")]
    executed = [kind for kind, *_ in sent if kind in ("Execute", "Sync", "Query")]
    assert executed == ["Execute", "Sync", "Execute", "Execute", "Sync", "Query"], sent
    assert 'COMMIT' in sent[-1][1] and 'BEGIN' in sent[0][1], sent
    [root] = Activation.objects.filter(run=run)
    assert (root.status, root.kind) == ("ready", "root")
    assert [e.type for e in events(run)] == ["run_start", "activation_queued"]
