"""What the doors share (:mod:`agents_app.doors`): who calls (a token of the team), what they may call (its
exposed agents and workflows), starting a run of one the way ``POST /api/runs`` does (the team's rate limit,
``run_start``), and the run's end — their database work in threads, past the web process's gate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from pydantic import BaseModel, ValidationError
from django.conf import settings

from mas_core.telemetry import RunTrace

RESPONSE_PREFIX = "resp_"
WORKFLOW_PREFIX = "workflow:"


class Gone(Exception):
    """The caller went away (its run, if started, is cancelled): nothing is answered."""


class DoorError(Exception):
    """An answer in OpenAI's error shape: ``status``, ``type`` and ``code`` as OpenAI's API uses them."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", code: str | None = None,
                 param: str | None = None, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(message)
        self.status, self.type, self.code, self.param = status, type, code, param
        self.headers = headers or []

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.type, "param": self.param, "code": self.code}}


Turn = tuple[str, str]  # (role, text): a message of a conversation


def task_of(turns: list[Turn], *, instructions: str = "") -> str:
    """The run's task: the last user message, after the caller's instructions and the conversation before it
    when there are some."""
    last = next((index for index in range(len(turns) - 1, -1, -1) if turns[index][0] == "user"), None)
    if last is None:
        raise DoorError(400, "at least one message must have the role user", param="messages")
    told = [instructions] if instructions else []
    told += [text for role, text in turns[:last] if role in ("system", "developer") and text]
    earlier = [f"{role.capitalize()}: {text}" for role, text in turns[:last] if role not in ("system", "developer")
               and text]
    parts = []
    if told:
        parts.append("The caller's instructions:\n" + "\n\n".join(told))
    if earlier:
        parts.append("The conversation so far:\n" + "\n\n".join(earlier))
    if not parts:
        return turns[last][1]
    return "\n\n".join(parts + ["The message to answer:\n" + turns[last][1]])


def actor_of(token: str | None, capability: str, address: str):
    from mas_core import ratelimit
    from mas_core.permissions import Actor
    from mas_core.teams import api_token_authenticate

    row = api_token_authenticate(token) if token else None
    if row is None:
        wait = ratelimit.token_failure(address) if token else None
        if wait is not None:
            raise DoorError(429, f"too many failed token authentications from your address; retry in {wait} s",
                            type="rate_limit_error", code="rate_limit_exceeded",
                            headers=[(b"retry-after", str(wait).encode())])
        raise DoorError(401, "a valid API token is required: Authorization: Bearer <the team's token>",
                        type="invalid_request_error", code="invalid_api_key")
    actor = Actor(user=row.user, team=row.team, role=row.role)
    if not actor.can(capability):
        raise DoorError(403, f"role {actor.role} in team {actor.team.slug} does not allow {capability}",
                        type="permission_error", code="insufficient_permissions")
    return actor


def start_agent(actor, model: str, turns: list[Turn], instructions: str = "", previous: str | None = None,
                trace: RunTrace | None = None) -> str:
    """Start the run of ``model`` answering ``turns`` (after the conversation of the run ``previous`` names, a
    response of the team's), its trace starting at the door ``trace`` names (:func:`trace_of`): its id."""
    from agents_app.execution.errors import InputBlocked, RunError
    from agents_app.execution.runs import run_start
    from agents_app.models import Agent
    from agents_app.schemas_runs import MAX_INPUT_CHARS

    if not Agent.objects.filter(team=actor.team, slug=model, spec__expose=True).exists():
        raise unknown_model(model)
    if previous is not None:
        turns = continued(actor.team, previous) + turns
    task = task_of(turns, instructions=instructions)
    if len(task) > MAX_INPUT_CHARS:
        raise DoorError(400, f"messages: the conversation is {len(task):,} characters; a run's task holds at most "
                             f"{MAX_INPUT_CHARS:,}", param="messages", code="context_length_exceeded")
    count_start(actor.team)
    try:
        run = run_start(team=actor.team, agent=model, input=task, user=actor.user,
                        door_turns=[list(turn) for turn in turns], trace=trace)
    except InputBlocked as blocked:
        raise DoorError(400, str(blocked), param="messages", code="content_filter") from None
    except RunError as error:
        raise DoorError(400, str(error), param="model", code="run_refused") from None
    return str(run.id)


def start_workflow(actor, slug: str, inputs_of: Callable[[tuple[str, ...]], dict[str, Any]],
                   trace: RunTrace | None = None) -> str:
    """Start a run of the team's exposed workflow ``slug`` with the inputs ``inputs_of(its declared inputs)``
    gives, its trace starting at the door ``trace`` names (:func:`trace_of`): its id."""
    from agents_app.execution.errors import RunError
    from agents_app.execution.hooks import RUN_HOOKS

    found = [inputs for exposed, _, inputs in RUN_HOOKS.workflows_exposed(team=actor.team) if exposed == slug]
    if not found:
        raise unknown_model(WORKFLOW_PREFIX + slug)
    inputs = inputs_of(found[0])
    count_start(actor.team)
    try:
        run = RUN_HOOKS.workflow_start(team=actor.team, workflow=slug, inputs=inputs, user=actor.user, trace=trace)
    except RunError as error:
        raise DoorError(400, str(error), param="messages", code="run_refused") from None
    return str(run.id)


def unknown_model(model: str) -> DoorError:
    return DoorError(404, f"the model {model!r} does not exist or the token may not call it: GET /v1/models lists "
                          "what it may", param="model", code="model_not_found")


def count_start(team) -> None:
    """A run start of ``team`` counted against ``MAS_RUNS_PER_MIN`` (a 429 past it)."""
    from mas_core import ratelimit

    try:
        ratelimit.run_start_check(team)
    except ratelimit.RateLimited as limited:
        raise DoorError(429, str(limited), type="rate_limit_error", code="rate_limit_exceeded",
                        headers=[(b"retry-after", str(limited.retry_after).encode())]) from None


def continued(team, previous: str) -> list[Turn]:
    """The conversation a response continues: the turns of the run ``previous`` names, and its answer."""
    from agents_app.models import Run

    run_id = previous.removeprefix(RESPONSE_PREFIX)
    row = (Run.objects.filter(pk=run_id, team=team).exclude(door_turns=[]).values_list("door_turns", "result", "status")
           .first() if is_uuid(run_id) else None)
    if row is None:
        raise DoorError(404, f"no response {previous!r} of this team", param="previous_response_id",
                        code="previous_response_not_found")
    turns, result, status = row
    if status != "succeeded":
        raise DoorError(400, f"response {previous!r} has no answer to continue from (its run {status})",
                        param="previous_response_id", code="previous_response_unanswered")
    return [(role, text) for role, text in turns] + [("assistant", result)]


def is_uuid(text: str) -> bool:
    import uuid

    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def run_ended(run_id: str) -> dict[str, Any]:
    from agents_app.models import Run

    return Run.objects.filter(pk=run_id).values("status", "result", "error", "prompt_tokens",
                                                "completion_tokens", "created_at").get()


def run_cancel_by_door(run_id: str) -> None:
    """Cancel the run (its caller went away)."""
    from django.db import transaction

    from agents_app.execution.runs import run_cancel
    from agents_app.models import Run

    with transaction.atomic():
        run_cancel(run=Run.objects.get(pk=run_id))


async def in_thread(function, *args):
    """``function(*args)`` in a thread, past the web process's gate (as Django's requests pass it)."""
    from mas_core import webgate

    async with webgate.place():
        return await sync_to_async(_closing(function), thread_sensitive=False)(*args)


def _closing(function):
    def call(*args):
        from django.db import connection

        try:
            return function(*args)
        finally:
            connection.close()
    return call


def bearer(scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None


def trace_of(door: str, scope=None, traceparent: str | None = None) -> RunTrace:
    """Where the trace of a run started at ``door`` begins: in the caller's trace when the request carries a
    W3C ``traceparent`` (given, as an MCP call's ``_meta`` has it, or the HTTP request's header in ``scope``)."""
    if traceparent is None:
        traceparent = next((value.decode("latin-1") for name, value in (scope or {}).get("headers", [])
                            if name == b"traceparent"), None)
    return RunTrace.at_door(door, traceparent)


async def until_done(receive, run_id: str, work, *, cancel: bool = True) -> Any:
    """``work``'s outcome; the caller going away ends it (:class:`Gone`), and cancels the run unless ``cancel``
    is false (a caller that only watched it); past MAS_DOORS_WAIT_S, a 422 (the run goes on)."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(disconnected(receive))
    try:
        done, _ = await asyncio.wait({task, gone}, timeout=settings.MAS_DOORS_WAIT_S,
                                     return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        if gone in done:
            if cancel:
                await in_thread(run_cancel_by_door, run_id)
            raise Gone
        raise DoorError(422, f"run {run_id} has not finished after {settings.MAS_DOORS_WAIT_S:g} s; it goes on "
                             f"(GET /api/runs/{run_id})", type="run_error", code="timeout")
    finally:
        for pending in (task, gone):
            pending.cancel()


async def disconnected(receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def read_body(receive) -> bytes:
    """The request's body, at most ``DATA_UPLOAD_MAX_MEMORY_SIZE`` bytes (a 413 past it)."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Gone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise DoorError(413, f"the request body is over {limit} bytes", code="request_too_large")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def parsed(model: type[BaseModel], body: bytes):
    """``body`` read as ``model`` (a 400 naming the first field that is wrong, in ``param``)."""
    from mas_core.api_errors import load_json

    try:
        return model.model_validate(load_json(body))
    except ValidationError as invalid:
        first = invalid.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise DoorError(400, f"{where}: {first['msg']}", param=where) from None
    except ValueError as error:  # not JSON, too deep, unstorable
        raise DoorError(400, f"the body is not a JSON object this endpoint takes: {error}") from None


def inputs_object(text: str) -> dict[str, Any] | None:
    """A workflow's several inputs as a caller sends them to a door, a JSON object in ``text`` (None when it
    holds none)."""
    import json

    try:
        values = json.loads(text)
    except ValueError:
        return None
    return values if isinstance(values, dict) else None


async def send_json(send, status: int, body: dict[str, Any], *, headers=()) -> None:
    """Answer ``body`` as JSON with ``status`` (and ``headers``)."""
    import json

    data = json.dumps(body, default=str).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *headers]})
    await send({"type": "http.response.body", "body": data})


def challenge(refused: DoorError) -> list[tuple[bytes, bytes]]:
    """A refusal's headers, with ``WWW-Authenticate: Bearer`` when it is a 401."""
    return [*([(b"www-authenticate", b"Bearer")] if refused.status == 401 else []), *refused.headers]
