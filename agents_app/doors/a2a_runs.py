"""Runs as A2A tasks (issue 25): the team's exposed agents and workflows as A2A agents (their cards), and what
the A2A door reads and does to their runs — a task is a run, read from the database, its state the run's.

Everything here runs in a database thread (:func:`agents_app.doors.common.in_thread`); the protocol is
:mod:`agents_app.doors.a2a_door`'s.
"""

from __future__ import annotations

import mimetypes

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
    TaskState,
    TaskStatus,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0
from a2a.utils.errors import InvalidParamsError, TaskNotCancelableError, TaskNotFoundError

from agents_app.doors.common import WORKFLOW_PREFIX, is_uuid

ANSWER = "answer"  # the artifact holding the run's result
STATES = {"queued": TaskState.TASK_STATE_SUBMITTED, "running": TaskState.TASK_STATE_WORKING,
          "waiting": TaskState.TASK_STATE_INPUT_REQUIRED, "succeeded": TaskState.TASK_STATE_COMPLETED,
          "failed": TaskState.TASK_STATE_FAILED, "cancelled": TaskState.TASK_STATE_CANCELED}
RUN_STATUSES = {state: status for status, state in STATES.items()}
GOING = frozenset({TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING})
ENDED = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED})
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
