"""A session's life in the database: begin (which agent, which tier), settle, suspend.

Each takes the run's row lock first (``scheduler.run_locked``; a session's
end, with its session's and activation's rows in one statement); a settled session
dispatches what became ready and tells its parent (``children``) and the
layer above (``hooks.RUN_HOOKS``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agents_app.execution.agents import (
    AGENT_ROW,
    AgentDefinition,
    agent_capped,
    agent_file,
    agent_found,
    worker_definition_resolve,
)
from agents_app.execution.budget import reservation_release
from agents_app.execution.children import CHILD_KINDS, SETTLED_ACTIVATION_STATUSES, child_settled, children_cancel
from agents_app.execution.escalation import Escalation, escalation_next
from agents_app.execution.hooks import RUN_HOOKS
from agents_app.execution.runs import DEFAULT_LIMITS
from agents_app.models import Activation, ActivationContext, Run, Session
from agents_app.models.approvals import RequestKind
from agents_app.models.runs import (
    FINISHED_RUN_STATUSES,
    OPEN_ACTIVATION_STATUSES,
    ActivationStatus,
    RunStatus,
    SessionStatus,
)
from agents_app.scheduler import awaited as activation_awaits, dispatch, dispatch_later, run_locked
from agents_app.specs import AgentSpec
from mas_core.eventlog import INSERT_NUMBERED, Entry, entry, events_append, events_appended, events_param
from mas_core.eventlog import event_append as event_emit
from mas_core.rows import Columns, db_values, instances
from mas_core.specs import TIERS


@dataclass
class SessionStart:
    session: Session
    activation: Activation
    run: Run
    agent: AgentDefinition
    resumed: bool


RUN_ROW, ACTIVATION_ROW, SESSION_ROW = Columns(Run), Columns(Activation), Columns(Session)
_CONTEXT_FIELD = Activation._meta.get_field("context")

# The run's row and the activation's, locked in the order every writer of a run locks in: the run's first
# (FOR UPDATE OF locks each row's tables in the order it names them). Both come back at their latest version.
_LOCK_SQL = f"""SELECT {RUN_ROW.select("r")}, {ACTIVATION_ROW.select("a")}
FROM agents_app_activation a JOIN agents_app_run r ON r.id = a.run_id
WHERE a.id = %(activation)s FOR UPDATE OF r, a"""

# What a session begins from, read once both rows are locked (in a statement of its own: a statement sees
# what committed before it began, and the locks may have been waited for): the session to resume (the
# activation's latest attempt still running or suspended), and the agent as agent_resolve reads it (the
# run's own file ``agents/<slug>.md``, the team's row).
_OPENED_SQL = f"""SELECT {SESSION_ROW.select("s")}, f.content, {AGENT_ROW.select("g")}
FROM (SELECT 1) one
LEFT JOIN LATERAL (
  SELECT * FROM agents_app_session WHERE activation_id = %(activation)s AND status = ANY(%(open)s)
  ORDER BY attempt DESC LIMIT 1
) s ON true
LEFT JOIN agents_app_workspacefile f ON f.run_id = %(run)s AND f.path = %(path)s
LEFT JOIN agents_app_agent g ON g.team_id = %(team)s AND g.slug = %(slug)s"""

# A session begins in one statement: ``s`` writes the session's row (see below), ``a`` marks its activation
# running (its attempts counted, its context written when it changed), ``r`` starts the run if it was queued
# and numbers the session_start event from the run's counter (one UPDATE of the run's row: a statement
# updates a row once), ``e`` inserts the event. Returns the event's number and the run's team.
_BEGIN_SQL = """
WITH s AS ({session}), a AS (
  UPDATE agents_app_activation SET status = 'running', attempts = %(attempts)s,
    context = coalesce(%(context)s, context)
  WHERE id = %(activation)s
), r AS (
  UPDATE agents_app_run SET next_seq = next_seq + 1,
    status = CASE status WHEN 'queued' THEN 'running' ELSE status END,
    started_at = CASE status WHEN 'queued' THEN %(now)s ELSE started_at END
  WHERE id = %(run)s::uuid RETURNING next_seq - 1 AS base, team_id
), e AS ({events})
SELECT base, team_id FROM r
"""
# A new attempt's row, inserted (its fields as the instance has them, parameters ``new_<column>``)...
_BEGIN_NEW_SQL = _BEGIN_SQL.format(session=SESSION_ROW.insert("new_"), events=INSERT_NUMBERED)
# ... or the session resumed, claimed anew: the writes of the worker that had it (if it still runs) are
# refused from now on.
_BEGIN_RESUMED_SQL = _BEGIN_SQL.format(session="""UPDATE agents_app_session
  SET worker = %(worker)s, heartbeat_at = %(now)s, status = 'running', claim = %(claim)s WHERE id = %(session)s""",
                                       events=INSERT_NUMBERED)


def session_begin(*, activation_id, worker: str) -> SessionStart | None:
    """Claim an activation: resume its running session (a worker died) or start a new attempt.

    Returns None when there is nothing to do (done, cancelled, or claimed by a live worker).
    """
    with transaction.atomic(), connection.cursor() as cursor:
        run, activation = _locked(cursor, activation_id)
        if activation.status not in OPEN_ACTIVATION_STATUSES or run.status in FINISHED_RUN_STATUSES:
            if run.status == RunStatus.CANCELLED and activation.status in OPEN_ACTIVATION_STATUSES:
                activation.status = ActivationStatus.CANCELLED
                activation.save(update_fields=["status"])
            return None
        session, local, rows = _opened(cursor, run=run, activation=activation)
        if session is not None and session.status == SessionStatus.RUNNING and not _stale(session):
            # A live worker has it — maybe this very process, when a message came twice (a dispatch
            # sent again by the sweep while the first waited in the queue): never run one session twice.
            # (A suspended session holds no worker: it is resumed.)
            return None
        resumed = session is not None
        context = activation.ctx
        definition = (worker_definition_resolve(context.worker) if context.worker
                      else agent_capped(agent_found(run=run, slug=activation.agent, local=local, rows=rows),
                                        activation=activation))
        now = timezone.now()
        if session is None:
            activation.attempts += 1  # the row is locked
            session = Session(run=run, activation=activation, agent=activation.agent, attempt=activation.attempts,
                              tier=nominal_tier(definition.spec, context), worker=worker, heartbeat_at=now,
                              claim=uuid.uuid4())
            sql, params = _BEGIN_NEW_SQL, SESSION_ROW.params(session, "new_")
        else:
            reservation_release(session)  # a call of the previous claim that never settled
            session.worker, session.heartbeat_at, session.status = worker, now, SessionStatus.RUNNING
            session.claim = uuid.uuid4()
            sql, params = _BEGIN_RESUMED_SQL, {"worker": worker, "claim": session.claim, "session": session.id}
        activation.status = ActivationStatus.RUNNING
        changed = None
        if context.begin_tries:  # it began after all: tries are counted afresh next time
            activation.ctx = context.replace(begin_tries=0)
            changed = _CONTEXT_FIELD.get_db_prep_save(activation.context, connection)
        if run.status == RunStatus.QUEUED:
            run.status, run.started_at = RunStatus.RUNNING, now
        entries = [entry("session_start", agent=activation.agent, session_id=session.id, data={
            "activation": str(activation.id), "attempt": session.attempt, "tier": session.tier,
            "resumed": resumed, "kind": activation.kind, "depth": activation.depth,
            "parent": str(activation.parent_id) if activation.parent_id else None,
        })]
        cursor.execute(sql, {**params, "activation": activation.id, "attempts": activation.attempts,
                             "context": changed, "run": str(run.id), "now": now, "events": events_param(entries)})
        base, team_id = cursor.fetchone()
        session._state.adding, session._state.db = False, connection.alias  # as saved
        events_appended(run_id=run.id, base=base, team_id=team_id, entries=entries)
    return SessionStart(session=session, activation=activation, run=run, agent=definition, resumed=resumed)


def _locked(cursor, activation_id) -> tuple[Run, Activation]:
    """The activation and its run, their rows locked (:data:`_LOCK_SQL`)."""
    cursor.execute(_LOCK_SQL, {"activation": activation_id})
    row = cursor.fetchone()
    if row is None:
        raise Activation.DoesNotExist(f"no activation {activation_id}")
    run, activation = instances(row, RUN_ROW, ACTIVATION_ROW)
    activation.run = run
    return run, activation


def _opened(cursor, *, run: Run, activation: Activation) -> tuple[Session | None, str | None, dict[str, Any]]:
    """The session to resume (None: a new attempt), the run's own file of the agent (None: none) and the
    team's row of it, by slug, for :func:`agent_found` (:data:`_OPENED_SQL`)."""
    cursor.execute(_OPENED_SQL, {"activation": activation.id, "open": [SessionStatus.RUNNING, SessionStatus.SUSPENDED],
                                 "run": run.id, "path": agent_file(activation.agent), "team": run.team_id,
                                 "slug": activation.agent})
    row = cursor.fetchone()
    sessions = len(SESSION_ROW)
    return (SESSION_ROW.instance_or_none(row[:sessions]), row[sessions],
            {activation.agent: AGENT_ROW.instance_or_none(row[sessions + 1:])})


def session_begin_failed(*, activation_id, worker: str, error: str) -> SessionEnd | None:
    """:func:`session_begin` raised (the agent's file was deleted or made invalid while the activation was
    queued, …): try again after a backoff, up to ``MAS_MAX_BEGIN_TRIES`` tries in all, then fail the
    activation with a failure report — which its waiting parent receives as its tool result.

    A custom tool's worker (run inline by its caller, never dispatched) fails at once. Returns how it
    ended when it failed, None when it is tried again (or was settled meanwhile).
    """
    max_tries = max(1, int(getattr(settings, "MAS_MAX_BEGIN_TRIES", 3)))
    with transaction.atomic():
        run = run_locked(Activation.objects.filter(pk=activation_id).values_list("run_id", flat=True).get())
        activation = Activation.objects.select_for_update().get(pk=activation_id)
        if activation.status not in OPEN_ACTIVATION_STATUSES or run.status in FINISHED_RUN_STATUSES:
            return None
        tries = activation.ctx.begin_tries + 1
        activation.ctx = activation.ctx.replace(begin_tries=tries)
        event_emit(run_id=run.id, type="error", agent=activation.agent, data={
            "where": "session_begin", "kind": "unknown", "activation": str(activation.id), "try": tries,
            "message": error[:2000]})
        if tries < max_tries and activation.kind != "tool":
            delay = settings.MAS_RETRY_BACKOFF_S * 2 ** (tries - 1)
            activation.status, activation.dispatched_at = ActivationStatus.QUEUED, None
            activation.not_before = timezone.now() + timedelta(seconds=delay)
            activation.save(update_fields=["status", "dispatched_at", "not_before", "context"])
            event_emit(run_id=run.id, type="retry", agent=activation.agent, data={
                "what": "session_begin", "activation": str(activation.id), "attempt": tries + 1, "delay_s": delay,
                "reason": error[:500]})
            transaction.on_commit(lambda: dispatch_later(run_id=run.id, delay_s=delay))
            return None
        # The session it would have resumed (a suspended or interrupted one) fails; with none, a failed one is
        # recorded, so the report is where a parent and the API read it.
        session = (Session.objects.filter(activation=activation, status__in=[SessionStatus.RUNNING,
                                                                              SessionStatus.SUSPENDED])
                   .order_by("-attempt").first())
        if session is None:
            activation.attempts += 1
            session = Session.objects.create(run=run, activation=activation, agent=activation.agent,
                                             attempt=activation.attempts, tier="", worker=worker)
        activation.save(update_fields=["attempts", "context"])
        tried = "once" if tries == 1 else f"{tries} times"
        failure = {"kind": "unknown", "last_tool_calls": [], "suggested_retry": False,
                   "message": f"agent {activation.agent} could not be started (tried {tried}): {error[:2000]}"}
        end = _session_finish(run=run, session_id=session.id, status=SessionStatus.FAILED, result="", meta={},
                              failure=failure, ladder=[])
        _settled_hooks(run, end.activation, failure=failure)
        dispatch(run)
    return end


def nominal_tier(spec: AgentSpec, context: ActivationContext) -> str:
    """The tier a session starts from: its escalation rung's, the agent's ``tier``, a tier named as its
    ``model``, else medium. The session's tier becomes its model's once the model is resolved."""
    return (context.tier or spec.tier or (spec.model if spec.model in TIERS else None)
            or "medium")


def session_stale_after_s() -> float:
    return float(getattr(settings, "MAS_SESSION_STALE_S", 30))


def _stale(session: Session) -> bool:
    if session.heartbeat_at is None:
        return True
    return (timezone.now() - session.heartbeat_at).total_seconds() > session_stale_after_s()


@dataclass
class SessionEnd:
    retry_in_s: float | None = None  # the activation was re-queued after this delay
    escalation: Escalation | None = None  # where a retry escalates to (the kernel's, or a workflow step's)
    activation: Activation | None = None
    tier: str = ""


# The run, the session and the session's activation, locked and read in one statement. Rows are locked in
# the order FOR UPDATE OF names them: the run first, as every writer of a run locks. The session's
# checkpoint (its largest column, every message) is left unread: a session's end never needs it.
ENDING_SESSION_ROW = Columns(Session, without=("state",))
SESSION_LOCK_SQL = f"""
SELECT {RUN_ROW.select("r")}, {ENDING_SESSION_ROW.select("s")}, {ACTIVATION_ROW.select("a")}
FROM agents_app_run r
JOIN agents_app_session s ON s.run_id = r.id
JOIN agents_app_activation a ON a.id = s.activation_id
WHERE r.id = %s AND s.id = %s
FOR UPDATE OF r, s, a
"""

# A session's end and its activation's outcome, written in one statement.
SESSION_END_SQL = """
WITH session AS (
    UPDATE agents_app_session
    SET status = %(s_status)s, result = %(s_result)s, meta = %(s_meta)s, failure = %(s_failure)s,
        finished_at = %(s_finished_at)s
    WHERE id = %(s_id)s
)
UPDATE agents_app_activation
SET status = %(a_status)s, result = %(a_result)s, context = %(a_context)s, not_before = %(a_not_before)s
WHERE id = %(a_id)s
"""


def _session_finish(*, run: Run, session_id, status: str, result: str, meta: dict[str, Any],
                    failure: dict[str, Any] | None, ladder: list[str]) -> SessionEnd:
    """Record the outcome; retry with backoff, escalate up the ladder, or settle the activation.

    ``run``'s row is locked by the caller's transaction.
    """
    _, session, activation = _session_rows_locked(run_id=run.id, session_id=session_id)  # the run's: held already
    end, events = _session_record(run=run, session=session, activation=activation, status=status, result=result,
                                  meta=meta, failure=failure, ladder=ladder)
    events_append(run_id=run.id, entries=events)
    return end


def _session_record(*, run: Run, session: Session, activation: Activation, status: str, result: str,
                    meta: dict[str, Any], failure: dict[str, Any] | None,
                    ladder: list[str]) -> tuple[SessionEnd, list[Entry]]:
    """:func:`_session_finish` on rows the caller's transaction has locked (the run's first).

    Returns how it ended and its events, for the caller to append: it may append them with what follows
    in one statement. (A failed session's end is appended here, before its cancelled children's.)
    """
    end = SessionEnd(activation=activation, tier=session.tier)
    reservation_release(session)
    session.status, session.result, session.meta = status, result, meta
    session.failure, session.finished_at = failure, timezone.now()
    events = [entry("session_end", agent=session.agent, session_id=session.id, data={
        "status": status, "result": result[:2000], "meta": meta, "failure": failure,
    })]
    max_retries = int(run.limits.get("max_retries", DEFAULT_LIMITS["max_retries"]))
    if status == SessionStatus.FAILED and run.status != RunStatus.CANCELLED:
        events_append(run_id=run.id, entries=events)
        events = []
        # The children it waits for would work (and spend) for nothing; a retry starts its own.
        children_cancel(run, activation, session_id=session.id,
                        reason=f"{session.agent} failed" + (f": {failure.get('kind')}" if failure else ""))
    if status == SessionStatus.OK:
        activation.status, activation.result = ActivationStatus.DONE, result
    elif (status == SessionStatus.CANCELLED or run.status == RunStatus.CANCELLED
          or activation.status == ActivationStatus.CANCELLED):  # its parent cancelled it meanwhile
        activation.status = ActivationStatus.CANCELLED
    elif (failure and failure.get("suggested_retry") and activation.attempts <= max_retries
          and activation.kind not in {"tool", "step"}):  # a tool's caller (a step's workflow) decides
        end.retry_in_s = settings.MAS_RETRY_BACKOFF_S * 2 ** (activation.attempts - 1)
        end.escalation = escalation_next(run=run, session=session, activation=activation, ladder=ladder)
        if end.escalation:
            activation.ctx = end.escalation.applied(activation.ctx)
            events.append(entry("escalation", agent=session.agent, session_id=session.id,
                                data=end.escalation.data))
        activation.status = ActivationStatus.QUEUED
        activation.not_before = timezone.now() + timedelta(seconds=end.retry_in_s)
        events.append(entry("retry", agent=session.agent, session_id=session.id, data={
            "what": "session", "attempt": activation.attempts + 1, "delay_s": end.retry_in_s,
            "reason": failure.get("kind"),
        }))
    else:
        activation.status, activation.result = ActivationStatus.FAILED, result
        if activation.kind == "step":  # its workflow may retry it, escalated
            end.escalation = escalation_next(run=run, session=session, activation=activation, ladder=ladder)
        if activation.parent_id is None and activation.kind != "step" and not run.error:
            run.error = f"{failure.get('kind') if failure else 'failed'}: {failure.get('message') if failure else ''}"
            run.save(update_fields=["error"])
    with connection.cursor() as cursor:
        cursor.execute(SESSION_END_SQL, {
            **db_values(session, ["id", "status", "result", "meta", "failure", "finished_at"], prefix="s_"),
            **db_values(activation, ["id", "status", "result", "context", "not_before"], prefix="a_")})
    return end, events


def session_settle(*, run_id, session_id, status: str, result: str, meta: dict[str, Any],
                   failure: dict[str, Any] | None, ladder: list[str]) -> SessionEnd:
    """Record a session's outcome and dispatch what comes next in its run, in one transaction."""
    with transaction.atomic():
        run, session, activation = _session_rows_locked(run_id=run_id, session_id=session_id)
        end, events = _session_record(run=run, session=session, activation=activation, status=status,
                                      result=result, meta=meta, failure=failure, ladder=ladder)
        if activation.kind == "root":
            # Only an agent run has a root activation (a workflow's, an orchestrated one's too, has steps and
            # plans): no parent or workflow to tell, and if the run ends now, its end goes with these events.
            dispatch(run, root_ended=events)
        else:
            events_append(run_id=run.id, entries=events)
            _settled_hooks(run, activation, tier=end.tier, meta=meta, failure=failure, ladder=ladder,
                           escalation=end.escalation)
            dispatch(run)
    return end


def _session_rows_locked(*, run_id, session_id) -> tuple[Run, Session, Activation]:
    """The rows of :data:`SESSION_LOCK_SQL`, locked: how a session's end (settle, finish, suspend) reads them."""
    with connection.cursor() as cursor:
        cursor.execute(SESSION_LOCK_SQL, [run_id, session_id])
        row = cursor.fetchone()
    if row is None:
        raise Session.DoesNotExist(f"no session {session_id} in run {run_id}")
    run, session, activation = instances(row, RUN_ROW, ENDING_SESSION_ROW, ACTIVATION_ROW)
    return run, session, activation


def _settled_hooks(run: Run, activation: Activation, *, tier: str = "", meta: dict[str, Any] | None = None,
                   failure: dict[str, Any] | None = None, ladder: list[str] | None = None,
                   escalation: Escalation | None = None) -> None:
    if activation.kind in CHILD_KINDS and activation.status in SETTLED_ACTIVATION_STATUSES:
        child_settled(run, activation)
    if activation.kind in {"step", "plan"}:  # only workflows create these
        RUN_HOOKS.activation_settled(run=run, activation=activation, tier=tier, meta=meta or {}, failure=failure,
                                     ladder=ladder or [], escalation=escalation)


def _waits(session: Session, awaited: list[str]) -> dict[str, Any]:
    """What a ``session_suspended`` event says the session waits for: the ids, and how many of each kind —
    its children, approvals (a tool call's or a gate's) and questions to a person — so the monitor can say
    which. ``reason`` names the first of approval, question, children that it waits for."""
    kinds = {str(pk): kind for pk, kind in session.approval_requests.filter(status="pending").values_list("id", "kind")}
    asked = [kinds[pk] for pk in awaited if pk in kinds]
    questions = asked.count(RequestKind.QUESTION)
    approvals = len(asked) - questions
    children = len(awaited) - len(asked)
    reason = "approval" if approvals else "question" if questions else "children"
    return {"waiting_for": awaited, "reason": reason, "children": children, "approvals": approvals,
            "questions": questions}


def session_suspend(*, run_id, session_id, result: str, meta: dict[str, Any]) -> list[str]:
    """The session checkpointed with calls whose results come later: it ends holding nothing.

    Its activation waits until every child it waits for has settled (then it
    is queued and the same session resumes from its checkpoint) — at once if
    they all settled already. Returns the ids of the children it waits for.
    """
    with transaction.atomic():
        run, session, activation = _session_rows_locked(run_id=run_id, session_id=session_id)
        reservation_release(session)
        if run.status in FINISHED_RUN_STATUSES or activation.status == ActivationStatus.CANCELLED:  # meanwhile
            session.status, session.finished_at = SessionStatus.CANCELLED, timezone.now()
            session.save(update_fields=["status", "finished_at"])
            Activation.objects.filter(pk=activation.pk).update(status=ActivationStatus.CANCELLED)
            return []
        session.status, session.result, session.meta = SessionStatus.SUSPENDED, result, meta
        session.save(update_fields=["status", "result", "meta"])
        awaited = activation_awaits(activation)
        activation.status = ActivationStatus.SUSPENDED if awaited else ActivationStatus.QUEUED
        activation.save(update_fields=["status"])
        event_emit(run_id=run.id, type="session_suspended", agent=session.agent, session_id=session.id,
                   data=_waits(session, awaited))
        dispatch(run)
    return awaited
