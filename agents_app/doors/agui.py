"""A run as AG-UI events over Server-Sent Events (issue 25): AG-UI front ends start an exposed agent, or attach to
a run of the team, and follow it live.

``POST /ag-ui/agents/<slug>`` takes AG-UI's ``RunAgentInput`` (what an AG-UI ``HttpAgent`` sends): its messages
are the conversation a run of the exposed agent answers (started as the other doors start theirs,
:mod:`agents_app.doors.common`), and the answer is the run's events as AG-UI events, with the caller's
``threadId`` and ``runId``; a caller that goes away cancels the run. ``GET /ag-ui/runs/<run id>`` attaches to any
run of the token's team (role view), from its first event, its ``threadId`` and ``runId`` the run's id.

The events (``ag-ui-protocol``'s models, encoded by its ``EventEncoder``), by the run's (:class:`Translation`):
``RUN_STARTED`` first; a session's start and end are ``STEP_STARTED`` and ``STEP_FINISHED`` (the agent's
name); a model's answer is ``TEXT_MESSAGE_START``, ``TEXT_MESSAGE_CONTENT`` as it streams, ``TEXT_MESSAGE_END``;
a tool call ``TOOL_CALL_START``, ``TOOL_CALL_ARGS`` (its arguments, JSON), ``TOOL_CALL_END`` and
``TOOL_CALL_RESULT``; what a person is asked, a guardrail's firing, a file's change, an error are ``CUSTOM``
events named ``mas.<event>``; the run's end ``RUN_FINISHED`` (its result) or ``RUN_ERROR``.
"""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any

from ag_ui.core import (
    CustomEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.core.events import BaseEvent
from ag_ui.encoder import EventEncoder

from agents_app.doors.common import (
    DoorError,
    Gone,
    actor_of,
    bearer,
    in_thread,
    is_uuid,
    parsed,
    read_body,
    run_ended,
    send_json,
    start_agent,
    trace_of,
    until_done,
)
from agents_app.doors.follow import RunFollower
from mas_core.ws_security import client_address

AGENTS = "/ag-ui/agents/"
RUNS = "/ag-ui/runs/"
# MAS events told as CUSTOM events (the others are mapped, or not told: llm_request, activation_queued, …).
CUSTOM = frozenset({"approval_requested", "approval_decided", "human_question", "guardrail_triggered", "file_change",
                    "budget_warning", "error", "escalation", "context_compacted"})


class Translation:
    """One run's MAS events as AG-UI events, told as ``thread_id`` / ``run_id``."""

    def __init__(self, *, thread_id: str, run_id: str) -> None:
        self.thread_id, self.run_id = thread_id, run_id
        self.messages: dict[str, str] = {}  # a session's message being streamed: its id
        self.counts: dict[str, int] = {}  # messages per session, for their ids

    def started(self) -> BaseEvent:
        return RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id)

    def of(self, event: dict[str, Any], *, result: str | None = None) -> list[BaseEvent]:
        kind, session, agent = event["type"], event.get("session") or "", event.get("agent") or ""
        data = event.get("data") or {}
        if kind == "session_start":
            return [StepStartedEvent(step_name=agent)]
        if kind == "session_end":
            return [*self._ended(session), StepFinishedEvent(step_name=agent)]
        if kind == "stream_chunk" and data.get("text"):
            opened = [] if session in self.messages else [self._open(session)]
            return [*opened, TextMessageContentEvent(message_id=self.messages[session], delta=data["text"])]
        if kind == "llm_response":
            if session not in self.messages and data.get("text"):  # not streamed: told whole
                return [self._open(session), TextMessageContentEvent(message_id=self.messages[session],
                                                                     delta=data["text"]), *self._ended(session)]
            return self._ended(session)
        if kind == "tool_call":
            call = f"{session}:{data.get('id')}"
            return [ToolCallStartEvent(tool_call_id=call, tool_call_name=str(data.get("name")),
                                       parent_message_id=self._last(session)),
                    ToolCallArgsEvent(tool_call_id=call, delta=json.dumps(data.get("arguments") or {})),
                    ToolCallEndEvent(tool_call_id=call)]
        if kind == "tool_result":
            call = f"{session}:{data.get('id')}"
            return [ToolCallResultEvent(message_id=f"{call}:result", tool_call_id=call,
                                        content=str(data.get("content") or ""), role="tool")]
        if kind == "run_complete":
            if data.get("status") == "succeeded":
                return [RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id,
                                         result=result if result is not None else data.get("result"))]
            return [RunErrorEvent(message=data.get("error") or f"the run {data.get('status')}",
                                  code=data.get("status"))]
        if kind in CUSTOM:
            return [CustomEvent(name=f"mas.{kind}", value=data)]
        return []

    def _open(self, session: str) -> BaseEvent:
        self.counts[session] = self.counts.get(session, 0) + 1
        self.messages[session] = f"{session}:{self.counts[session]}"
        return TextMessageStartEvent(message_id=self.messages[session], role="assistant")

    def _ended(self, session: str) -> list[BaseEvent]:
        message = self.messages.pop(session, None)
        return [TextMessageEndEvent(message_id=message)] if message else []

    def _last(self, session: str) -> str | None:
        count = self.counts.get(session)
        return f"{session}:{count}" if count else None


async def app(scope, receive, send) -> None:
    path, method = scope["path"], scope["method"]
    encoder = EventEncoder()
    try:
        if path.startswith(AGENTS) and method == "POST":
            actor = await in_thread(actor_of, bearer(scope), "run", client_address(scope))
            request = parsed(RunAgentInput, await read_body(receive))
            turns = [(message.role, _text(message.content)) for message in request.messages]
            run_id = await in_thread(start_agent, actor, path.removeprefix(AGENTS).strip("/"), turns, "", None,
                                     trace_of("ag-ui", scope))
            translation = Translation(thread_id=request.thread_id, run_id=request.run_id)
            await _stream(send, receive, encoder, run_id, translation, cancel_when_gone=True)
        elif path.startswith(RUNS) and method == "GET":
            actor = await in_thread(actor_of, bearer(scope), "view", client_address(scope))
            run_id = path.removeprefix(RUNS).strip("/")
            if not await in_thread(_teams_run, actor.team, run_id):
                raise DoorError(404, f"no run {run_id!r} of this team", code="not_found")
            await _stream(send, receive, encoder, run_id, Translation(thread_id=run_id, run_id=run_id),
                          cancel_when_gone=False)
        else:
            raise DoorError(404, f"no route {method} {path}: this server answers POST {AGENTS}<agent> and GET "
                                 f"{RUNS}<run id>", code="not_found")
    except DoorError as error:
        await send_json(send, error.status, error.body(), headers=error.headers)
    except Gone:
        pass


async def _stream(send, receive, encoder: EventEncoder, run_id: str, translation: Translation, *,
                  cancel_when_gone: bool) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", encoder.get_content_type().encode()), (b"cache-control", b"no-cache"),
        (b"x-mas-run", run_id.encode())]})

    async def tell(events: list[BaseEvent]) -> None:
        for event in events:
            await send({"type": "http.response.body", "body": encoder.encode(event).encode(), "more_body": True})

    async def relay() -> None:
        await tell([translation.started()])
        async with aclosing(RunFollower(run_id).events()) as events:
            async for event in events:
                result = None
                if event["type"] == "run_complete":  # its data holds the first 2,000 characters only
                    result = (await in_thread(run_ended, run_id))["result"]
                await tell(translation.of(event, result=result))

    try:
        await until_done(receive, run_id, relay(), cancel=cancel_when_gone)
    except DoorError as error:
        await tell([RunErrorEvent(message=str(error), code=error.code)])
    except Gone:
        return
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _text(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "\n".join(getattr(part, "text", "") for part in content if getattr(part, "text", None))


def _teams_run(team, run_id: str) -> bool:
    from agents_app.models import Run

    return is_uuid(run_id) and Run.objects.filter(pk=run_id, team=team).exists()
