"""Runs in the database: start and cancel; the activations they queue.

Plain synchronous ORM functions (the session coroutine calls them through
``runner.db``). Every state change takes the run's row lock, so concurrent
sessions of one run never double-dispatch or double-finish it. The rest of a
run's life is beside this module: what runs next and its end
(``agents_app.scheduler``), sessions (``lifecycle``), parents and children
(``children``), what tools ask (``tool_requests``), the sweeps (``reaper``).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from agents_app.execution.agents import AGENT_ROW, agent_found
from agents_app.execution.errors import RunError, ScriptError, UnknownGuardrails
from agents_app.execution.hooks import RUN_HOOKS
from agents_app.models import Activation, ActivationContext, Agent, Guardrail, Run, Session, Team
from agents_app.models.runs import (
    FINISHED_RUN_STATUSES,
    ActivationStatus,
    RunStatus,
    SessionStatus,
    current_queue,
)
from agents_app.scheduler import DEFAULT_MAX_CONCURRENCY, READY_CHANNEL, ready_notify, run_end_notify
from agents_app.execution.guardrails import input_checker
from agents_app.selectors_guardrails import guardrail_slugs
from agents_app.selectors_runs import ACTIVATION_ROW, RUN_ROW  # the runs' hand-written columns, made once
from agents_app.specs import unknown_guardrails
from mas_core.eventlog import (
    INSERT_NUMBERED,
    Entry,
    entry,
    event_append as event_emit,
    events_append,
    events_appended,
    events_param,
)
from mas_core.telemetry import RunTrace

logger = logging.getLogger(__name__)


DEFAULT_LIMITS = {"max_depth": 3, "max_fanout": 5, "max_concurrency": DEFAULT_MAX_CONCURRENCY, "max_retries": 2}


# Activations are dispatched lowest priority number first (then oldest first): 0 before 100.
DEFAULT_PRIORITY = 100


def script_check(*, team: Team, script: dict[str, Any] | None, agents: list[str],
                 rows: dict[str, Agent] | None = None) -> None:
    """Check a run's script: its shape and bounds, and no turn slower than its agent's session timeout.

    ``agents`` are the ones the run starts with; the script's ``"*"`` turns are
    held to the shortest of their timeouts. ``rows``: the team's agents the script and ``agents`` name, when
    the caller read them already (:func:`start_rows`).
    """
    if script is None:
        return
    from agents_app.llm.scripted import script_check_latency, validate_script

    try:
        validate_script(script)
        named = set(script) - {"*"}
        if rows is None:
            rows = _agent_rows(team=team, slugs=named | set(agents))
        timeouts = {slug: float((row.spec.get("limits") or {}).get("timeout_s", 600)) for slug, row in rows.items()}
        starting = [timeouts[slug] for slug in agents if slug in timeouts and slug not in named]
        if starting:
            timeouts["*"] = min(starting)
        script_check_latency(script, timeouts)
    except ValueError as error:
        raise ScriptError(str(error)) from None


@transaction.atomic
def run_start(
    *, team: Team, agent: str, input: str, user=None, limits: dict[str, Any] | None = None,
    budget: dict[str, Any] | None = None, provider: str = "", script: dict[str, Any] | None = None,
    approvals: list[Any] | None = None, versions: dict[str, int] | None = None, is_eval: bool = False,
    eval_real_models: bool = False, guardrails: list[str] | None = None, door_turns: list[list[str]] | None = None,
    trace: RunTrace | None = None, rows: dict[str, Agent] | None = None,
) -> Run:
    """Create a run with its root activation and send that to a worker (after commit). The run returned holds
    that activation as ``root``, as created (its caller shows the new run without reading it back).

    ``approvals``: tool names or patterns whose calls wait for a person in this run, on top of what the
    definitions and the team ask for (agents_app.approvals.policy). ``versions`` pins definitions at other
    versions than their current ones (``{"agent:writer": 2}``: an eval of an older version); ``is_eval``
    marks a case of an eval, and ``eval_real_models`` lets its unscripted agents call the team's real models.
    ``guardrails``: slugs of the team's guardrails that check every session of the run, on top of the team's
    defaults and the definitions' (a run adds guardrails, never removes one); another slug is refused
    (:class:`UnknownGuardrails`). ``door_turns``: the conversation a door's run answers (``Run.door_turns``),
    checked by the run's input guardrails as its input is. ``trace``: where the run's trace starts (a door's
    run: the door, and the caller's trace it continues), kept in its ``run_start`` event. ``rows``: the team's
    agents the run names, when the caller read them already (:func:`start_rows`: the API's start checks the
    agent with them).
    """
    from agents_app.approvals.policy import entries_check

    if rows is None:
        rows = start_rows(team=team, agent=agent, script=script)
    script_check(team=team, script=script, agents=[] if is_eval else [agent], rows=rows)
    try:
        approvals = entries_check(approvals)
    except ValueError as error:
        raise RunError(f"approvals: {error}") from None
    guardrails = list(dict.fromkeys(guardrails or []))
    if guardrails:
        known = guardrail_slugs(team=team)
        unknown = [slug for slug in guardrails if slug not in known]
        if unknown:
            raise UnknownGuardrails(unknown_guardrails(unknown, known))
    root_row, fired = rows.get(agent), []
    if root_row is not None and root_row.inputs_guarded:  # else no statement more for a run's start
        check = input_checker(team=team, named=[*(root_row.spec.get("guardrails") or []), *guardrails])
        input, fired = check(input)
        door_turns = [[role, check(text)[0]] for role, text in door_turns or []]  # their firings: the input's
    run = Run(
        team=team, agent=agent, input=input, created_by=user if getattr(user, "pk", None) else None,
        limits={**DEFAULT_LIMITS, **(limits or {})}, budget=budget or {}, provider=provider, script=script,
        approvals=approvals, guardrails=guardrails, versions=dict(versions or {}), is_eval=is_eval,
        eval_real_models=is_eval and eval_real_models, door_turns=door_turns or [],
    )
    # Exists? (The run is not saved yet: it has no workspace file of its own, and pins the current version.)
    agent_found(run=run, slug=agent, local=None, rows={agent: rows.get(agent)})
    run.root = _start_write(run=run, start={
        "agent": agent, "input": input, "limits": run.limits, "budget": run.budget,
        **({"approvals": approvals} if approvals else {}), **({"guardrails": guardrails} if guardrails else {}),
        **(trace.to_json() if trace else {})}, fired=fired)
    return run


def _start_write(*, run: Run, start: dict[str, Any], fired: list[dict[str, Any]]) -> Activation:
    """Write the new ``run``, its root activation and its first events — ``run_start`` (``start``), the input
    guardrails' firings (``fired``), the root's ``activation_queued`` (:data:`_RUN_INSERT_SQL`, :data:`_ROOT_SQL`);
    returns the root. The root is the run's only activation: it is ready at once, no admission round."""
    run_params = RUN_ROW.params(run, "run_")  # its created_at, set now: before its root's times
    root = _activation_row(run=run, agent=run.agent, input=run.input, kind="root", parent=None,
                           status=ActivationStatus.READY)
    root_params = ACTIVATION_ROW.params(root, "root_")  # its created_at: before the events' times
    entries = [entry("run_start", agent=run.agent, data=start),
               *(entry("guardrail_triggered", agent=run.agent, data=data) for data in fired),
               _queued(root)]
    run.next_seq = len(entries)  # the new run's counter as its first events leave it: they are 1 … n
    # Both statements in one round trip (a pipeline): BEGIN, the INSERTs, COMMIT are three round trips, not four
    # (psycopg waits for a pipelined BEGIN's answer).
    with connection.cursor() as cursor, connection.wrap_database_errors, connection.connection.pipeline():
        cursor.execute(_RUN_INSERT_SQL, {**run_params, "run_next_seq": run.next_seq})
        cursor.execute(_ROOT_SQL, {**root_params, "run": str(run.id), "events": events_param(entries),
                                   "ready": READY_CHANNEL})
    for row in (run, root):
        row._state.adding, row._state.db = False, connection.alias  # as saved
    events_appended(run_id=run.id, base=0, team_id=run.team_id, entries=entries)
    return root


# A run's start writes in two statements, hand-written (a hot path: the ORM compiled both INSERTs at every start,
# see mas_core.rows): the run's row, then its root activation's and its first events, telling the workers work
# is ready (ready_notify's NOTIFY, delivered at commit). The run's row is written with its event counter as the
# events leave it, so they are numbered from 0 (``r``) with no UPDATE of the row. (Two, not one: psycopg parses
# a statement of more than 50 parameters anew at every call, a cost above a round trip's.)
_RUN_INSERT_SQL = RUN_ROW.insert("run_")
_ROOT_SQL = f"""
WITH root AS ({ACTIVATION_ROW.insert("root_")}), r AS (SELECT 0 AS base), e AS ({INSERT_NUMBERED})
SELECT pg_notify(%(ready)s, '')"""

# The team's agents a run's start names, and whether some guardrail of the team checks run inputs
# (``inputs_guarded``): hand-written, a hot path (the ORM compiled this annotated query at every start).
_START_ROWS_SQL = f"""SELECT {AGENT_ROW.select("g")}, EXISTS (
  SELECT 1 FROM "{Guardrail._meta.db_table}" AS d
  WHERE d.team_id = %(team)s AND (d.spec -> 'applies_to') @> '["run_input"]'::jsonb)
FROM "{Agent._meta.db_table}" AS g WHERE g.team_id = %(team)s AND g.slug = ANY(%(slugs)s)"""


def start_rows(*, team: Team, agent: str, script: dict[str, Any] | None) -> dict[str, Agent]:
    """The team's agents a run of ``agent`` with ``script`` names (those that exist), as :func:`run_start` reads
    them: by slug, for :func:`agent_found` and :func:`script_check`. The API's start reads them first, for its
    check of the agent, and hands them to :func:`run_start`."""
    return _agent_rows(team=team, slugs={agent, *(script or {})} - {"*"})


def _agent_rows(*, team: Team, slugs: set[str]) -> dict[str, Agent]:
    """The team's agents ``slugs`` as :func:`agent_found` reads them (those that exist), in one query; each says
    whether some guardrail of the team checks run inputs (``inputs_guarded``: then :func:`input_checker` reads
    which apply)."""
    with connection.cursor() as cursor:
        cursor.execute(_START_ROWS_SQL, {"team": team.pk, "slugs": list(slugs)})
        found = cursor.fetchall()
    rows = {}
    for values in found:
        row = AGENT_ROW.instance(values[:-1])
        row.inputs_guarded = values[-1]
        rows[row.slug] = row
    return rows


def activation_create(*, run: Run, agent: str, input: str, kind: str, parent: Activation | None,
                      priority: int = DEFAULT_PRIORITY, context: ActivationContext | None = None,
                      status: str = ActivationStatus.QUEUED) -> Activation:
    if status == ActivationStatus.READY:
        ready_notify()
    activation = _activation_row(run=run, agent=agent, input=input, kind=kind, parent=parent, priority=priority,
                                 context=context, status=status)
    activation.save(force_insert=True)
    events_append(run_id=run.id, entries=[_queued(activation)])
    return activation


def _activation_row(*, run: Run, agent: str, input: str, kind: str, parent: Activation | None,
                    priority: int = DEFAULT_PRIORITY, context: ActivationContext | None = None,
                    status: str = ActivationStatus.QUEUED) -> Activation:
    """The new activation, not saved yet."""
    return Activation(
        run=run, team_id=run.team_id, agent=agent, input=input, kind=kind, parent=parent, status=status,
        ready_at=timezone.now() if status == ActivationStatus.READY else None,
        depth=(parent.depth + 1) if parent and kind in {"spawn", "delegate"} else (parent.depth if parent else 0),
        priority=priority, context=context.to_json() if context else {}, queue=current_queue(),
    )


def _queued(activation: Activation) -> Entry:
    return entry("activation_queued", agent=activation.agent, data={
        "activation": str(activation.id), "kind": activation.kind, "priority": activation.priority,
        "parent": str(activation.parent_id) if activation.parent_id else None, "depth": activation.depth})


@transaction.atomic
def run_cancel(*, run: Run, user=None) -> Run:
    """Mark the run and its waiting activations cancelled; running sessions stop within a second."""
    run = Run.objects.select_for_update().get(pk=run.pk)
    if run.status in FINISHED_RUN_STATUSES:
        return run
    run.status, run.finished_at = RunStatus.CANCELLED, timezone.now()
    run.error = f"cancelled by {user}" if user else "cancelled"
    run.save(update_fields=["status", "finished_at", "error"])
    # Waiting work is cancelled now; running sessions stop within a second (their worker's monitor).
    run.activations.filter(status__in=[ActivationStatus.QUEUED, ActivationStatus.READY, ActivationStatus.DISPATCHED,
                                       ActivationStatus.SUSPENDED]).update(status=ActivationStatus.CANCELLED)
    for session in Session.objects.filter(run=run, status=SessionStatus.SUSPENDED):
        # Suspended sessions hold no worker: they end here, keeping their partial result.
        session.status, session.finished_at = SessionStatus.CANCELLED, timezone.now()
        session.save(update_fields=["status", "finished_at"])
        event_emit(run_id=run.id, type="session_end", agent=session.agent, session_id=session.id,
                   data={"status": "cancelled", "result": session.result[:2000], "meta": session.meta,
                         "failure": None})
    from agents_app.approvals.services import approvals_cancel

    approvals_cancel(run=run)
    RUN_HOOKS.run_cancelled(run)
    event_emit(run_id=run.id, type="run_complete", agent=run.agent,
               data={"status": "cancelled", "error": run.error})
    run_end_notify(run)
    return run
