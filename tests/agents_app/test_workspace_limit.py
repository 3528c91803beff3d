"""The per-run workspace limits (MAS_WORKSPACE_MAX_BYTES, MAS_WORKSPACE_MAX_FILES) and code_exec's quotas, on the
kernel's real write path."""

import asyncio
import json
import os
import threading
import time

import psycopg
import pytest
from django.db import connections

from agents_app.execution.runs import run_start
from agents_app.execution.tool_requests import workspace_write
from agents_app.execution.store import DatabaseStore, DatabaseWorkspace, pool
from agents_app.execution.workspace_limit import WorkspaceFull
from agents_app.models import Activation, Event, Run, Session, WorkspaceFile
from tests.runs import agent, call, events, finish
from tests.workers import start_worker, stop_worker

pytestmark = [pytest.mark.django_db(transaction=True)]

LIMIT = 200_000
NOTES = "START\n" + "a" * 150_000  # 150,006 bytes: most of the run's 200,000
KID = "---\nname: Kid\n---\n\n" + "k" * 60_000
MANY = "for i in range({n}):\n    open(f'{name}{{i:04}}.txt', 'w').write('x')\n"
FLOOD = "import os\nfor i in range(200):\n    open(f'blob{i:03}.bin', 'wb').write(b'x' * 1024 * 1024)\n"


def refusal(path: str, would_hold: int) -> str:
    return (f"{path} was not written: the run's workspace would hold {would_hold:,} bytes, over its limit of "
            f"{LIMIT:,} bytes (MAS_WORKSPACE_MAX_BYTES). Nothing was changed; delete or shorten files first.")


def too_many(path: str, would_hold: int, most: int) -> str:
    return (f"{path} was not written: the run's workspace would hold {would_hold:,} files, over its limit of "
            f"{most:,} files (MAS_WORKSPACE_MAX_FILES). Nothing was changed; delete files first.")


def session_workspace(team, run: Run, agent: str) -> DatabaseWorkspace:
    """The workspace of a new running session of ``agent`` in the hand-built ``run``, as the kernel's tools see it."""
    session = Session.objects.create(run=run, agent=agent, tier="medium",
                                     activation=Activation.objects.create(run=run, agent=agent, status="running"))
    return DatabaseWorkspace(store=DatabaseStore(run_id=run.id, session_id=session.id, agent=agent, tier="medium",
                                                 cursor=None, budget={}, team_id=team.id))


def on_own_loop(work):
    """``work()`` run on a loop of its own, whose connections end with it (the test database is dropped after)."""
    async def run():
        try:
            return await work()
        finally:
            for conn in pool().idle:
                await conn.close()

    return asyncio.run(run())


@pytest.mark.worker
def test_a_run_at_its_workspace_limit_gets_tool_errors_and_carries_on(team_a, monkeypatch):
    from mas_project.celery import app

    queue = f"quota-{os.getpid()}"
    monkeypatch.setitem(app.conf, "task_default_queue", queue)
    # 102 files: notes.md, code_exec's 100 and ok.txt.
    worker = start_worker(queue, queue=queue, env={"MAS_WORKSPACE_MAX_BYTES": str(LIMIT),
                                                   "MAS_WORKSPACE_MAX_FILES": "102"})
    try:
        agent(team_a, "Coder", "tools:\n- vfs_write\n- vfs_edit\n- spawn_agent\n- code_exec\n")
        script = {"coder": [
            call("vfs_write", path="notes.md", content=NOTES),
            call("vfs_write", path="more.md", content="b" * 60_000),
            call("vfs_edit", path="notes.md", old="START", new="S" * 60_000),
            call("spawn_agent", filename="kid.md", content=KID, task="go"),
            call("code_exec", language="python", code=MANY.format(n=100, name="f")),  # exactly the file cap
            call("code_exec", language="python", code=MANY.format(n=3000, name="g")),
            call("code_exec", language="python", code=FLOOD),
            call("code_exec", language="python", code="open('big.txt', 'w').write('g' * 60_000)"),
            call("vfs_write", path="ok.txt", content="fine"),  # the 102nd file
            call("vfs_write", path="extra.txt", content="x"),
            call("code_exec", language="python", code="open('ok.txt', 'w').write('finer'); open('new.txt', 'w')"),
            call("vfs_write", path="ok.txt", content="finest"),  # a file already there: written at the cap
            {"text": "done"},
        ]}
        run = finish(run_start(team=team_a, agent="coder", input="Fill it", script=script))
    finally:
        stop_worker(worker)
    assert (run.status, run.result) == ("succeeded", "done")
    results = [(e.data["name"], e.data["ok"], e.data["error_kind"], e.data["content"])
               for e in events(run, "tool_result")]
    assert [r[:3] for r in results] == [
        ("vfs_write", True, None), ("vfs_write", False, "policy_denied"), ("vfs_edit", False, "policy_denied"),
        ("spawn_agent", False, "policy_denied"), ("code_exec", True, None), ("code_exec", False, "policy_denied"),
        ("code_exec", False, "policy_denied"), ("code_exec", False, "policy_denied"), ("vfs_write", True, None),
        ("vfs_write", False, "policy_denied"), ("code_exec", False, "policy_denied"), ("vfs_write", True, None)]
    assert results[1][3] == refusal("more.md", 150_006 + 60_000)
    assert results[2][3] == refusal("notes.md", 150_006 - 5 + 60_000)
    assert results[3][3] == refusal("agents/kid.md", 150_006 + len(KID))
    assert json.loads(results[4][3])["files_written"] == [f"f{i:04}.txt" for i in range(100)]
    many, flood, big = (json.loads(r[3]) for r in results[5:8])
    assert many["error"] == ("code_exec: the program created or changed 3,000 files; at most 100 may come back from "
                             "one call (MAS_CODE_EXEC_MAX_FILES). No files were copied back to the workspace.")
    assert flood["error"] == (
        "code_exec: the program filled its working directory: at most 32 MiB may be added to it per call "
        "(MAS_CODE_EXEC_WRITE_BYTES; each file takes at least 4 KiB); writes beyond failed with 'No space left on "
        "device'. No files were copied back to the workspace.")
    assert flood["stderr"].endswith("OSError: [Errno 28] No space left on device\n")
    assert big["error"] == ("code_exec: its files would bring the run's workspace to 210,106 bytes, over its limit "
                            "of 200,000 bytes (MAS_WORKSPACE_MAX_BYTES). No files were copied back to the workspace.")
    assert results[9][3] == too_many("extra.txt", 103, 102)
    one_more = json.loads(results[10][3])
    assert one_more["error"] == ("code_exec: its files would bring the run's workspace to 103 files, over its limit "
                                 "of 102 files (MAS_WORKSPACE_MAX_FILES). No files were copied back to the workspace.")
    assert many["files_written"] == flood["files_written"] == big["files_written"] == one_more["files_written"] == []
    # One file_change per file that was written: none of the 3,000, the flood's or the refused writes.
    expected = ["notes.md", *(f"f{i:04}.txt" for i in range(100)), "ok.txt"]
    assert [e.data["path"] for e in events(run, "file_change")] == [*expected, "ok.txt"]
    files = dict(WorkspaceFile.objects.filter(run=run).values_list("path", "content"))
    assert sorted(files) == sorted(expected) and files["notes.md"] == NOTES and files["ok.txt"] == "finest"
    assert sum(len(text.encode()) for text in files.values()) == 150_006 + 100 + 6 <= LIMIT
    assert list(Activation.objects.filter(run=run).values_list("agent", flat=True)) == ["coder"]  # no kid spawned


def test_two_sessions_writing_at_once_cannot_both_pass_the_limit(team_a, settings):
    settings.MAS_WORKSPACE_MAX_BYTES = 1000
    run = Run.objects.create(team=team_a, agent="lead", status="running")
    a, b = (session_workspace(team_a, run, name) for name in ("a", "b"))
    # Hold the run's row so both writes are under way before either can commit.
    params = {k: v for k, v in connections["default"].get_connection_params().items()
              if k not in ("cursor_factory", "context", "server_side_binding")}
    holder, watcher = psycopg.connect(**params), psycopg.connect(**params, autocommit=True)

    async def both():
        return await asyncio.gather(a.write("a.txt", "a" * 600), b.write("b.txt", "b" * 600), return_exceptions=True)

    outcome = {}
    writer = threading.Thread(target=lambda: outcome.update(results=on_own_loop(both)))
    try:
        holder.execute("SELECT 1 FROM agents_app_run WHERE id = %s FOR UPDATE", [run.id])
        writer.start()
        deadline, waiting = time.monotonic() + 20, 0
        while waiting < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
            waiting = watcher.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                      "AND datname = current_database()").fetchone()[0]
        assert waiting == 2
    finally:
        holder.commit()
        holder.close()
        watcher.close()
        if writer.ident is not None:
            writer.join(30)
    results = outcome["results"]
    assert sorted(type(r).__name__ for r in results) == ["WorkspaceFull", "int"]
    [written] = [name for name, r in zip([("a.txt", "a"), ("b.txt", "b")], results) if r == 1]  # version 1
    [error] = [r for r in results if isinstance(r, Exception)]
    other = "b.txt" if written[0] == "a.txt" else "a.txt"
    assert str(error) == (f"{other} was not written: the run's workspace would hold 1,200 bytes, over its limit of "
                          "1,000 bytes (MAS_WORKSPACE_MAX_BYTES). Nothing was changed; delete or shorten files first.")
    assert dict(WorkspaceFile.objects.filter(run=run).values_list("path", "content")) == {written[0]: written[1] * 600}
    assert [(e.seq, e.type, e.data["path"]) for e in Event.objects.filter(run=run).order_by("seq")] == [
        (1, "file_change", written[0])]
    assert Run.objects.get(pk=run.pk).next_seq == 1  # the refused write's numbers were rolled back


def test_the_service_refuses_a_write_past_the_limit_and_keeps_what_was_there(team_a, settings):
    settings.MAS_WORKSPACE_MAX_BYTES = 1000
    run = Run.objects.create(team=team_a, agent="lead", status="running")
    workspace_write(run_id=run.id, path="a.txt", content="a" * 900, agent="lead", session_id=None)
    workspace_write(run_id=run.id, path="a.txt", content="é" * 500, agent="lead", session_id=None)  # 1,000 bytes
    with pytest.raises(WorkspaceFull) as refused:
        workspace_write(run_id=run.id, path="b.txt", content="b", agent="lead", session_id=None)
    assert str(refused.value) == refusal("b.txt", 1001).replace(f"{LIMIT:,}", "1,000")
    assert refused.value.kind == "policy_denied"
    assert dict(WorkspaceFile.objects.filter(run=run).values_list("path", "content")) == {"a.txt": "é" * 500}
    assert [e.data["action"] for e in Event.objects.filter(run=run, type="file_change").order_by("seq")] == [
        "created", "updated"]


def test_the_service_refuses_a_file_past_the_count_and_still_writes_the_files_there(team_a, settings):
    settings.MAS_WORKSPACE_MAX_FILES = 2
    run = Run.objects.create(team=team_a, agent="lead", status="running")
    for path in ("a.txt", "b.txt"):
        workspace_write(run_id=run.id, path=path, content=path, agent="lead", session_id=None)
    with pytest.raises(WorkspaceFull) as refused:
        workspace_write(run_id=run.id, path="c.txt", content="c", agent="lead", session_id=None)
    assert str(refused.value) == too_many("c.txt", 3, 2)
    settings.MAS_WORKSPACE_MAX_FILES = 1  # lowered: the run holds more than it may, and may still change them
    workspace_write(run_id=run.id, path="a.txt", content="A", agent="lead", session_id=None)
    assert dict(WorkspaceFile.objects.filter(run=run).values_list("path", "content")) == {"a.txt": "A",
                                                                                         "b.txt": "b.txt"}
    assert [(e.data["path"], e.data["action"]) for e in Event.objects.filter(run=run, type="file_change")
            .order_by("seq")] == [("a.txt", "created"), ("b.txt", "created"), ("a.txt", "updated")]
    assert Run.objects.get(pk=run.pk).next_seq == 3  # the refused write's number was rolled back


def test_the_session_store_refuses_a_file_past_the_count(team_a, settings):
    settings.MAS_WORKSPACE_MAX_FILES = 2
    run = Run.objects.create(team=team_a, agent="lead", status="running")
    workspace = session_workspace(team_a, run, "lead")

    async def writes():
        done = [await workspace.write(path, "x") for path in ("a.txt", "b.txt")]
        try:
            await workspace.write("c.txt", "x")
        except WorkspaceFull as error:
            done.append(str(error))
        done.append(await workspace.write("b.txt", "y"))  # a file already there
        return done

    assert on_own_loop(writes) == [1, 1, too_many("c.txt", 3, 2), 2]
    assert dict(WorkspaceFile.objects.filter(run=run).values_list("path", "content")) == {"a.txt": "x", "b.txt": "y"}
    assert [e.data["path"] for e in Event.objects.filter(run=run, type="file_change").order_by("seq")] == [
        "a.txt", "b.txt", "b.txt"]


def test_the_workspace_gives_all_its_files_in_one_read(team_a, monkeypatch):
    """code_exec copies the whole workspace into its sandbox: with thousands of files, a read per file was
    thousands of round trips."""
    run = Run.objects.create(team=team_a, agent="lead", status="running")
    workspace = session_workspace(team_a, run, "lead")

    async def read():
        for path in ("b.txt", "a/z.md", "a/b.md"):
            await workspace.write(path, path * 2)
        statements = statements_counted(monkeypatch)
        return await workspace.contents(), statements

    contents, statements = on_own_loop(read)
    assert list(contents.items()) == [("a/b.md", "a/b.mda/b.md"), ("a/z.md", "a/z.mda/z.md"), ("b.txt", "b.txtb.txt")]
    assert len(statements) == 1


def test_the_workspace_reads_the_files_asked_for_of_its_own_run_in_one_read(team_a, monkeypatch):
    """vfs_search reads the files it searches in batches, each one statement: the run's files of those asked for
    (another run's file of the same path is not among them; a path with no file is left out)."""
    run, other = (Run.objects.create(team=team_a, agent="lead", status="running") for _ in range(2))
    workspace, elsewhere = session_workspace(team_a, run, "lead"), session_workspace(team_a, other, "lead")

    async def read():
        for path in ("b.txt", "a/z.md", "a/b.md"):
            await workspace.write(path, path * 2)
        await elsewhere.write("c.txt", "another run's")
        statements = statements_counted(monkeypatch)
        return await workspace.read_many(["a/z.md", "c.txt", "b.txt", "missing.md"]), statements

    contents, statements = on_own_loop(read)
    assert contents == {"a/z.md": "a/z.mda/z.md", "b.txt": "b.txtb.txt"}
    assert len(statements) == 1


def statements_counted(monkeypatch) -> list[str]:
    """The statements the loop's connections send from now on."""
    statements: list[str] = []
    execute = psycopg.AsyncConnection.execute

    async def counted(conn, query, *args, **kwargs):
        statements.append(query)
        return await execute(conn, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncConnection, "execute", counted)
    return statements
