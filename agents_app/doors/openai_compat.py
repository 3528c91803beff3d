"""The OpenAI-compatible door (issue 25): an exposed agent answers OpenAI's Chat Completions and Responses APIs
as a model would.

``GET /v1/models`` lists the team's exposed agents (``expose: true``) the token may call; ``POST
/v1/chat/completions`` and ``POST /v1/responses`` with ``model`` = one of their slugs start a run of it —
through ``run_start``, as ``POST /api/runs`` does: the same token check and role (run), the team's rate
limit, budgets, guardrails and approvals — whose task is the conversation (:func:`task_of`), and answer with
the run's result: whole, or as it streams (``"stream": true``: Server-Sent Events of the root agent's text,
as ``chat.completion.chunk`` deltas or ``response.output_text.delta`` events). A response may continue an
earlier one of the team (``previous_response_id``): its run starts from that run's conversation
(``Run.door_turns``) and answer. The run shows on the monitor like any other (its id is the completion's after
``chatcmpl-``, the response's after ``resp_``, and the ``X-MAS-Run`` header's). Errors have OpenAI's shape,
``{"error": {"message", "type", "param", "code"}}``.

An ASGI app beside Django's (``mas_project.asgi`` sends it ``/v1/``): a caller waiting for a run holds a
coroutine, not a thread (:class:`~agents_app.doors.follow.RunFollower`); its database work passes the web
process's gate as Django's requests do. A caller that goes away cancels its run. A run that fails, is
cancelled or has not finished after ``MAS_DOORS_WAIT_S`` (it goes on: the monitor has it) is answered 422
(``type: run_error``), which OpenAI's clients do not retry: a retry would start another run.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agents_app.doors.common import (
    RESPONSE_PREFIX,
    WORKFLOW_PREFIX,
    DoorError,
    Gone,
    Turn,
    actor_of,
    bearer,
    in_thread,
    inputs_object,
    parsed,
    read_body,
    run_ended,
    send_json,
    start_agent,
    start_workflow,
    task_of,
    trace_of,
    until_done,
)
from agents_app.doors.follow import RunFollower
from mas_core.telemetry import RunTrace
from mas_core.ws_security import client_address

MAX_MESSAGES = 1_000
OBJECT_PREFIX = "chatcmpl-"
MESSAGE_PREFIX = "msg_"


# -- what a caller sends --------------------------------------------------------------------------


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["text", "input_text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class ChatCompletionIn(BaseModel):
    """A chat completion request; the sampling settings a client sends (temperature, …) are the agent's to
    choose and are not read."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, max_length=200)
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=1)


class InputPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["input_text", "output_text", "text"]
    text: str


class InputMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["message"] = "message"
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[InputPart]


class ResponseIn(BaseModel):
    """A response request; as for a chat completion, the sampling settings are the agent's."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, max_length=200)
    input: str | list[InputMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    instructions: str | None = None
    previous_response_id: str | None = Field(default=None, max_length=100)
    stream: bool = False


def chat_turns(messages: list[ChatMessage]) -> list[Turn]:
    return [(message.role, _text(message.content)) for message in messages]


def response_turns(request: ResponseIn) -> list[Turn]:
    if isinstance(request.input, str):
        return [("user", request.input)]
    return [(message.role, _text(message.content)) for message in request.input]


def _text(content: str | list | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "\n".join(part.text for part in content)


# -- the database side (in threads) -----------------------------------------------------------------


def _exposed(team) -> list[tuple[str, int]]:
    """The team's exposed agents and workflows, as models: (slug or ``workflow:<slug>``, when it was made, in
    seconds)."""
    from agents_app.execution.hooks import RUN_HOOKS
    from agents_app.models import Agent

    agents = [(slug, int(created.timestamp())) for slug, created in Agent.objects.filter(
        team=team, spec__expose=True).order_by("slug").values_list("slug", "created_at")]
    return agents + [(WORKFLOW_PREFIX + slug, created) for slug, created, _ in RUN_HOOKS.workflows_exposed(team=team)]


def _start(actor, trace: RunTrace, model: str, turns: list[Turn], instructions: str = "",
           previous: str | None = None) -> str:
    """A run of the agent or workflow (``workflow:<slug>``) ``model`` names, answering ``turns``."""
    if not model.startswith(WORKFLOW_PREFIX):
        return start_agent(actor, model, turns, instructions, previous, trace)
    if previous is not None:
        raise DoorError(400, "a workflow's response cannot continue another (previous_response_id): a workflow "
                             "answers one request", param="previous_response_id", code="unsupported")
    return start_workflow(actor, model.removeprefix(WORKFLOW_PREFIX),
                          lambda declared: _workflow_inputs(declared, turns, instructions), trace)


def _workflow_inputs(declared: tuple[str, ...], turns: list[Turn], instructions: str) -> dict[str, Any]:
    """A workflow's inputs from a conversation: its one input is the task; with several, the last user message
    is a JSON object of them; with none, nothing."""
    if not declared:
        return {}
    task = task_of(turns, instructions=instructions)
    if len(declared) == 1:
        return {declared[0]: task}
    values = inputs_object(next(text for role, text in reversed(turns) if role == "user"))
    if values is None:
        raise DoorError(400, f"the workflow takes the inputs {', '.join(declared)}: send them as a JSON object in "
                             "the last user message", param="messages", code="invalid_inputs")
    return values


# -- the ASGI app -----------------------------------------------------------------------------------

ROUTES = ("/v1/models", "/v1/chat/completions", "/v1/responses")


async def app(scope, receive, send) -> None:
    """``/v1/models``, ``/v1/chat/completions`` and ``/v1/responses``; anything else under ``/v1/`` is a 404 in
    OpenAI's shape."""
    try:
        path, method = scope["path"].rstrip("/"), scope["method"]
        if path == "/v1/models" and method == "GET":
            actor = await in_thread(actor_of, bearer(scope), "view", client_address(scope))
            await send_json(send, 200, {"object": "list", "data": [
                {"id": slug, "object": "model", "created": created, "owned_by": actor.team.slug}
                for slug, created in await in_thread(_exposed, actor.team)]})
        elif path == "/v1/chat/completions" and method == "POST":
            actor = await in_thread(actor_of, bearer(scope), "run", client_address(scope))
            request = parsed(ChatCompletionIn, await read_body(receive))
            run_id = await in_thread(_start, actor, trace_of("openai.chat_completions", scope), request.model,
                                     chat_turns(request.messages))
            await (_chat_stream if request.stream else _chat_whole)(send, receive, run_id=run_id, request=request)
        elif path == "/v1/responses" and method == "POST":
            actor = await in_thread(actor_of, bearer(scope), "run", client_address(scope))
            request = parsed(ResponseIn, await read_body(receive))
            run_id = await in_thread(_start, actor, trace_of("openai.responses", scope), request.model,
                                     response_turns(request), request.instructions or "", request.previous_response_id)
            await (_response_stream if request.stream else _response_whole)(send, receive, run_id=run_id,
                                                                              request=request)
        elif path in ROUTES:
            raise DoorError(405, f"{method} is not allowed on {path}", code="method_not_allowed")
        else:
            raise DoorError(404, f"no route {method} {path}: this server answers GET /v1/models, POST "
                                 "/v1/chat/completions and POST /v1/responses", code="not_found")
    except DoorError as error:
        await send_json(send, error.status, error.body(), headers=error.headers)
    except Gone:
        pass


async def _answer(receive, run_id: str) -> dict[str, Any]:
    """The run once it has ended (the caller gone: cancelled; too long: a 422)."""
    async def ended() -> dict[str, Any]:
        async with aclosing(RunFollower(run_id).events()) as events:
            async for _ in events:
                pass  # to its run_complete
        return await in_thread(run_ended, run_id)

    run = await until_done(receive, run_id, ended())
    if run["status"] != "succeeded":
        raise _failed(run_id, run)
    return run


async def _texts(run_id: str, ended: list[dict[str, Any]]) -> AsyncIterator[str]:
    """The root agent's text as its model streams it, then what did not stream of the run's result (an answer
    a guardrail held, a cached one); the run, once ended, is put in ``ended``."""
    roots: set[str] = set()
    streamed: list[str] = []
    async with aclosing(RunFollower(run_id).events()) as events:
        async for event in events:
            kind, data = event["type"], event.get("data") or {}
            if kind == "session_start" and data.get("kind") == "root":
                roots.add(event["session"])
            elif kind == "stream_chunk" and event["session"] in roots and data.get("text"):
                streamed.append(data["text"])
                yield data["text"]
    run = await in_thread(run_ended, run_id)
    sent = "".join(streamed)
    if run["status"] == "succeeded" and run["result"].startswith(sent) and len(run["result"]) > len(sent):
        yield run["result"][len(sent):]
    ended.append(run)


async def _streamed(send, receive, run_id: str, write) -> dict[str, Any] | None:
    """Relay the run's text through ``write(delta)``: the run once ended, or None when its caller went away (the
    run cancelled). A run without an answer, or too long, is a :class:`DoorError`."""
    ended: list[dict[str, Any]] = []

    async def relay() -> None:
        async with aclosing(_texts(run_id, ended)) as texts:
            async for text in texts:
                await write(text)

    try:
        await until_done(receive, run_id, relay())
    except Gone:
        return None
    run = ended[0]
    if run["status"] != "succeeded":
        raise _failed(run_id, run)
    return run


async def _ssestart_agent(send, run_id: str) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
        (b"x-mas-run", run_id.encode())]})


# -- chat completions -------------------------------------------------------------------------------


async def _chat_whole(send, receive, *, run_id: str, request: ChatCompletionIn) -> None:
    run = await _answer(receive, run_id)
    await send_json(send, 200, {
        "id": OBJECT_PREFIX + run_id, "object": "chat.completion", "created": int(run["created_at"].timestamp()),
        "model": request.model, "system_fingerprint": None,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": run["result"], "refusal": None},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": _usage(run)}, headers=[(b"x-mas-run", run_id.encode())])


async def _chat_stream(send, receive, *, run_id: str, request: ChatCompletionIn) -> None:
    await _ssestart_agent(send, run_id)
    created = int(time.time())

    async def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict | None = None) -> None:
        data = {"id": OBJECT_PREFIX + run_id, "object": "chat.completion.chunk", "created": created,
                "model": request.model, "system_fingerprint": None,
                "choices": [] if usage is not None else [{"index": 0, "delta": delta, "logprobs": None,
                                                          "finish_reason": finish}]}
        if usage is not None:
            data["usage"] = usage
        await _event(send, data)

    await chunk({"role": "assistant", "content": ""})
    try:
        run = await _streamed(send, receive, run_id, lambda text: chunk({"content": text}))
    except DoorError as error:
        await _event(send, error.body())
    else:
        if run is None:
            return
        await chunk({}, finish="stop")
        if request.stream_options is not None and request.stream_options.include_usage:
            await chunk({}, usage=_usage(run))
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


# -- responses ------------------------------------------------------------------------------------


def _response(run_id: str, request: ResponseIn, *, created: int, status: str, text: str | None = None,
              run: dict[str, Any] | None = None, error: DoorError | None = None) -> dict[str, Any]:
    """A Response object: ``status`` in_progress (no output yet), completed (``text``, ``run``'s usage) or
    failed (``error``)."""
    output = [] if text is None else [_message(run_id, text, "completed")]
    return {
        "id": RESPONSE_PREFIX + run_id, "object": "response", "created_at": created, "status": status,
        "model": request.model, "output": output, "instructions": request.instructions,
        "previous_response_id": request.previous_response_id, "parallel_tool_calls": False, "tool_choice": "auto",
        "tools": [], "metadata": {}, "incomplete_details": None, "text": {"format": {"type": "text"}},
        "error": None if error is None else {"code": error.code, "message": str(error)},
        "usage": None if run is None else {
            "input_tokens": run["prompt_tokens"], "output_tokens": run["completion_tokens"],
            "total_tokens": run["prompt_tokens"] + run["completion_tokens"],
            "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
    }


def _message(run_id: str, text: str, status: str) -> dict[str, Any]:
    return {"type": "message", "id": MESSAGE_PREFIX + run_id, "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []}


async def _response_whole(send, receive, *, run_id: str, request: ResponseIn) -> None:
    run = await _answer(receive, run_id)
    await send_json(send, 200, _response(run_id, request, created=int(run["created_at"].timestamp()),
                                     status="completed", text=run["result"], run=run),
                headers=[(b"x-mas-run", run_id.encode())])


async def _response_stream(send, receive, *, run_id: str, request: ResponseIn) -> None:
    await _ssestart_agent(send, run_id)
    created, numbered = int(time.time()), iter(range(1_000_000_000))
    item = MESSAGE_PREFIX + run_id
    part = {"item_id": item, "output_index": 0, "content_index": 0}
    texts: list[str] = []

    async def event(kind: str, **data: Any) -> None:
        await send({"type": "http.response.body", "more_body": True, "body": (
            f"event: {kind}\ndata: "
            f"{json.dumps({'type': kind, 'sequence_number': next(numbered), **data}, default=str)}\n\n").encode()})

    async def delta(text: str) -> None:
        texts.append(text)
        await event("response.output_text.delta", **part, delta=text, logprobs=[])

    started = _response(run_id, request, created=created, status="in_progress")
    await event("response.created", response=started)
    await event("response.in_progress", response=started)
    await event("response.output_item.added", output_index=0, item=_message(run_id, "", "in_progress"))
    await event("response.content_part.added", **part, part={"type": "output_text", "text": "", "annotations": []})
    try:
        run = await _streamed(send, receive, run_id, delta)
    except DoorError as error:
        await event("response.failed", response=_response(run_id, request, created=created, status="failed",
                                                           error=error))
    else:
        if run is None:
            return
        text = "".join(texts)
        await event("response.output_text.done", **part, text=text, logprobs=[])
        await event("response.content_part.done", **part, part={"type": "output_text", "text": text,
                                                                 "annotations": []})
        await event("response.output_item.done", output_index=0, item=_message(run_id, text, "completed"))
        await event("response.completed", response=_response(run_id, request, created=created, status="completed",
                                                             text=text, run=run))
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _failed(run_id: str, run: dict[str, Any]) -> DoorError:
    """A run that ended without an answer: 422, which clients do not retry (a retry would start another run)."""
    if run["status"] == "cancelled":
        return DoorError(422, f"run {run_id} was cancelled", type="run_error", code="run_cancelled")
    return DoorError(422, f"run {run_id} failed: {run['error'] or 'no result'}", type="run_error", code="run_failed")


def _usage(run: dict[str, Any]) -> dict[str, int]:
    return {"prompt_tokens": run["prompt_tokens"], "completion_tokens": run["completion_tokens"],
            "total_tokens": run["prompt_tokens"] + run["completion_tokens"]}


# -- HTTP ---------------------------------------------------------------------------------------


async def _event(send, data: dict[str, Any]) -> None:
    await send({"type": "http.response.body", "body": f"data: {json.dumps(data, default=str)}\n\n".encode(),
                "more_body": True})
