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
workspace files are the task's artifacts.
"""

from __future__ import annotations

import asyncio
import datetime
import mimetypes
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Artifact,
    HTTPAuthSecurityScheme,
    ListTasksResponse,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
)
from django.conf import settings

from agents_app.doors.common import (
    WORKFLOW_PREFIX,
    DoorError,
    actor_of,
    address_of,
    bearer,
    challenge,
    in_thread,
    inputs_object,
    is_uuid,
    send_json,
    start_agent,
    start_workflow,
    trace_of,
)
from agents_app.doors.follow import RunFollower

PREFIX = "/a2a/"
CARD = "/.well-known/agent-card.json"
ANSWER = "answer"  # the artifact holding the run's result
STATES = {"queued": TaskState.TASK_STATE_SUBMITTED, "running": TaskState.TASK_STATE_WORKING,
          "waiting": TaskState.TASK_STATE_INPUT_REQUIRED, "succeeded": TaskState.TASK_STATE_COMPLETED,
          "failed": TaskState.TASK_STATE_FAILED, "cancelled": TaskState.TASK_STATE_CANCELED}
RUN_STATUSES = {state: status for status, state in STATES.items()}
GOING = frozenset({TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING})
ENDED = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED})
# Events after which the run may have ended or stopped for a person: the task is read again.
TURNS = frozenset({"human_question", "approval_requested", "run_complete"})
PAGE_SIZE, MAX_PAGE_SIZE = 50, 100


# -- the agent card ---------------------------------------------------------------------------------------


def exposed(team, slug: str) -> tuple[str, str, int] | None:
    """The team's exposed agent ``slug``, or workflow (``workflow:<slug>``): (name, description, version), or
    None."""
    from agents_app.execution.hooks import RUN_HOOKS
    from agents_app.models import Agent

    if slug.startswith(WORKFLOW_PREFIX):
        name = slug.removeprefix(WORKFLOW_PREFIX)
        found = [inputs for exposed, _, inputs in RUN_HOOKS.workflows_exposed(team=team) if exposed == name]
        if not found:
            return None
        inputs = found[0]
        said = (f"Its input {inputs[0]}: the message's text." if len(inputs) == 1 else
                f"Its inputs {', '.join(inputs)}: the message's text is a JSON object of them." if inputs else "")
        return name, f"The workflow {name}. {said}".strip(), 1
    return Agent.objects.filter(team=team, slug=slug, spec__expose=True).values_list(
        "name", "description", "version").first()


def card_of(slug: str, name: str, description: str, version: int, url: str) -> AgentCard:
    """The agent card of an exposed agent served at ``url``: one skill (what the agent does), the bearer scheme."""
    said = description or f"The agent {name or slug}."
    return AgentCard(
        name=name or slug, description=said, version=str(version),
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=version_)
                              for version_ in (PROTOCOL_VERSION_1_0, PROTOCOL_VERSION_0_3)],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        security_schemes={"bearer": SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
            scheme="bearer", description="A token of the team (MAS → Team → API tokens)"))},
        security_requirements=[SecurityRequirement(schemes={"bearer": StringList()})],
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id=slug, name=name or slug, description=said, tags=["mas", "agent"],
                           input_modes=["text/plain"], output_modes=["text/plain"])])


# -- tasks are runs ---------------------------------------------------------------------------------------


def _runs(team, slug: str):
    from agents_app.models import Run

    if slug.startswith(WORKFLOW_PREFIX):
        return Run.objects.filter(team=team, workflow=slug.removeprefix(WORKFLOW_PREFIX), is_eval=False)
    return Run.objects.filter(team=team, agent=slug, workflow="", is_eval=False)


def _run(team, slug: str, task_id: str):
    """The team's run of agent ``slug`` a task id names (TaskNotFoundError otherwise)."""
    run = _runs(team, slug).filter(pk=task_id).first() if is_uuid(task_id) else None
    if run is None:
        raise TaskNotFoundError(message=f"no task {task_id!r} of the agent {slug!r} in this team")
    return run


def task_of(run, *, history_length: int | None = None, artifacts: bool = True) -> Task:
    """The run as an A2A task: its state, the question it waits on or why it ended, its answer and files."""
    run_id = str(run.id)
    history = [Message(message_id=f"{run_id}:input", role=Role.ROLE_USER, task_id=run_id, context_id=run_id,
                       parts=[Part(text=run.input)])]
    if history_length is not None:
        history = history[len(history) - history_length:] if history_length else []
    status = TaskStatus(state=STATES[run.status])
    said = _status_text(run)
    if said:
        status.message.CopyFrom(Message(message_id=f"{run_id}:{run.status}", role=Role.ROLE_AGENT, task_id=run_id,
                                        context_id=run_id, parts=[Part(text=said)]))
    status.timestamp.FromDatetime(run.finished_at or run.created_at)
    task = Task(id=run_id, context_id=run_id, status=status, history=history)
    if artifacts:
        task.artifacts.extend(artifacts_of(run))
    return task


def _status_text(run) -> str:
    from agents_app.models import ApprovalRequest

    if run.status == "waiting":
        request = ApprovalRequest.objects.filter(run=run, status="pending").order_by("created_at").first()
        if request is None:
            return ""
        if request.kind == "question":
            choices = f" (choices: {', '.join(map(str, request.choices))})" if request.choices else ""
            return request.question + choices
        return (f"waiting for a person to approve {request.tool or 'a step'} in MAS"
                + (f": {request.reason}" if request.reason else ""))
    return run.error if run.status in ("failed", "cancelled") else ""


def artifacts_of(run) -> list[Artifact]:
    """The run's answer (once it succeeded) and its workspace files, each a text artifact."""
    from agents_app.models import WorkspaceFile

    found = []
    if run.status == "succeeded":
        found.append(Artifact(artifact_id=ANSWER, name=ANSWER, parts=[Part(text=run.result)]))
    for path, content in WorkspaceFile.objects.filter(run=run).order_by("path").values_list("path", "content"):
        found.append(Artifact(artifact_id=f"file:{path}", name=path, parts=[Part(
            text=content, filename=path, media_type=mimetypes.guess_type(path)[0] or "text/plain")]))
    return found


def task_read(team, slug: str, task_id: str, history_length: int | None = None) -> Task:
    return task_of(_run(team, slug, task_id), history_length=history_length)


def task_seen(team, slug: str, task_id: str) -> tuple[Task, int]:
    """The task, and the seq of its run's last event before it was read (to follow what comes next)."""
    from mas_core.models import Event

    run = _run(team, slug, task_id)
    last = Event.objects.filter(run=run).order_by("-seq").values_list("seq", flat=True).first()
    return task_of(run), -1 if last is None else last


def tasks_list(team, slug: str, *, state: int, context_id: str, page_size: int, page_token: str,
               history_length: int | None, artifacts: bool, after=None) -> ListTasksResponse:
    """The team's runs of the agent, newest first, a page at a time (the token: how many came before)."""
    runs = _runs(team, slug)
    if state:
        runs = runs.filter(status=RUN_STATUSES.get(state, "-"))
    if context_id:
        runs = runs.filter(pk=context_id) if is_uuid(context_id) else runs.none()
    if after is not None:
        runs = runs.filter(created_at__gte=after)
    start = int(page_token) if page_token.isdigit() else 0
    size = min(page_size or PAGE_SIZE, MAX_PAGE_SIZE)
    page = list(runs.order_by("-created_at", "-pk")[start:start + size])
    total = runs.count()
    return ListTasksResponse(
        tasks=[task_of(run, history_length=history_length, artifacts=artifacts) for run in page],
        next_page_token=str(start + size) if start + size < total else "", page_size=size, total_size=total)


def answer_question(actor, slug: str, task_id: str, text: str) -> int:
    """Answer the question the task's run waits on with ``text``: the seq of the run's last event before."""
    from agents_app.approvals.services import ApprovalError, approval_decide
    from agents_app.models import ApprovalRequest
    from mas_core.models import Event

    run = _run(actor.team, slug, task_id)
    request = ApprovalRequest.objects.filter(run=run, status="pending").order_by("created_at").first()
    if run.status != "waiting" or request is None:
        raise InvalidParamsError(message=f"task {task_id} is {_state_name(run.status)}, not "
                                         "input-required: a message without taskId starts a new task")
    if request.kind != "question":
        raise InvalidParamsError(message=f"task {task_id} waits for a person to approve {request.tool or 'a step'}: "
                                         "that is decided in MAS, not by a message")
    last = Event.objects.filter(run=run).order_by("-seq").values_list("seq", flat=True).first()
    try:
        approval_decide(team=actor.team, request_id=request.id, user=actor.user, decision="answer", answer=text)
    except ApprovalError as refused:  # decided meanwhile, the run ended, an answer that is not one of the choices
        raise InvalidParamsError(message=str(refused)) from None
    return -1 if last is None else last


def _state_name(status: str) -> str:
    return TaskState.Name(STATES[status]).removeprefix("TASK_STATE_").lower().replace("_", "-")


def task_cancel(actor, slug: str, task_id: str) -> Task:
    from django.db import transaction

    from agents_app.execution.runs import run_cancel

    from agents_app.models import Run

    run = _run(actor.team, slug, task_id)
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)  # its status as run_cancel will find it
        if STATES[run.status] in ENDED:
            raise TaskNotCancelableError(message=f"task {task_id} is {_state_name(run.status)} already")
        run_cancel(run=run, user=actor.user)
    return task_of(_run(actor.team, slug, task_id))


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
        actor = await in_thread(actor_of, bearer(scope), "view", address_of(scope))
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
