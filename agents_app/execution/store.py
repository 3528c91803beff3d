"""A session's storage on the worker's hot path: checkpoints, events and files.

Everything a step writes goes through an async PostgreSQL connection owned
by the worker's session loop — no ORM, no thread hop — in one transaction
per write: the events buffered since the last write, the session's usage
added to the run and the session, its checkpoint, and (for a file write)
the file and its ``file_change`` event, checked against the run's workspace
limit before commit. A tool's file write (vfs_write, vfs_edit) is left
uncommitted and committed with the next write, the checkpoint recording its
result: one commit per step, and never the file without its result. Events
are pushed to websockets after commit, in order, without the session waiting
for Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, AsyncIterator

import psycopg
from django.conf import settings
from django.db import connections
from django.db.models import Q
from django.utils import timezone

from agents_app.execution.budget import RESERVE_SQL, Reservation, budget_warn, refusal, reserve_params, warning_due
from agents_app.execution.journal import Journal, Staged
from mas_core.eventlog import INSERT_NUMBERED, Entry, changes_run, entry, events_param, pushed
from mas_core.events import events_push_async
from agents_app.execution.workspace_limit import USED_SQL, workspace_check
from agents_app.kernel.loop import PolicyDenied, SessionState
from agents_app.llm.scripted import MemoryCursor
from agents_app.models import Session
from mas_core import jsontext, phases
from mas_core.lanes import FairSemaphore
from mas_core.loops import loop_local
from mas_core.runner import db
from tools_app.plugin import ToolAborted

logger = logging.getLogger(__name__)


# -- connections ------------------------------------------------------------------------


class ConnectionPool:
    """A few autocommit connections for one event loop; a broken one is dropped, not reused."""

    def __init__(self, *, size: int, loop: asyncio.AbstractEventLoop) -> None:
        self.size, self.loop = size, loop
        self.idle: list[psycopg.AsyncConnection] = []
        self.slots = FairSemaphore(size)  # the teams' sessions take turns at it

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection]:
        """An autocommit connection: one statement is one transaction."""
        async with self.slots:
            phases.count("async connection use")
            conn = self.idle.pop() if self.idle else await psycopg.AsyncConnection.connect(**_conn_params())
            try:
                yield conn
            except BaseException:
                if conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    await conn.close()
                    raise
                self.idle.append(conn)
                raise
            self.idle.append(conn)

    async def acquire(self) -> psycopg.AsyncConnection:
        """A connection kept past one statement (a transaction left open): :meth:`release` gives it back."""
        await self.slots.acquire()
        phases.count("async connection use")
        try:
            return self.idle.pop() if self.idle else await psycopg.AsyncConnection.connect(**_conn_params())
        except BaseException:
            self.slots.release()
            raise

    async def release(self, conn: psycopg.AsyncConnection) -> None:
        """Give back a connection of :meth:`acquire`; one not idle (broken, or in a transaction) is closed."""
        try:
            if conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                await conn.close()
            else:
                self.idle.append(conn)
        finally:
            self.slots.release()


def _conn_params() -> dict[str, Any]:
    # Prepared at their third run on a connection, as Django's are (mas_project/settings.py): a step's
    # statements are a few long ones, which Postgres would otherwise parse and plan at every write. And planned
    # once there (a generic plan): left to choose, Postgres plans a prepared statement's first five runs for their
    # values, then keeps doing so when its estimates favour it, which for the writes they did on some connections
    # and not on others (0.95 ms of its CPU a step there). Every statement of these connections finds
    # its rows by key, so one plan serves all values.
    params = {**connections["default"].get_connection_params(), "autocommit": True, "prepare_threshold": 2}
    for django_only in ("cursor_factory", "context", "server_side_binding"):
        params.pop(django_only, None)
    params["options"] = " ".join(filter(None, [params.get("options"), "-c plan_cache_mode=force_generic_plan"]))
    return params


_pools: dict[tuple[int, str], dict[int, ConnectionPool]] = {}  # by process and database: each loop's pool


def pool() -> ConnectionPool:
    """This process's pool for the running loop (and the current database)."""
    loops = _pools.setdefault((os.getpid(), connections["default"].settings_dict["NAME"]), {})
    return loop_local(loops, lambda loop: ConnectionPool(size=int(os.environ.get("MAS_DB_ASYNC_CONNECTIONS", "8")),
                                                         loop=loop))


# -- the store --------------------------------------------------------------------------


# One statement per write, so a write is one round trip and one commit. ``l`` locks the run's row and
# ``g`` the session's, the order every writer of a run locks in, and ``g`` lets the write through only as
# the next write of the worker holding the session's claim: a write retried after its commit was lost on
# the way back, and one of a worker whose session was taken over, write nothing (the store then reads the
# session: DatabaseStore._applied_before). Everything else follows from ``g``. ``r`` numbers the
# events from the run's counter (the row stays locked until commit, so numbers are gap-free
# and in commit order), adds the session's usage and releases the reservations of the calls that ended
# (agents_app.execution.budget); ``e`` inserts the events; ``s`` adds the
# usage to the session, stores its counters and counts the write (keeping what it returns, for a retry);
# ``j`` appends the checkpoint's new history entries
# (idempotent: a write retried after a failure inserts nothing twice), each with the seq of the last
# event emitted before it was staged (``r.base`` + its offset in this write's events: what a fork cuts
# at), and ``k`` marks the entries a compaction replaced. The entries and the marks are each one JSON array of
# objects (NULL for none), not parallel arrays: psycopg dumps a list parameter element by element, eight of them
# about 0.12 ms of the loop's CPU per write, and one text 0.02 ms. An entry's payload and counters, JSON texts
# already, stand in the array as they are (``json`` fields: PostgreSQL gives their text back unchanged), not encoded
# again as strings (:func:`_json_field`: a JSON string there is a text encoded). A file change adds ``f``, its event
# and ``v``, the file's version (kept while the run's history is under ``MAS_WORKSPACE_HISTORY_MAX_BYTES``).
_WRITE = """
WITH l AS (
  SELECT 1 FROM agents_app_run WHERE id = %(run)s::uuid FOR UPDATE
), g AS (
  SELECT 1 FROM l, agents_app_session
  WHERE id = %(session)s::uuid AND claim IS NOT DISTINCT FROM %(claim)s::uuid AND writes = %(write)s::bigint - 1
  FOR UPDATE OF agents_app_session
), {file}r AS (
  UPDATE agents_app_run SET next_seq = next_seq + %(n)s{file_count}, prompt_tokens = prompt_tokens + %(pt)s,
    completion_tokens = completion_tokens + %(ct)s, cost_usd = cost_usd + %(cost)s::numeric,
    reserved_usd = GREATEST(reserved_usd - %(release)s::numeric, 0),
    reserved_large = GREATEST(reserved_large - %(release_large)s::int, 0),
    large_tier_uses = large_tier_uses + %(large)s, history_bytes = history_bytes + %(hb)s,
    script_cursor = CASE WHEN %(pos)s::jsonb IS NULL THEN script_cursor ELSE script_cursor || %(pos)s::jsonb END
  FROM g WHERE id = %(run)s::uuid RETURNING next_seq - (%(n)s{file_count}) AS base, history_bytes AS history
), e AS (
  {insert}{file_event}
), s AS (
  UPDATE agents_app_session SET prompt_tokens = prompt_tokens + %(pt)s,
    completion_tokens = completion_tokens + %(ct)s, cost_usd = cost_usd + %(cost)s::numeric,
    reserved_usd = GREATEST(reserved_usd - %(release)s::numeric, 0),
    reserved_large = GREATEST(reserved_large - %(release_large)s::int, 0),
    state = COALESCE(%(state)s::jsonb, state), heartbeat_at = CASE WHEN %(beat)s THEN now() ELSE heartbeat_at END,
    writes = %(write)s::bigint, last_write = {last}
  FROM r WHERE id = %(session)s::uuid
), j AS (
  INSERT INTO agents_app_sessionentry (session_id, seq, kind, payload, replaced_by, event_seq, counters)
  SELECT %(session)s::uuid, x.seq, x.kind,
    CASE json_typeof(x.payload) WHEN 'string' THEN x.payload #>> '{{}}' ELSE x.payload::text END, x.rb, r.base + x.off,
    CASE json_typeof(x.counters) WHEN 'string' THEN x.counters #>> '{{}}' ELSE x.counters::text END
  FROM r, json_to_recordset(%(entries)s::json) AS x(seq int, kind text, payload json, rb int, off int, counters json)
  ON CONFLICT (session_id, seq) DO NOTHING
), k AS (
  UPDATE agents_app_sessionentry AS t SET replaced_by = x.rb
  FROM r, json_to_recordset(%(marks)s::json) AS x(seq int, rb int)
  WHERE %(marks)s::text IS NOT NULL  -- a one-time filter: most writes mark nothing, and scan nothing
    AND t.session_id = %(session)s::uuid AND t.seq = x.seq AND t.replaced_by IS NULL
){version}
SELECT r.base{file_columns} FROM r{file_from}
"""
_FILE_EVENT = """
  UNION ALL
  SELECT %(run)s::uuid, r.base + %(n)s + 1, 'file_change', %(agent)s::text, %(session)s::uuid, {data}, %(at)s
  FROM r, f"""
_VERSION = """, v AS (
  INSERT INTO agents_app_workspacefileversion (run_id, path, seq, content)
  SELECT %(run)s::uuid, %(path)s::text, r.base + %(n)s + 1, %(content)s::text
  FROM r, f WHERE r.history <= %(history_max)s
)"""
_WRITE = _WRITE.replace("{insert}", INSERT_NUMBERED)
WRITE_SQL = _WRITE.format(file="", file_count="", file_event="", file_columns="", file_from="", version="",
                          last="jsonb_build_array(r.base)")
FILE_WRITE_SQL = _WRITE.format(
    file="""f AS (
  INSERT INTO agents_app_workspacefile (run_id, path, content, version, author, session_id, updated_at)
  SELECT %(run)s::uuid, %(path)s, %(content)s, 1, %(agent)s::text, %(session)s::uuid, now() FROM g
  ON CONFLICT (run_id, path) DO UPDATE SET content = EXCLUDED.content,
    version = agents_app_workspacefile.version + 1, author = EXCLUDED.author,
    session_id = EXCLUDED.session_id, updated_at = EXCLUDED.updated_at
  RETURNING version, xmax = 0 AS created
), """,
    file_count=" + 1",
    file_event=_FILE_EVENT.format(data="jsonb_build_object('path', %(path)s::text, 'version', f.version, "
                                       "'action', CASE WHEN f.created THEN 'created' ELSE 'updated' END, "
                                       "'bytes', %(bytes)s::bigint)"),
    file_columns=", f.version, f.created", file_from=", f", version=_VERSION,
    last="jsonb_build_array(r.base, (SELECT version FROM f), (SELECT created FROM f))",
)
FILE_DELETE_SQL = _WRITE.format(
    file="""f AS (
  DELETE FROM agents_app_workspacefile WHERE run_id = %(run)s::uuid AND path = %(path)s AND EXISTS (SELECT FROM g)
  RETURNING 1 AS deleted
), """,
    file_count=" + (SELECT count(*) FROM f)",
    file_event=_FILE_EVENT.format(data="jsonb_build_object('path', %(path)s::text, 'action', 'deleted')"),
    file_columns=", (SELECT count(*) FROM f)", file_from="", version=_VERSION,
    last="jsonb_build_array(r.base, (SELECT count(*) FROM f))",
)


def _entries_param(entries: list[tuple[int, str, str, int | None]], extra: list[tuple[int, str | None]]) -> str | None:
    """The checkpoint's new history entries, each with its event offset and counters, for ``j`` of :data:`_WRITE`:
    written around their payloads' and counters' JSON texts (a ``seen`` entry's payload, a digest, is encoded)."""
    if not entries:
        return None
    return "[" + ",".join(
        '{"seq": %d, "kind": %s, "payload": %s, "rb": %s, "off": %d, "counters": %s}' % (
            seq, jsontext.dumps(kind), jsontext.dumps(payload) if kind == "seen" else _json_field(payload),
            "null" if rb is None else rb, off, "null" if counters is None else _json_field(counters))
        for (seq, kind, payload, rb), (off, counters) in zip(entries, extra, strict=True)) + "]"


def _json_field(text: str) -> str:
    """A JSON object's text as a value of :data:`_WRITE`'s ``x``: as it is, or encoded as a JSON string when it holds
    the escape ``\\u0000``, which PostgreSQL's JSON functions refuse to read (a NUL cannot be text), while the
    string's text, once decoded, holds it as six characters."""
    return json.dumps(text) if "\\u0000" in text else text


def _marks_param(marks: list[tuple[int, int]]) -> str | None:
    """The entries a compaction replaced (seq, by), for ``k`` of :data:`_WRITE`."""
    return jsontext.dumps([{"seq": seq, "rb": by} for seq, by in marks]) if marks else None


class SessionTakenOver(ToolAborted):
    """Another worker claimed this session (this one was thought dead): its writes are refused, and it stops
    without recording anything more — the new owner goes on from the last checkpoint."""


class WriteRefused(Exception):
    """The database refused a session's write for what it holds (a value out of range, say), not for
    being unreachable: writing it again cannot succeed, so the session fails instead of waiting."""


# Errors of a reachable database about the statement itself (psycopg.DataError, IntegrityError, …).
_TRANSIENT = (psycopg.OperationalError, psycopg.InterfaceError)


COMPACTOR_KEY = "compactor"  # the scripted provider's script key of the summaries compaction asks for
JUDGE_KEY = "guardrail"  # … and of the verdicts llm_judge guardrails ask for (agents_app.execution.guardrail_calls)


class DatabaseStore:
    """:class:`agents_app.kernel.loop.SessionStore` on Postgres and the Channels layer.

    Events are buffered and written with the next checkpoint or file write.
    The ones a watcher wants at once (a model call starting, streamed text, a
    tool starting) are written within ``MAS_LIVE_EVENT_DELAY_MS`` even when
    nothing else is — a fast model's answer or a file write usually takes
    them along sooner. Writes of one session never overlap, so its events
    are numbered in the order they happened. The cancel flag is set by the
    process's :class:`SessionMonitor`, not polled.
    """

    LIVE = frozenset({"llm_request", "stream_chunk", "tool_call"})

    def __init__(self, *, run_id, session_id, agent: str, tier: str, cursor: MemoryCursor | None,
                 budget: dict[str, Any], team_id: int | None = None, journal: Journal | None = None,
                 claim=None, writes: int = 0) -> None:
        # tier: of the model the session calls, as its provider row says ("" for none): what the budget counts.
        self.run_id, self.session_id, self.agent, self.tier, self.cursor = run_id, session_id, agent, tier, cursor
        self.team_id = team_id
        self.budget = budget
        # The session's claim (lifecycle.session_begin) and how many writes it holds: each write is the next.
        self.claim, self.writes = claim, writes
        # What every write sends, found once: the ids as text, the settings, this loop's pool (see _pool).
        self.run_key, self.session_key = str(run_id), str(session_id)
        self.claim_key = str(claim) if claim else None
        self.live_delay = float(getattr(settings, "MAS_LIVE_EVENT_DELAY_MS", 20)) / 1000
        self.history_max = settings.MAS_WORKSPACE_HISTORY_MAX_BYTES
        self.db_pool: ConnectionPool | None = None
        self.unsent: tuple | None = None  # a write whose answer was lost: sent again, as it was, first
        # A file write of a tool (see ``deferring``) in a transaction left open, committed with the store's
        # next write — in practice the checkpoint that records the tool's result, so that the file and its
        # result are committed together: (connection, sql, params, file, events, changed, row).
        self.held: tuple | None = None
        self.deferring = False  # set by the session's ToolCaller while a tool may hold its file write
        self.abandoned = False  # a held file write was lost after its tool saw it succeed: nothing more is written
        self.pending: list[Entry] = []
        self.usage = [0, 0, Decimal(0), 0]
        # Worst costs reserved for the calls in flight (a compaction's inside its session's call), and
        # those of calls that ended, released by the next write.
        self.reservations: list[tuple[Decimal, int]] = []  # worst cost, large-tier uses
        self.releasing, self.releasing_large = Decimal(0), 0
        self.cancel_requested = False
        self.saved_positions: dict[str, int] = (
            {key: cursor.get(key) for key in (agent, COMPACTOR_KEY, JUDGE_KEY) if key in cursor.positions}
            if cursor is not None else {})
        self.journal = journal or Journal()
        # The checkpoint not written yet: new history entries, marks, counters (JSON), script positions.
        self.pending_entries: list[tuple[int, str, str, int | None]] = []
        # Per pending entry: how many of the pending events were emitted before it, and the counters of the
        # checkpoint it ends (None for the others) — see SessionEntry.event_seq.
        self.pending_extra: list[tuple[int, str | None]] = []
        self.pending_marks: list[tuple[int, int]] = []
        self.pending_counters: str | None = None
        self.pending_positions: dict[str, int] | None = None
        self.checkpoint_bytes = 0  # of the last checkpoint staged (bench/long_session.py reads it)
        self.pushing: asyncio.Future | None = None
        self.waiting_push: list[str] | None = None  # the events of the push waiting for the one before (JSON)
        self.waiting_changes = False  # … and whether they change the run (its team's run list hears)
        self.writing = asyncio.Lock()
        self.live_timer: asyncio.TimerHandle | None = None
        self.live_write: asyncio.Task | None = None

    def _pool(self) -> ConnectionPool:
        # The running loop's pool, kept: :func:`pool` looks the process, the loop and the database up at each
        # call. (A session's store lives on one loop; a test's may write from several, one after another.)
        if self.db_pool is None or self.db_pool.loop is not asyncio.get_running_loop():
            self.db_pool = pool()
        return self.db_pool

    # SessionStore

    async def checkpoint(self, state: SessionState, *, before_tools: bool = False) -> None:
        with phases.timed("checkpoint staging"):
            self._stage_checkpoint(state)
        if before_tools:
            # Written with the tool's own write (a file), or before a tool that writes elsewhere
            # (see session.call_tool), or within the live delay — whichever comes first.
            self._schedule_live_write()
            return
        await self._write()

    def _stage_checkpoint(self, state: SessionState) -> None:
        positions = ({key: self.cursor.get(key) for key in (self.agent, COMPACTOR_KEY, JUDGE_KEY)
                      if key == self.agent or key in self.cursor.positions} if self.cursor is not None else {})
        state.cursor = positions
        staged = len(self.pending_entries)
        self._stage(self.journal.stage(state.messages))
        counters = state.counters()
        self.pending_entries.extend(self.journal.stage_seen(counters.pop("seen_results")))
        self.pending_counters = jsontext.dumps(counters)
        added = len(self.pending_entries) - staged
        if added:
            emitted = len(self.pending)
            self.pending_extra.extend([(emitted, None)] * (added - 1) + [(emitted, self.pending_counters)])
        self.pending_positions = positions
        self.checkpoint_bytes = len(self.pending_counters) + sum(len(e[2]) for e in self.pending_entries)

    def _stage(self, staged: Staged) -> None:
        self.pending_entries.extend(staged.entries)
        self._mark(staged.marks)

    def _mark(self, marks: list[tuple[int, int]]) -> None:
        # An entry not inserted yet is inserted marked: its statement's UPDATE would not see it.
        waiting = {entry[0]: index for index, entry in enumerate(self.pending_entries)}
        for seq, by in marks:
            index = waiting.get(seq)
            if index is None:
                self.pending_marks.append((seq, by))
            else:
                self.pending_entries[index] = (*self.pending_entries[index][:3], by)

    def stage_state(self, state: dict[str, Any]) -> None:
        """Keep ``state`` as the session's state with the next write (a remote agent's session: what it follows)."""
        self.pending_counters = jsontext.dumps(state)

    @property
    def has_checkpoint(self) -> bool:
        return self.pending_counters is not None or bool(self.pending_entries or self.pending_marks)

    async def emit(self, type: str, data: dict[str, Any]) -> None:
        with phases.timed("events"):
            self._emit(type, data)
        if type in self.LIVE:
            if self.live_delay <= 0:
                await self.flush()
            else:
                self._schedule_live_write()

    def _emit(self, type: str, data: dict[str, Any]) -> None:
        self.pending.append(entry(type, agent=self.agent, session_id=self.session_id, data=data))
        if type == "llm_response":
            usage = data["usage"]
            self.usage[0] += usage["prompt_tokens"]
            self.usage[1] += usage["completion_tokens"]
            self.usage[2] += Decimal(data["cost_usd"])
            # A use of the large tier is a call to a model whose row says large; a cached answer called none.
            # (A compaction's summary names the tier of the model it called.)
            self.usage[3] += 1 if (data.get("tier") or self.tier) == "large" and not data.get("cached") else 0

    async def cancelled(self) -> bool:
        return self.cancel_requested

    async def before_model_call(self, state: SessionState | None, *, worst_usd: Decimal, tier: str | None = None) -> None:
        if not self.budget:
            self.reservations.append((Decimal(0), 0))
            return
        if self.usage[2] or self.usage[3] or self.releasing or self.releasing_large or self.held is not None:
            await self.flush()  # the budget reads the run's totals (and locks its row, which a held write holds)
        large = (self.tier if tier is None else tier) == "large"
        async with self._pool().connection() as conn:
            row = await (await conn.execute(RESERVE_SQL, reserve_params(
                run_id=self.run_id, session_id=self.session_id, budget=self.budget, worst_usd=worst_usd,
                large=large))).fetchone()
        reservation = Reservation(*row)
        if warning_due(budget=self.budget, reservation=reservation):
            await self.flush()  # this session's events come before the warning
            await db(budget_warn)(run_id=self.run_id, agent=self.agent, session_id=self.session_id,
                                  warn_cost_usd=self.budget["warn_cost_usd"])
        reason = refusal(budget=self.budget, reservation=reservation, worst_usd=worst_usd)
        if reason:
            raise PolicyDenied(reason)
        self.reservations.append((worst_usd, 1 if large else 0))

    def after_model_call(self) -> None:
        if self.reservations:
            usd, large = self.reservations.pop()
            self.releasing, self.releasing_large = self.releasing + usd, self.releasing_large + large

    # writing

    async def flush(self) -> None:
        """Write the pending events and checkpoint now (before anything else writes for this run)."""
        if self.pending or self.has_checkpoint or self.unsent is not None or self.held is not None:
            await self._write()

    def _schedule_live_write(self) -> None:
        if self.live_timer is None:
            self.live_timer = asyncio.get_running_loop().call_later(self.live_delay, self._write_live)

    def _write_live(self) -> None:
        self.live_timer = None

        async def write() -> None:
            try:
                await self.flush()
            except Exception:  # kept pending: the session's next write retries them
                logger.warning("writing live events failed", extra={"session": str(self.session_id)}, exc_info=True)

        self.live_write = asyncio.ensure_future(write())

    async def file_write(self, path: str, content: str) -> int:
        """Write a workspace file, its ``file_change`` event and the events before it, in one transaction.

        Raises :class:`~agents_app.execution.workspace_limit.WorkspaceFull` (nothing written, the
        events kept for the next write) when the run's workspace would pass its limit.
        """
        row = await self._write(sql=FILE_WRITE_SQL, file={
            "path": path, "content": content, "bytes": len(content.encode("utf-8"))})
        return row[1]

    async def file_delete(self, path: str) -> bool:
        row = await self._write(sql=FILE_DELETE_SQL, file={"path": path, "content": None, "bytes": None})
        return bool(row[1])

    async def _write(self, *, sql: str = WRITE_SQL, file: dict[str, Any] | None = None) -> tuple | None:
        with phases.timed("checkpoint+events write" if file is None else "file write"):
            return await self._write_now(sql=sql, file=file)

    async def _write_now(self, *, sql: str, file: dict[str, Any] | None) -> tuple | None:
        async with self.writing:
            if self.live_timer is not None:
                self.live_timer.cancel()
                self.live_timer = None
            if self.abandoned:
                raise SessionTakenOver(f"session {self.session_id} lost a file write its tool saw succeed: "
                                       "it is resumed from its last checkpoint")
            if self.held is not None and file is not None:
                await self._commit_held()  # a second file write (a long result kept as a file): the first alone
            if self.unsent is not None:
                await self._settle_unsent()
                if file is None and not (self.pending or self.has_checkpoint or self.pending_positions
                                         or any(self.usage) or self.releasing or self.releasing_large):
                    return None
            counters, entries, marks = self.pending_counters, self.pending_entries, self.pending_marks
            positions, extra = self.pending_positions, self.pending_extra
            self.pending_counters, self.pending_entries, self.pending_marks = None, [], []
            self.pending_extra = []
            self.pending_positions = None
            changed = {key: value for key, value in (positions or {}).items()
                       if self.saved_positions.get(key) != value}
            events, usage, release = self.pending, self.usage, (self.releasing, self.releasing_large)
            self.pending, self.usage = [], [0, 0, Decimal(0), 0]
            self.releasing, self.releasing_large = Decimal(0), 0
            params = {
                "run": self.run_key, "session": self.session_key, "agent": self.agent,
                "n": len(events), "pt": usage[0], "ct": usage[1], "cost": str(usage[2]), "large": usage[3],
                "release": str(release[0]), "release_large": release[1],
                "pos": jsontext.dumps(changed) if changed else None, "state": counters,
                "beat": counters is not None,
                "events": events_param(events), "claim": self.claim_key,
                "write": self.writes + 1,
                "entries": _entries_param(entries, extra), "marks": _marks_param(marks),
                "hb": (file["bytes"] or 0) if file is not None else 0,
                "history_max": self.history_max,
            }
            if file is not None:
                params |= {**file, "at": datetime.now(UTC)}
            batch = (events, usage, release, entries, marks, extra, counters, positions)
            phases.count("statement")
            if self.held is not None:
                return await self._write_committing_held(sql, params, file, batch, changed)
            if self.deferring and sql is FILE_WRITE_SQL:
                return await self._write_held(params, file, batch, changed)
            try:
                async with self._pool().connection() as conn:
                    if sql is FILE_WRITE_SQL:
                        row = await _write_within_limit(conn, params)
                    else:
                        row = await (await conn.execute(sql, params)).fetchone()
                    if row is None:
                        row = await self._applied_before(conn, params["write"])
            except BaseException as error:
                if isinstance(error, (*_TRANSIENT, asyncio.CancelledError)):
                    # Committed or not, nobody knows yet: the next write finds out first (_settle_unsent).
                    self.unsent = (sql, params, file, batch, changed, None)
                    raise
                self._put_back(batch)  # not written
                if isinstance(error, psycopg.Error):
                    raise WriteRefused(f"{type(error).__name__}: {str(error).splitlines()[0]}") from error
                raise
            return self._written(sql, params, file, events, changed, row)

    async def _write_held(self, params: dict[str, Any], file: dict[str, Any], batch: tuple,
                          changed: dict[str, int]) -> tuple:
        """A tool's file write in a transaction left open (``self.held``): its row now, its commit with the
        next write. Not committed, it cannot be in doubt: whatever goes wrong, nothing of it was written."""
        conn = await self._pool().acquire()
        try:
            async with conn.pipeline():
                await conn.execute("BEGIN")
                written = await conn.execute(FILE_WRITE_SQL, params)
                total = await conn.execute(USED_SQL, [params["run"]])
            # Read once the pipeline is synced, not inside it: a fetch there asks for the results first (a
            # flush) and the sync is a second round trip.
            row = await written.fetchone()
            used = await total.fetchone()
            if row is None:  # refused: taken over, or out of order (raises); else applied already (a retry)
                row = await self._applied_before(conn, params["write"])
                await conn.execute("ROLLBACK")
                await self._pool().release(conn)
                return self._written(FILE_WRITE_SQL, params, file, batch[0], changed, row)
            workspace_check(path=params["path"], used=used, created=row[2])
        except BaseException as error:
            await _let_go(conn)
            self._put_back(batch)  # not written
            if isinstance(error, psycopg.Error) and not isinstance(error, _TRANSIENT):
                raise WriteRefused(f"{type(error).__name__}: {str(error).splitlines()[0]}") from error
            raise
        self.held = (conn, FILE_WRITE_SQL, params, file, batch, changed, row)
        self.writes = params["write"]
        return row

    async def _write_committing_held(self, sql: str, params: dict[str, Any], file: dict[str, Any] | None,
                                     batch: tuple, changed: dict[str, int]) -> tuple:
        """This write and the held file write's commit, in one round trip."""
        held, self.held = self.held, None
        conn = held[0]
        try:
            async with conn.pipeline():
                cursor = await conn.execute(sql, params)
                await conn.execute("COMMIT")
            row = await cursor.fetchone()  # after the sync: one round trip (see _write_held)
        except BaseException as error:
            await _let_go(conn)
            if isinstance(error, (*_TRANSIENT, asyncio.CancelledError)):
                # Both committed or neither: the next write finds out first (_settle_unsent).
                self.unsent = (sql, params, file, batch, changed, held[1:])
                raise
            # Neither was written: the session fails (WriteRefused), and keeps the events of both.
            self._put_back(batch)
            self._put_back(held[4])
            self.writes = held[2]["write"] - 1
            if isinstance(error, psycopg.Error):
                raise WriteRefused(f"{type(error).__name__}: {str(error).splitlines()[0]}") from error
            raise
        await self._pool().release(conn)
        self._written(*held[1:4], held[4][0], *held[5:])
        if row is None:  # cannot be: the held write holds the session's row, this write is its next
            raise WriteRefused(f"write {params['write']} of session {self.session_id} was refused after write "
                               f"{params['write'] - 1}")
        return self._written(sql, params, file, batch[0], changed, row)

    async def _commit_held(self) -> None:
        """Commit the held file write alone."""
        held, self.held = self.held, None
        conn = held[0]
        try:
            await conn.execute("COMMIT")
        except BaseException as error:
            await _let_go(conn)
            if isinstance(error, (*_TRANSIENT, asyncio.CancelledError)):
                self.unsent = (*held[1:6], None)  # _settle_unsent: its tool saw it succeed (self.writes counts it)
                raise
            self.abandoned = True  # not committed, and its tool saw it succeed
            raise SessionTakenOver(f"session {self.session_id} lost a file write its tool saw succeed: "
                                   "it is resumed from its last checkpoint") from error
        await self._pool().release(conn)
        self._written(*held[1:4], held[4][0], *held[5:])

    def _written(self, sql: str, params: dict[str, Any], file: dict[str, Any] | None, events: list[Entry],
                 changed: dict[str, int], row: tuple) -> tuple:
        """A write is committed: count it and push its events."""
        self.writes = params["write"]
        self.saved_positions.update(changed)
        if file is not None and (sql is not FILE_DELETE_SQL or row[1]):
            data = ({"path": file["path"], "version": row[1], "action": "created" if row[2] else "updated",
                     "bytes": file["bytes"]} if sql is FILE_WRITE_SQL
                    else {"path": file["path"], "action": "deleted"})
            events = [*events, ("file_change", self.agent, self.session_id, data, params["at"], jsontext.dumps(data))]
        self._push(pushed(self.run_id, row[0], events), changes=changes_run(events))
        return row

    def _put_back(self, batch: tuple) -> None:
        """A write was not made: what it held goes in front of what came since, for the next write (the rows
        are the truth)."""
        events, usage, release, entries, marks, extra, counters, positions = batch
        self.pending = events + self.pending
        self.usage = [a + b for a, b in zip(usage, self.usage)]
        self.releasing, self.releasing_large = self.releasing + release[0], self.releasing_large + release[1]
        later = self.pending_marks
        self.pending_entries, self.pending_marks = entries + self.pending_entries, marks
        # The later entries' offsets count from the events written now, which go back in front.
        self.pending_extra = extra + [(off + len(events), c) for off, c in self.pending_extra]
        self._mark(later)
        self.pending_counters = self.pending_counters or counters
        if self.pending_positions is None:
            self.pending_positions = positions

    async def _settle_unsent(self) -> None:
        """Find out whether the write whose answer was lost was committed: if so it is counted (its events
        pushed), else what it held goes with the next write — but not its file change, whose tool saw the
        write fail (a resumed session runs that call again)."""
        sql, params, file, batch, changed, held = self.unsent
        async with self._pool().connection() as conn:
            cursor = await conn.execute("SELECT claim, writes, last_write FROM agents_app_session WHERE id = %s",
                                        [self.session_id])
            found = await cursor.fetchone()
        if found is None or (str(found[0]) if found[0] else None) != self.claim_key:
            raise SessionTakenOver(f"session {self.session_id} was taken over by another worker")
        self.unsent = None
        if found[1] == params["write"]:
            if held is not None:  # a held file write, committed with this one
                self._written(*held[:3], held[3][0], *held[4:])
            self._written(sql, params, file, batch[0], changed, tuple(found[2]))
        elif held is not None or (file is not None and self.writes == params["write"]):
            # A file write its tool saw succeed was not committed: this session cannot go on from what it
            # holds. It writes nothing more, and is resumed from its last checkpoint (before that tool).
            self.abandoned = True
            raise SessionTakenOver(f"session {self.session_id} lost a file write its tool saw succeed: "
                                   "it is resumed from its last checkpoint")
        else:
            self._put_back(batch)

    async def _applied_before(self, conn: psycopg.AsyncConnection, write: int) -> tuple:
        """The row a write returned when it was applied already (retried after its commit's answer was lost);
        :class:`SessionTakenOver` when it was refused for another worker's claim."""
        cursor = await conn.execute("SELECT claim, writes, last_write FROM agents_app_session WHERE id = %s",
                                    [self.session_id])
        found = await cursor.fetchone()
        claim = str(found[0]) if found and found[0] else None
        if found is None or claim != self.claim_key:
            raise SessionTakenOver(f"session {self.session_id} was taken over by another worker")
        if found[1] != write:
            raise WriteRefused(f"write {write} of session {self.session_id} is out of order (it holds {found[1]})")
        return tuple(found[2])

    def _push(self, events: list[str], *, changes: bool) -> None:
        # In commit order, without holding up the session: each push waits for the one before,
        # and what is committed meanwhile rides along with the waiting push (one PUBLISH).
        if not events:
            return
        self.waiting_changes = self.waiting_changes or changes
        if self.waiting_push is not None:
            self.waiting_push.extend(events)
            return
        batch = self.waiting_push = list(events)
        previous = self.pushing

        async def push() -> None:
            if previous is not None:
                await previous
            team = self.team_id if self.waiting_changes else None
            self.waiting_push, self.waiting_changes = None, False
            with phases.timed("push (after commit)"):
                await events_push_async(self.run_key, batch, team_id=team)

        self.pushing = asyncio.ensure_future(push())

    async def salvage(self) -> int:
        """After :class:`WriteRefused`: write the pending events without the usage and checkpoint that
        came with them; if those are refused too, drop them. Returns how many events were dropped."""
        self.usage = [0, 0, Decimal(0), 0]
        self.pending_counters, self.pending_entries, self.pending_marks = None, [], []
        self.pending_extra = []
        try:
            await self.flush()
        except WriteRefused:
            dropped, self.pending = len(self.pending), []
            return dropped
        return 0

    async def close(self) -> None:
        """Write what is left and wait for the last push."""
        if self.live_timer is not None:
            self.live_timer.cancel()
            self.live_timer = None
        await self.flush()
        if self.pushing is not None:
            await self.pushing


async def _let_go(conn: psycopg.AsyncConnection) -> None:
    """Give back a held connection after an error: rolled back when it can be, else closed."""
    try:
        if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            await conn.execute("ROLLBACK")
    except BaseException:  # noqa: BLE001 - closed instead
        await conn.close()
    finally:
        await pool().release(conn)


async def _write_within_limit(conn: psycopg.AsyncConnection, params: dict[str, Any]) -> tuple:
    """A file write and the run's new total in one round trip, then its commit, or a rollback past the limit.

    The write locks the run's row until then, so no other write of the run commits in between:
    the total is exact, and two sessions cannot both pass the limit.
    """
    async with conn.pipeline(), conn.transaction():
        written = await conn.execute(FILE_WRITE_SQL, params)
        total = await conn.execute(USED_SQL, [params["run"]])
        row = await written.fetchone()
        workspace_check(path=params["path"], used=await total.fetchone(), created=row is not None and row[2])
    return row


# -- the workspace ------------------------------------------------------------------------


class DatabaseWorkspace:
    """:class:`tools_app.plugin.Workspace` on the run's WorkspaceFile rows, written through the session's store."""

    def __init__(self, *, store: DatabaseStore) -> None:
        self.store = store

    async def read(self, path: str) -> str | None:
        async with self.store._pool().connection() as conn:
            cursor = await conn.execute("SELECT content FROM agents_app_workspacefile WHERE run_id = %s AND path = %s",
                                        [self.store.run_id, path])
            row = await cursor.fetchone()
        return row[0] if row else None

    async def write(self, path: str, content: str) -> int:
        return await self.store.file_write(path, content)

    async def delete(self, path: str) -> bool:
        return await self.store.file_delete(path)

    async def paths(self) -> list[str]:
        async with self.store._pool().connection() as conn:
            cursor = await conn.execute("SELECT path FROM agents_app_workspacefile WHERE run_id = %s ORDER BY path",
                                        [self.store.run_id])
            return [row[0] for row in await cursor.fetchall()]

    async def contents(self) -> dict[str, str]:
        async with self.store._pool().connection() as conn:
            cursor = await conn.execute(
                "SELECT path, content FROM agents_app_workspacefile WHERE run_id = %s ORDER BY path", [self.store.run_id])
            return dict(await cursor.fetchall())

    async def read_many(self, paths: list[str]) -> dict[str, str]:
        async with self.store._pool().connection() as conn:
            cursor = await conn.execute(
                "SELECT path, content FROM agents_app_workspacefile WHERE run_id = %s AND path = ANY(%s)",
                [self.store.run_id, paths])
            return dict(await cursor.fetchall())


# -- heartbeats and cancels ------------------------------------------------------------------


class SessionMonitor:
    """Per worker process: heartbeats every running session and notices cancelled runs, in bulk."""

    def __init__(self) -> None:
        self.sessions: dict[Any, tuple[Any, DatabaseStore, asyncio.Task]] = {}
        self.task: asyncio.Task | None = None

    def watch(self, session_id, run_id, store: DatabaseStore, task: asyncio.Task) -> None:
        self.sessions[session_id] = (run_id, store, task)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    def forget(self, session_id) -> None:
        self.sessions.pop(session_id, None)

    async def _run(self) -> None:
        beat_every = min(10.0, settings.MAS_SESSION_STALE_S / 3)
        since_beat = 0.0
        while self.sessions:
            await asyncio.sleep(1.0)
            since_beat += 1.0
            beat = since_beat >= beat_every
            if beat:
                since_beat = 0.0
            watched = dict(self.sessions)
            try:
                cancelled = await db(_monitor_tick)(
                    session_ids=list(watched) if beat else [], watched=list(watched)
                )
            except Exception:
                logger.warning("session monitor tick failed", exc_info=True)
                continue
            for session_id, (run_id, store, task) in watched.items():
                if session_id in cancelled and not store.cancel_requested:
                    store.cancel_requested = True
                    task.cancel()


def _monitor_tick(*, session_ids: list, watched: list) -> set:
    """Heartbeat ``session_ids``; the ids of the ``watched`` sessions to stop: their run was cancelled, or their
    activation (a child whose parent failed)."""
    if session_ids:
        Session.objects.filter(pk__in=session_ids).update(heartbeat_at=timezone.now())
    return set(Session.objects.filter(pk__in=watched).filter(
        Q(run__status="cancelled") | Q(activation__status="cancelled")).values_list("pk", flat=True))


monitor = SessionMonitor()
