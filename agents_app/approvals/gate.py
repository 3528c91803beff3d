"""The session's side of a pause: ask once, suspend, and on resuming read the decision instead of asking again.

A call that needs approval creates its request and returns *suspended*: the
loop checkpoints it and the session ends *suspended*, holding nothing (as a
session waiting for a delegation does; its run is *waiting* for a person). When the request is decided the session resumes
on a worker and calls the tool again through here: now the decision exists,
so the tool runs (with the edited arguments, if any) or the model reads the
rejection — the person is never asked twice for one call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents_app.approvals import services
from agents_app.approvals.policy import Rule, rule_for
from agents_app.models.approvals import RequestKind, RequestStatus
from mas_core.runner import db
from tools_app.plugin import ToolAborted


class ApprovalFailed(ToolAborted):
    """No one decided in time and the default outcome is to fail: the session fails, not retried."""


# What a person may make of a held result (or answer): its text, edited or not.
HELD_SCHEMAS = {kind: {"type": "object", "properties": {key: {"type": "string", "maxLength": 1_000_000}},
                       "required": [key], "additionalProperties": False}
                for kind, key in ((RequestKind.RESULT, "result"), (RequestKind.ANSWER, "answer"))}


@dataclass(frozen=True)
class Verdict:
    suspend: bool = False
    arguments: dict[str, Any] | None = None  # run the tool with these
    refusal: str | None = None  # the tool does not run: the model reads this as its result


def _decided(request) -> Verdict:
    """What a decided (or still pending) request means for its call."""
    if request.status == RequestStatus.PENDING:
        return Verdict(suspend=True)
    decision = request.decision or {}
    message = decision.get("message") or ""
    what = {RequestKind.APPROVAL: f"{request.tool} was not run",
            RequestKind.RESULT: f"the result of {request.tool} was withheld",
            RequestKind.ANSWER: "your answer was withheld"}.get(request.kind, "the step may not go on")
    if request.status == RequestStatus.CANCELLED:
        return Verdict(refusal=f"{what}: the run was cancelled while it waited for a person.")
    if request.status == RequestStatus.EXPIRED:
        if decision.get("decision") == "fail":
            raise ApprovalFailed(f"no one decided on {request.tool or request.kind} before the deadline "
                                 f"({request.deadline.isoformat()}), and the default outcome is to fail")
        if decision.get("decision") == "approve":
            return Verdict(arguments=request.arguments)
        return Verdict(refusal=f"{what}: no one decided before the deadline ({request.deadline.isoformat()}), "
                               f"and the default outcome is to reject it.")
    if request.status == RequestStatus.REJECTED:
        by = request.decided_by.get_username() if request.decided_by_id else "a person"
        return Verdict(refusal=f"{what}: {by} rejected it." + (f" Their message: {message}" if message else ""))
    return Verdict(arguments=decision.get("arguments", request.arguments))


class Gate:
    """A session's approval rules and the requests it made (one per tool call or gate)."""

    def __init__(self, *, rules: list[Rule], run_id, session_id, agent: str) -> None:
        self.rules, self.run_id, self.session_id, self.agent = rules, run_id, session_id, agent

    def rule(self, name: str, tool: Any) -> Rule | None:
        return rule_for(self.rules, name, mcp=hasattr(tool, "mcp_server"), read_only=bool(getattr(tool, "read_only",
                                                                                                   False)))

    async def _lookup(self, call_id: str):
        return await db(lambda: services.ApprovalRequest.objects.select_related("decided_by").filter(
            session_id=self.session_id, call_id=call_id).first())()

    async def call(self, *, call_id: str, name: str, arguments: dict[str, Any], schema: dict[str, Any],
                   rule: Rule) -> Verdict:
        """May tool call ``call_id`` run? Asks a person the first time (suspend), reads the decision after."""
        request = await self._lookup(call_id)
        if request is None:
            await db(services.approval_request)(run_id=self.run_id, session_id=self.session_id, agent=self.agent,
                                                asked=services.Asked(
                                                    kind=RequestKind.APPROVAL, call_id=call_id, tool=name,
                                                    arguments=arguments, schema=schema, reason=rule.describe(name),
                                                    deadline_s=rule.deadline_s, default=rule.default))
            return Verdict(suspend=True)
        verdict = _decided(request)
        if verdict.arguments is not None:
            await db(services.approval_consume)(request_id=request.id)
        return verdict

    async def step(self, *, where: str, details: dict[str, Any], reason: str) -> Verdict:
        """A workflow step's gate ``where`` (start or outputs): the same, with nothing to run."""
        call_id = f"gate:{where}"
        request = await self._lookup(call_id)
        if request is None:
            await db(services.approval_request)(run_id=self.run_id, session_id=self.session_id, agent=self.agent,
                                                asked=services.Asked(kind=RequestKind.GATE, call_id=call_id,
                                                                     tool=f"step {where}", arguments=details,
                                                                     reason=reason))
            return Verdict(suspend=True)
        verdict = _decided(request)
        if verdict.arguments is not None:
            await db(services.approval_consume)(request_id=request.id)
        return verdict

    async def held(self, key: str) -> Verdict | None:
        """What became of the content held as ``key`` (:meth:`hold`): None when none was held, else the
        verdict — its ``arguments`` hold the text that may go on (as the person may have edited it)."""
        request = await self._lookup(key)
        if request is None:
            return None
        verdict = _decided(request)
        if verdict.arguments is not None:
            await db(services.approval_consume)(request_id=request.id)
        return verdict

    async def hold(self, *, key: str, kind: str, name: str, content: str, reason: str) -> None:
        """Hold ``content`` until a person lets it go on, edited or not, or withholds it: an approval request of
        ``kind`` result (a tool's result, ``name`` the tool's) or answer (the session's final answer), named
        ``key`` in the session, whose arguments are ``{kind: content}``."""
        await db(services.approval_request)(run_id=self.run_id, session_id=self.session_id, agent=self.agent,
                                            asked=services.Asked(kind=kind, call_id=key, tool=name,
                                                                 arguments={kind: content}, schema=HELD_SCHEMAS[kind],
                                                                 reason=reason))

    async def ask(self, *, call_id: str, question: str, choices: list[str]) -> tuple[bool, str]:
        """ask_human: (True, "") while waiting for the answer, then (False, the text the model reads)."""
        request = await self._lookup(call_id)
        if request is None:
            await db(services.approval_request)(run_id=self.run_id, session_id=self.session_id, agent=self.agent,
                                                asked=services.Asked(kind=RequestKind.QUESTION, call_id=call_id,
                                                                     tool="ask_human", question=question,
                                                                     choices=choices, reason="the agent asks"))
            return True, ""
        if request.status == RequestStatus.PENDING:
            return True, ""
        decision = request.decision or {}
        if request.status == RequestStatus.ANSWERED:
            await db(services.approval_consume)(request_id=request.id)
            return False, decision["answer"]
        if request.status == RequestStatus.EXPIRED and decision.get("decision") == "fail":
            raise ApprovalFailed(f"no one answered the question before the deadline "
                                 f"({request.deadline.isoformat()}), and the default outcome is to fail")
        if request.status == RequestStatus.REJECTED:
            message = decision.get("message") or ""
            return False, "The person declined to answer." + (f" Their message: {message}" if message else "")
        if request.status == RequestStatus.CANCELLED:
            return False, "No answer: the run was cancelled."
        return False, f"No one answered before the deadline ({request.deadline.isoformat()})."
