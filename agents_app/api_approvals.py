"""REST endpoints of people in the loop: the approvals inbox, decisions, and the team's approval settings.

Reading needs ``view``; deciding needs ``run`` (operators and admins);
changing the team's policy and webhook needs ``manage`` (admins). The work
is done by ``approvals.services``, as for the admin and the monitor.
"""

# No `from __future__ import annotations`: ninja reads the annotations at import time.

import re
import uuid
from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Query, Router, Status
from ninja.errors import ValidationError as NinjaValidationError
from pydantic import BaseModel, ConfigDict, Field

from agents_app.approvals.selectors import approval_get, approval_list
from agents_app.approvals.services import (
    MAX_ANSWER_CHARS,
    MAX_MESSAGE_CHARS,
    ApprovalError,
    InvalidDecision,
    approval_decide,
    team_approvals_update,
)
from agents_app.models import ApprovalRequest, Team
from agents_app.scheduler import team_limit
from mas_core.permissions import Actor
from mas_core.schemas import error_responses
from mas_core.api_auth import api_auth

router = Router(tags=["approvals"])
read, operate, manage = api_auth("view"), api_auth("run"), api_auth("manage")

RequestStatusName = Literal["pending", "approved", "rejected", "answered", "expired", "cancelled"]


class ApprovalOut(BaseModel):
    """A request for a person: a tool call to approve, a question to answer, a workflow step's gate, or content an
    ``ask`` guardrail holds until a person lets it go on: a tool's result, a session's final answer."""

    id: str
    run: str
    run_status: str
    session: str
    agent: str
    kind: Literal["approval", "question", "gate", "result", "answer"]
    tool: str = Field(description="The tool whose call (or result) waits (ask_human for a question, 'step …' for a "
                                  "gate).")
    call_id: str
    arguments: dict[str, Any] = Field(description="The call's arguments as the model gave them; for a result, "
                                                  "{\"result\": the text the model would read}; for an answer, "
                                                  "{\"answer\": the text}.")
    question: str
    choices: list[str]
    reason: str
    status: RequestStatusName
    deadline: datetime
    default_outcome: Literal["reject", "approve", "fail"]
    decided_by: str | None = Field(description="Who decided; null while pending or when the system did "
                                               "(the deadline).")
    decided_at: datetime | None
    decision: dict[str, Any] = Field(description="decision (approve, reject, answer), and the edited arguments, "
                                                 "message or answer.")
    created_at: datetime


class DecisionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "reject", "answer"]
    arguments: dict[str, Any] | None = Field(default=None, description=(
        "approve only: the arguments to run the call with instead (checked against the tool's parameters); for a "
        "result, {\"result\": the text the model reads instead}; for an answer, {\"answer\": the text that "
        "leaves instead}."))
    message: str = Field(default="", max_length=MAX_MESSAGE_CHARS, description=(
        "reject: what the model reads as the tool's result (why, what to do instead)."))
    answer: str | None = Field(default=None, max_length=MAX_ANSWER_CHARS, description=(
        "answer: the answer to a question (one of its choices when it has some)."))


class ApprovalFilters(BaseModel):
    status: RequestStatusName | None = None
    kind: Literal["approval", "question", "gate", "result", "answer"] | None = None
    run: uuid.UUID | None = None
    limit: int = Field(default=50, ge=1, le=500)
    offset: int = Field(default=0, ge=0, le=10_000_000)


class TeamSettingsOut(BaseModel):
    slug: str
    name: str
    approval_policy: list[Any] = Field(description=(
        "Tool names or patterns every agent of the team needs approval for (mcp_unmarked: every MCP tool not "
        "marked read-only), or {tool, deadline_s, default, reason}."))
    approval_deadline_s: int
    approval_default: Literal["reject", "approve", "fail"]
    webhook_url: str
    webhook_secret_set: bool = Field(description="Whether a webhook secret is set (the secret is never shown).")
    max_sessions: int = Field(description="The operator's cap: at most this many of the team's sessions run at once.")
    session_limit: int | None = Field(description="The team's own lower limit, if its admins set one.")
    weight: int = Field(description="The team's weight when teams with queued work share free worker slots.")


class TeamSettingsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    approval_policy: list[str | dict[str, Any]] | None = Field(default=None, max_length=100)
    approval_deadline_s: int | None = Field(default=None, ge=1, le=30 * 86400)
    approval_default: Literal["reject", "approve", "fail"] | None = None
    webhook_url: str | None = Field(default=None, max_length=500, description="Empty: no webhook.")
    webhook_secret: str | None = Field(default=None, min_length=0, max_length=200, description=(
        "The HMAC-SHA256 key of X-MAS-Signature (write-only; empty removes it)."))
    session_limit: int | None = Field(default=None, ge=1, le=100_000, description=(
        "At most this many of the team's sessions at once, at most the operator's cap (null: the cap)."))


def approval_out(request: ApprovalRequest) -> dict[str, Any]:
    return {
        "id": str(request.id), "run": str(request.run_id), "run_status": request.run.status,
        "session": str(request.session_id), "agent": request.agent, "kind": request.kind, "tool": request.tool,
        "call_id": request.call_id, "arguments": request.arguments, "question": request.question,
        "choices": request.choices, "reason": request.reason, "status": request.status,
        "deadline": request.deadline, "default_outcome": request.default_outcome,
        "decided_by": request.decided_by.get_username() if request.decided_by_id else None,
        "decided_at": request.decided_at, "decision": request.decision, "created_at": request.created_at,
    }


def team_settings_out(team: Team) -> dict[str, Any]:
    return {"slug": team.slug, "name": team.name, "approval_policy": team.approval_policy,
            "approval_deadline_s": team.approval_deadline_s, "approval_default": team.approval_default,
            "webhook_url": team.webhook_url, "webhook_secret_set": bool(team.webhook_secret),
            "max_sessions": team_limit(max_sessions=team.max_sessions, session_limit=None),
            "session_limit": team.session_limit, "weight": team.weight}


def _invalid(error: InvalidDecision) -> NinjaValidationError:
    text = str(error)
    field = re.match(r"[a-z_]*", text).group(0)  # the messages start with the field they are about
    field = field if field in {"decision", "arguments", "message", "answer", "approval_policy",
                               "webhook_url", "session_limit"} else "decision"
    return NinjaValidationError([{"loc": ("body", field), "msg": text, "type": "invalid_decision"}])


@router.get("/approvals", auth=read, response={200: list[ApprovalOut], **error_responses(401, 403, 422)},
            operation_id="approval_list", summary="The team's requests for a person across its runs, newest first")
def list_approvals(request: HttpRequest, filters: Query[ApprovalFilters]):
    actor: Actor = request.auth
    rows = approval_list(team=actor.team, status=filters.status, kind=filters.kind, run_id=filters.run,
                         limit=filters.limit, offset=filters.offset)
    return [approval_out(row) for row in rows]


@router.get("/approvals/{request_id}", auth=read, response={200: ApprovalOut, **error_responses(401, 403, 404)},
            operation_id="approval_get", summary="One request for a person, with its decision once decided")
def get_approval(request: HttpRequest, request_id: str):
    actor: Actor = request.auth
    return approval_out(approval_get(team=actor.team, request_id=request_id))


@router.post("/approvals/{request_id}", auth=operate,
             response={200: ApprovalOut, **error_responses(401, 403, 404, 409, 413, 415, 422)},
             operation_id="approval_decide",
             summary="Decide a pending request (operators and admins): approve, maybe with edited arguments; "
                     "reject with a message the model reads; or answer a question. A second decision is a 409.")
def decide(request: HttpRequest, request_id: str, payload: DecisionIn):
    actor: Actor = request.auth
    row = approval_get(team=actor.team, request_id=request_id)
    try:
        approval_decide(team=actor.team, request_id=row.id, user=actor.user, decision=payload.decision,
                        arguments=payload.arguments, message=payload.message, answer=payload.answer)
    except InvalidDecision as error:
        raise _invalid(error) from None
    except ApprovalError as error:
        return Status(error.status, {"detail": str(error)})
    return approval_out(approval_get(team=actor.team, request_id=row.id))


@router.get("/team", auth=read, response={200: TeamSettingsOut, **error_responses(401, 403)}, operation_id="team_get",
            summary="The team's approval policy, deadline, default outcome and webhook (never its secret)")
def get_team(request: HttpRequest):
    actor: Actor = request.auth
    return team_settings_out(actor.team)


@router.patch("/team", auth=manage, response={200: TeamSettingsOut, **error_responses(401, 403, 413, 415, 422)},
              operation_id="team_update",
              summary="Change the team's approval policy, deadline, default outcome, webhook or own session limit "
                      "(admins)")
def patch_team(request: HttpRequest, payload: TeamSettingsIn):
    actor: Actor = request.auth
    changes = payload.model_dump(exclude_unset=True)
    for name in ("approval_deadline_s", "approval_default", "approval_policy"):
        if name in changes and changes[name] is None:
            raise NinjaValidationError([{"loc": ("body", name), "msg": f"{name} cannot be null", "type": "null"}])
    try:
        team = team_approvals_update(team=actor.team, changes=changes)
    except InvalidDecision as error:
        raise _invalid(error) from None
    return team_settings_out(team)
