"""MAS as an A2A server (issue 25): each exposed agent and workflow of the team is an A2A agent, protocol 1.0
and 0.3.

``GET /a2a/<agent>/.well-known/agent-card.json`` is its agent card; ``POST /a2a/<agent>`` its JSON-RPC endpoint
(a workflow's: ``/a2a/workflow:<slug>``), served by the ``a2a-sdk``'s dispatcher: the 1.0 names
(``SendMessage``, ``SendStreamingMessage``, ``GetTask``, ``ListTasks``, ``CancelTask``, ``SubscribeToTask``)
and, on the same URL, the 0.3 names (``message/send``, …). Both need a token of the team (``Authorization:
Bearer``), checked before the SDK sees the request: reading needs the role's ``view``, sending and cancelling
its ``run``.

A task is a run of it, read from the database (any web process answers): its id and its ``contextId`` are the
run's id. A message starts a run the way ``POST /api/runs`` does (:mod:`agents_app.doors.common`), its text the
task (a workflow's one input, or its inputs as a JSON object); a message naming a task whose run waits on a
question (``ask_human``) answers it. A run waiting on a person is ``input-required``; its answer and its
workspace files are the task's artifacts (:mod:`agents_app.doors.a2a_runs` reads and changes the runs).
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.types import (
    Artifact,
    ListTasksResponse,
    Message,
    Part,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
)
from django.conf import settings

from agents_app.doors.a2a_runs import (
    ANSWER,
    GOING,
    answer_question,
    card_of,
    exposed,
    task_cancel,
    task_read,
    task_seen,
    tasks_list,
)
from agents_app.doors.common import (
    WORKFLOW_PREFIX,
    DoorError,
    actor_of,
    bearer,
    challenge,
    in_thread,
    inputs_object,
    send_json,
    start_agent,
    start_workflow,
    trace_of,
)
from agents_app.doors.follow import RunFollower
from mas_core.ws_security import client_address

PREFIX = "/a2a/"
CARD = "/.well-known/agent-card.json"
# Events after which the run may have ended or stopped for a person: the task is read again.
TURNS = frozenset({"human_question", "approval_requested", "run_complete"})


# -- the request handler -----------------------------------------------------------------------------------


def _caller(context: ServerCallContext, capability: str):
    actor = context.state["mas_actor"]
    if not actor.can(capability):
        raise InvalidRequestError(message=f"role {actor.role} in team {actor.team.slug} does not allow {capability}")
    return actor, context.state["mas_agent"]


def _text(message: Message) -> str:
    return "\n".join(part.text for part in message.parts if part.WhichOneof("content") == "text" and part.text)


def _history_length(params) -> int | None:
    return params.history_length if params.HasField("history_length") else None


def workflow_inputs(declared: tuple[str, ...], text: str) -> dict[str, Any]:
    """A workflow's inputs from a message's text: its one input is the text; several, a JSON object of them."""
    if len(declared) <= 1:
        return {name: text for name in declared}
    values = inputs_object(text)
    if values is None:
        raise InvalidParamsError(message=f"the workflow takes the inputs {', '.join(declared)}: send them as a JSON "
                                         "object, the message's text")
    return values


class RunsHandler(RequestHandler):
    """A2A requests answered from the team's runs of the agent (or ``workflow:<slug>``) the endpoint serves
    (``state["mas_agent"]``)."""

    async def on_message_send(self, params, context: ServerCallContext) -> Task:
        actor, slug = _caller(context, "run")
        run_id, after = await self._begin(actor, slug, params, context)
        if params.configuration.return_immediately:
            return await in_thread(task_read, actor.team, slug, run_id)
        try:
            return await asyncio.wait_for(self._settled(actor.team, slug, run_id, after),
                                          timeout=settings.MAS_DOORS_WAIT_S)
        except asyncio.TimeoutError:  # the run goes on: the task is answered as it is (GetTask follows it)
            return await in_thread(task_read, actor.team, slug, run_id)

    async def on_message_send_stream(self, params, context: ServerCallContext) -> AsyncIterator[Any]:
        actor, slug = _caller(context, "run")
        run_id, after = await self._begin(actor, slug, params, context)
        yield await in_thread(task_read, actor.team, slug, run_id)
        async with aclosing(self._relay(actor.team, slug, run_id, after)) as updates:
            async for update in updates:
                yield update

    async def on_subscribe_to_task(self, params, context: ServerCallContext) -> AsyncIterator[Any]:
        actor, slug = _caller(context, "view")
        task, after = await in_thread(task_seen, actor.team, slug, params.id)
        yield task
        if task.status.state in GOING:
            async with aclosing(self._relay(actor.team, slug, params.id, after)) as updates:
                async for update in updates:
                    yield update

    async def on_get_task(self, params, context: ServerCallContext) -> Task:
        actor, slug = _caller(context, "view")
        return await in_thread(task_read, actor.team, slug, params.id, _history_length(params))

    async def on_list_tasks(self, params, context: ServerCallContext) -> ListTasksResponse:
        actor, slug = _caller(context, "view")
        after = params.status_timestamp_after.ToDatetime(tzinfo=datetime.timezone.utc) \
            if params.HasField("status_timestamp_after") else None
        return await in_thread(lambda: tasks_list(
            actor.team, slug, state=params.status, context_id=params.context_id, page_size=params.page_size,
            page_token=params.page_token, history_length=_history_length(params),
            artifacts=params.include_artifacts, after=after))

    async def on_cancel_task(self, params, context: ServerCallContext) -> Task:
        actor, slug = _caller(context, "run")
        return await in_thread(task_cancel, actor, slug, params.id)

    async def on_get_extended_agent_card(self, params, context):
        raise ExtendedAgentCardNotConfiguredError

    async def on_create_task_push_notification_config(self, params, context):
        raise PushNotificationNotSupportedError

    on_get_task_push_notification_config = on_create_task_push_notification_config
    on_list_task_push_notification_configs = on_create_task_push_notification_config
    on_delete_task_push_notification_config = on_create_task_push_notification_config

    # -- the steps ---------------------------------------------------------------------------------------

    async def _begin(self, actor, slug: str, params, context: ServerCallContext) -> tuple[str, int]:
        """Start the run the message asks for, or answer the question of the task it names: (run id, the seq
        after which its events are news)."""
        text = _text(params.message)
        if not text.strip():
            raise InvalidParamsError(message="the message has no text part: its text is the agent's task")
        if params.message.task_id:
            return params.message.task_id, await in_thread(answer_question, actor, slug, params.message.task_id,
                                                           text)
        trace = trace_of("a2a", traceparent=context.state.get("headers", {}).get("traceparent"))
        try:
            if slug.startswith(WORKFLOW_PREFIX):
                return await in_thread(start_workflow, actor, slug.removeprefix(WORKFLOW_PREFIX),
                                       lambda declared: workflow_inputs(declared, text), trace), -1
            return await in_thread(start_agent, actor, slug, [("user", text)], "", None, trace), -1
        except DoorError as refused:
            raise InvalidRequestError(message=str(refused)) from None

    async def _settled(self, team, slug: str, run_id: str, after: int) -> Task:
        """The task once its run has ended or waits for a person."""
        async with aclosing(RunFollower(run_id, after=after).events()) as events:
            async for event in events:
                if event["type"] in TURNS:
                    task = await in_thread(task_read, team, slug, run_id)
                    if task.status.state not in GOING:
                        return task
        return await in_thread(task_read, team, slug, run_id)

    async def _relay(self, team, slug: str, run_id: str, after: int) -> AsyncIterator[Any]:
        """The run's news as task updates: the root agent's text as it streams (the answer artifact, appended
        to) and ``working`` when a person lets it go on, then, once it ends or waits for a person, its artifacts
        and its status; bounded by MAS_DOORS_WAIT_S (the task goes on: SubscribeToTask follows it again)."""
        streamed = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.MAS_DOORS_WAIT_S
        async with aclosing(RunFollower(run_id, after=after).events()) as events:
            while True:
                try:
                    event = await asyncio.wait_for(anext(events), timeout=max(deadline - loop.time(), 0))
                except (StopAsyncIteration, asyncio.TimeoutError):
                    return
                kind, data = event["type"], event.get("data") or {}
                if kind == "stream_chunk" and event.get("agent") == slug and data.get("text"):
                    yield TaskArtifactUpdateEvent(task_id=run_id, context_id=run_id, append=streamed,
                                                  artifact=Artifact(artifact_id=ANSWER, name=ANSWER,
                                                                    parts=[Part(text=data["text"])]))
                    streamed = True
                elif kind == "run_status" and data.get("status") == "running":  # a person let it go on
                    yield TaskStatusUpdateEvent(task_id=run_id, context_id=run_id,
                                                status=TaskStatus(state=TaskState.TASK_STATE_WORKING))
                elif kind in TURNS:
                    task = await in_thread(task_read, team, slug, run_id)
                    if task.status.state in GOING:
                        continue
                    for artifact in task.artifacts:  # whole: the answer replaces what was streamed
                        yield TaskArtifactUpdateEvent(task_id=run_id, context_id=run_id, artifact=artifact,
                                                      append=False, last_chunk=True)
                    yield TaskStatusUpdateEvent(task_id=run_id, context_id=run_id, status=task.status)
                    return


# -- HTTP ---------------------------------------------------------------------------------------------------


class _CallerContext(DefaultServerCallContextBuilder):
    """The SDK's call context, carrying who calls and which agent the endpoint serves (checked before)."""

    def build(self, request):
        context = super().build(request)
        context.state.update(mas_actor=request.scope["mas_actor"], mas_agent=request.scope["mas_agent"])
        return context


_dispatchers: list[Any] = []


def _dispatcher():
    from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher

    if not _dispatchers:  # stateless: one for the process
        _dispatchers.append(JsonRpcDispatcher(request_handler=RunsHandler(), context_builder=_CallerContext(),
                                              enable_v0_3_compat=True))
    return _dispatchers[0]


def _url_of(scope, slug: str) -> str:
    host = next((value.decode("latin-1") for name, value in scope.get("headers", []) if name == b"host"), None)
    if host is None:
        server = scope.get("server") or ("localhost", 80)
        host = f"{server[0]}:{server[1]}"
    return f"{scope.get('scheme', 'http')}://{host}{PREFIX}{slug}"


async def app(scope, receive, send) -> None:
    """``/a2a/<agent>`` (POST, JSON-RPC) and ``/a2a/<agent>/.well-known/agent-card.json`` (GET): the token and
    the agent checked first (401, 403 or 404 as JSON), then the card or the SDK's dispatcher."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    path, method = scope["path"].removeprefix(PREFIX), scope["method"]
    card = path.endswith(CARD)
    slug = path.removesuffix(CARD) if card else path.rstrip("/")
    try:
        if (method, card) not in (("GET", True), ("POST", False)) or not slug or "/" in slug:
            raise DoorError(404, f"no route {method} {scope['path']}: this server answers GET {PREFIX}<agent>{CARD} "
                                 f"and POST {PREFIX}<agent>", code="not_found")
        actor = await in_thread(actor_of, bearer(scope), "view", client_address(scope))
        described = await in_thread(exposed, actor.team, slug)
        if described is None:
            raise DoorError(404, f"no agent {slug!r} this token may call: the team's exposed agents and workflows "
                                 f"(/a2a/{WORKFLOW_PREFIX}<slug>) are its A2A agents", code="not_found")
    except DoorError as refused:
        await send_json(send, refused.status, refused.body(), headers=challenge(refused))
        return
    if card:
        response = JSONResponse(agent_card_to_dict(card_of(slug, *described, _url_of(scope, slug))))
    else:
        response = await _dispatcher().handle_requests(Request({**scope, "mas_actor": actor, "mas_agent": slug},
                                                               receive))
    await response(scope, receive, send)
