"""Requests for a person: asked by a session, decided by a person (API, admin, monitor) or by the deadline.

Every write takes the run's row lock first (the order every writer of a run
follows), then the request's: a decision and the session suspending at the
same moment either see each other or wake the session — never neither — and
two people deciding at once get one decision and one refusal.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import jsonschema
from django.db import transaction
from django.utils import timezone

from agents_app.approvals.webhooks import webhook_notify
from mas_core.eventlog import event_append as event_emit
from agents_app.scheduler import dispatch, run_locked, team_limit, wake
from agents_app.models import Activation, ApprovalRequest, Run, Session, Team
from agents_app.models.approvals import RequestKind, RequestStatus
from agents_app.models.runs import FINISHED_RUN_STATUSES, ActivationStatus, RunStatus
from mas_core.outputs import validator as schema_validator

logger = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 10_000
MAX_ANSWER_CHARS = 10_000
EXPIRE_BATCH = 500


class ApprovalError(Exception):
    """A decision refused, with a message for the person and the HTTP status that says why."""

    status = 400


class RequestNotFound(ApprovalError):
    status = 404


class RequestConflict(ApprovalError):
    """Already decided, or nothing waits for it any more (the run ended)."""

    status = 409


class InvalidDecision(ApprovalError):
    status = 422


@dataclass(frozen=True)
class Asked:
    """What a session asks a person."""

    kind: str
    call_id: str
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    schema: dict[str, Any] = field(default_factory=dict)
    question: str = ""
    choices: list[str] = field(default_factory=list)
    reason: str = ""
    deadline_s: int | None = None
    default: str | None = None


def approval_for_call(*, session_id, call_id: str) -> ApprovalRequest | None:
    """The request a session's call (or gate) made, if it made one."""
    return ApprovalRequest.objects.filter(session_id=session_id, call_id=call_id).first()


def request_data(request: ApprovalRequest) -> dict[str, Any]:
    """What ``approval_requested`` / ``human_question`` events and webhooks carry."""
    data: dict[str, Any] = {"request": str(request.id), "kind": request.kind, "agent": request.agent,
                            "reason": request.reason, "deadline": request.deadline.isoformat(),
                            "default": request.default_outcome}
    if request.kind == RequestKind.QUESTION:
        data |= {"question": request.question, "choices": request.choices}
    else:
        data |= {"call": {"id": request.call_id, "name": request.tool}, "arguments": request.arguments}
    return data


def approval_request(*, run_id, session_id, agent: str, asked: Asked) -> ApprovalRequest:
    """Record what the session asks (once per call: asked again, the same row), emit it, mark the run waiting."""
    with transaction.atomic():
        run = run_locked(run_id)
        existing = approval_for_call(session_id=session_id, call_id=asked.call_id)
        if existing is not None:
            return existing
        team = Team.objects.only("approval_deadline_s", "approval_default").get(pk=run.team_id)
        request = ApprovalRequest.objects.create(
            team_id=run.team_id, run_id=run.id, session_id=session_id, agent=agent, kind=asked.kind,
            tool=asked.tool, call_id=asked.call_id, arguments=asked.arguments, schema=asked.schema,
            question=asked.question, choices=asked.choices, reason=asked.reason[:300],
            deadline=timezone.now() + timedelta(seconds=asked.deadline_s or team.approval_deadline_s),
            default_outcome=asked.default or team.approval_default,
        )
        kind = "human_question" if asked.kind == RequestKind.QUESTION else "approval_requested"
        data = request_data(request)
        event_emit(run_id=run.id, type=kind, agent=agent, session_id=session_id, data=data)
        _run_status(run)
        webhook_notify(team_id=run.team_id, event=kind, data={"run": str(run.id), **data})
    logger.info("approval requested", extra={"request": str(request.id), "kind": asked.kind, "tool": asked.tool})
    return request


def approval_consume(*, request_id) -> None:
    """The resumed session read the decision: it is never asked again (kept for the record)."""
    ApprovalRequest.objects.filter(pk=request_id, consumed_at__isnull=True).update(consumed_at=timezone.now())


def _run_status(run: Run) -> None:
    """``waiting`` while any of the run's requests is pending, ``running`` again when none is."""
    if run.status in FINISHED_RUN_STATUSES:
        return
    pending = ApprovalRequest.objects.filter(run_id=run.id, status=RequestStatus.PENDING).count()
    target = RunStatus.WAITING if pending else RunStatus.RUNNING
    if run.status == target or (run.status == RunStatus.QUEUED and not pending):
        return
    run.status = target
    Run.objects.filter(pk=run.pk).update(status=target)
    event_emit(run_id=run.id, type="run_status", agent=run.agent, data={"status": target, "pending": pending})


def _wake(run: Run, request: ApprovalRequest) -> None:
    """The session of a decided request resumes once nothing else holds it (the caller holds the run's lock)."""
    activation_id = Session.objects.filter(pk=request.session_id).values_list("activation_id", flat=True).first()
    wake(Activation.objects.select_for_update().get(pk=activation_id))
    _run_status(run)
    dispatch(run)


def _who(request: ApprovalRequest) -> str:
    return request.decided_by.get_username() if request.decided_by_id else "the system"


def _check(request: ApprovalRequest, *, decision: str, arguments: Any, message: str, answer: Any) -> dict[str, Any]:
    """The decision to record, or InvalidDecision saying what is wrong with it."""
    if len(message or "") > MAX_MESSAGE_CHARS:
        raise InvalidDecision(f"message: at most {MAX_MESSAGE_CHARS} characters")
    if request.kind == RequestKind.QUESTION:
        if decision == "reject":
            return {"decision": "reject", "message": message or ""}
        if decision != "answer":
            raise InvalidDecision(f"a question is answered (decision: answer, with answer) or declined "
                                  f"(decision: reject), not {decision!r}")
        if not isinstance(answer, str) or not answer.strip():
            raise InvalidDecision("answer: the answer to the question, a non-empty text")
        if len(answer) > MAX_ANSWER_CHARS:
            raise InvalidDecision(f"answer: at most {MAX_ANSWER_CHARS} characters")
        if request.choices and answer not in request.choices:
            raise InvalidDecision(f"answer: must be one of the choices: {', '.join(request.choices)}")
        return {"decision": "answer", "answer": answer}
    if decision not in ("approve", "reject"):
        raise InvalidDecision(f"decision: approve or reject, not {decision!r}")
    if answer is not None:
        raise InvalidDecision("answer: only a question is answered")
    if decision == "reject":
        if arguments is not None:
            raise InvalidDecision("arguments: only an approval may edit the call's arguments")
        return {"decision": "reject", "message": message or ""}
    recorded: dict[str, Any] = {"decision": "approve", "message": message or ""}
    if arguments is not None:
        if request.kind == RequestKind.GATE:
            raise InvalidDecision("arguments: a gate has no arguments to edit")
        if not isinstance(arguments, dict):
            raise InvalidDecision("arguments: a JSON object, the call's arguments as they should run")
        if request.schema:
            error = jsonschema.exceptions.best_match(
                schema_validator(request.schema).iter_errors(arguments))
            if error is not None:
                where = ".".join(str(part) for part in error.absolute_path) or "arguments"
                raise InvalidDecision(f"arguments do not match the parameters of {request.tool}: "
                                      f"{where}: {error.message}")
        recorded["arguments"] = arguments
    return recorded


def approval_decide(*, team: Team, request_id, user, decision: str, arguments: Any = None, message: str = "",
                    answer: Any = None) -> ApprovalRequest:
    """Decide a pending request as ``user``: approve (maybe with edited arguments), reject, or answer.

    Raises RequestNotFound (not this team's), RequestConflict (decided already,
    or its run has ended) or InvalidDecision; the session resumes on a worker.
    """
    run_id = ApprovalRequest.objects.filter(team=team, pk=request_id).values_list("run_id", flat=True).first()
    if run_id is None:
        raise RequestNotFound(f"no approval request {request_id} in team {team.slug}")
    with transaction.atomic():
        run = run_locked(run_id)
        request = ApprovalRequest.objects.select_for_update(of=("self",)).select_related("decided_by").get(pk=request_id)
        if request.status == RequestStatus.CANCELLED or (request.status == RequestStatus.PENDING
                                                         and run.status in FINISHED_RUN_STATUSES):
            raise RequestConflict(f"the run is {run.status}: nothing waits for this decision any more")
        if request.status != RequestStatus.PENDING:
            raise RequestConflict(f"this request was already decided: {request.status} by {_who(request)} at "
                                  f"{request.decided_at.isoformat()}")
        recorded = _check(request, decision=decision, arguments=arguments, message=message, answer=answer)
        request.status = {"approve": RequestStatus.APPROVED, "reject": RequestStatus.REJECTED,
                          "answer": RequestStatus.ANSWERED}[recorded["decision"]]
        request.decided_by = user if getattr(user, "pk", None) else None
        request.decided_at, request.decision = timezone.now(), recorded
        request.save(update_fields=["status", "decided_by", "decided_at", "decision"])
        event_emit(run_id=run.id, type="approval_decided", agent=request.agent, session_id=request.session_id,
                   data={"request": str(request.id), "kind": request.kind, "status": request.status,
                         "by": _who(request), "at": request.decided_at.isoformat(), **recorded})
        _wake(run, request)
    logger.info("approval decided", extra={"request": str(request.id), "status": request.status})
    return request


def approvals_expire(*, now=None) -> list[str]:
    """Apply the default outcome of every pending request past its deadline, as decided by the system.

    Called by beat (``agents_app.tasks.expire_approvals``) and by every
    worker's recovery sweep. Returns the ids of the requests expired.
    """
    now = now or timezone.now()
    due = list(ApprovalRequest.objects.filter(status=RequestStatus.PENDING, deadline__lte=now)
               .order_by("deadline").values_list("id", "run_id")[:EXPIRE_BATCH])
    expired: list[str] = []
    for request_id, run_id in due:
        with transaction.atomic():
            run = run_locked(run_id)
            request = ApprovalRequest.objects.select_for_update().get(pk=request_id)
            if request.status != RequestStatus.PENDING:
                continue
            if run.status in FINISHED_RUN_STATUSES:
                ApprovalRequest.objects.filter(pk=request_id).update(status=RequestStatus.CANCELLED)
                continue
            outcome = request.default_outcome
            request.status, request.decided_by, request.decided_at = RequestStatus.EXPIRED, None, now
            request.decision = {"decision": outcome, "expired": True,
                                "message": f"no one decided before the deadline ({request.deadline.isoformat()}); "
                                           f"the default outcome is {outcome}"}
            request.save(update_fields=["status", "decided_by", "decided_at", "decision"])
            event_emit(run_id=run.id, type="approval_decided", agent=request.agent, session_id=request.session_id,
                       data={"request": str(request.id), "kind": request.kind, "status": request.status,
                             "by": "the system", "at": now.isoformat(), **request.decision})
            _wake(run, request)
            expired.append(str(request_id))
    if expired:
        logger.info("approvals expired", extra={"requests": expired})
    return expired


def approvals_cancel(*, run: Run) -> int:
    """The run was cancelled: its pending requests wait for nothing any more (the caller holds the run's lock)."""
    return ApprovalRequest.objects.filter(run_id=run.id, status=RequestStatus.PENDING).update(
        status=RequestStatus.CANCELLED)


def team_approvals_update(*, team: Team, changes: dict[str, Any]) -> Team:
    """Change a team's approval policy, deadline, default outcome, webhook and own session limit (validated,
    then saved)."""
    from agents_app.approvals.policy import entries_check
    from agents_app.approvals.webhooks import webhook_url_refusal

    if "approval_policy" in changes:
        try:
            changes["approval_policy"] = entries_check(changes["approval_policy"])
        except ValueError as error:
            raise InvalidDecision(f"approval_policy: {error}") from None
    url = changes.get("webhook_url")
    if url:
        refusal = webhook_url_refusal(url)
        if refusal:
            raise InvalidDecision(f"webhook_url: {url} {refusal}")
    with transaction.atomic():
        team = Team.objects.select_for_update().get(pk=team.pk)
        limit = changes.get("session_limit")
        cap = team_limit(max_sessions=team.max_sessions, session_limit=None)
        if limit is not None and limit > cap:
            raise InvalidDecision(f"session_limit: at most {cap}, the operator's cap for this team "
                                  f"(a team's admins may only lower it)")
        for name, value in changes.items():
            setattr(team, name, value if value is not None or name == "session_limit" else "")
        team.full_clean()
        team.save(update_fields=list(changes))
    return team
