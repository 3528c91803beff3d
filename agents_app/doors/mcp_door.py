"""MAS as an MCP server (issue 25): the team's exposed agents and workflows are the tools of ``/mcp/``.

Streamable HTTP, on the ``mcp`` SDK's low-level server (stateless: each request stands alone), authenticated
by a token of the team (``Authorization: Bearer``): listing needs the role's ``view``, a call its ``run``. An
agent is a tool named by its slug, taking ``task`` (and an optional ``context``); a workflow is
``workflow__<slug>``, taking the inputs it declares. A call starts a run the way ``POST /api/runs`` does
(:mod:`agents_app.doors.common`), reports its events as progress notifications when the client asked for them
(a progress token), and answers with the run's result — with ``structuredContent`` too when the agent's
``output_schema`` is an object's. A client that cancels the call cancels the run; a run waiting for a person
keeps the call waiting (up to ``MAS_DOORS_WAIT_S``), decided in MAS as any other.
"""

from __future__ import annotations

import asyncio
import functools
import json
from contextlib import aclosing
from typing import Any

import mcp_types as types
from django.conf import settings

from agents_app.doors.common import (
    WORKFLOW_PREFIX,
    DoorError,
    actor_of,
    bearer,
    challenge,
    in_thread,
    run_cancel_by_door,
    run_ended,
    send_json,
    start_agent,
    start_workflow,
    trace_of,
)
from agents_app.doors.follow import RunFollower
from mas_core.loops import loop_local
from mas_core.telemetry import RunTrace
from mas_core.ws_security import client_address

WORKFLOW_TOOL = "workflow__"
MAX_PROGRESS_CHARS = 200
AGENT_INPUT = {
    "type": "object", "additionalProperties": False, "required": ["task"],
    "properties": {
        "task": {"type": "string", "minLength": 1, "description": "What the agent is asked to do."},
        "context": {"type": "string", "description": "Background the agent should know (optional)."}}}


# -- what the tools are ------------------------------------------------------------------------------


def tools_of(team) -> list[types.Tool]:
    """The team's exposed agents and workflows as tools."""
    from agents_app.execution.hooks import RUN_HOOKS
    from agents_app.models import Agent

    tools = []
    for slug, name, description, spec in Agent.objects.filter(team=team, spec__expose=True).order_by("slug") \
            .values_list("slug", "name", "description", "spec"):
        schema = (spec or {}).get("output_schema")
        tools.append(types.Tool(name=slug, title=name or slug, description=description or f"The agent {name or slug}.",
                                input_schema=AGENT_INPUT,
                                output_schema=schema if _object_schema(schema) else None))
    for slug, _, inputs in RUN_HOOKS.workflows_exposed(team=team):
        tools.append(types.Tool(name=WORKFLOW_TOOL + slug, title=slug, description=f"The workflow {slug}.",
                                input_schema={"type": "object", "additionalProperties": False,
                                              "required": list(inputs),
                                              "properties": {name: {"type": "string"} for name in inputs}}))
    return tools


def _object_schema(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "object"


def _start(actor, name: str, arguments: dict[str, Any], trace: RunTrace) -> tuple[str, dict | None]:
    """Start the run the call names: (its id, the agent's output schema when it is an object's)."""
    from agents_app.models import Agent

    if name.startswith(WORKFLOW_TOOL):
        if not all(isinstance(value, str) for value in arguments.values()):
            raise DoorError(400, "a workflow's inputs are texts")
        return start_workflow(actor, name.removeprefix(WORKFLOW_TOOL), lambda declared: arguments, trace), None
    task, context = arguments.get("task"), arguments.get("context", "")
    if not isinstance(task, str) or not task.strip() or not isinstance(context, str) or set(arguments) - {
            "task", "context"}:
        raise DoorError(400, "the arguments are {task: text, context?: text}")
    run_id = start_agent(actor, name, [("user", task)], context, trace=trace)
    schema = Agent.objects.filter(team=actor.team, slug=name).values_list("spec__output_schema", flat=True).first()
    return run_id, schema if _object_schema(schema) else None


# -- the server's handlers ------------------------------------------------------------------------------


def _actor(ctx, stdio):
    """Who calls: the actor of the HTTP request's token (``app``), or the stdio server's (``mcp_serve``)."""
    return ctx.request.scope["mas_actor"] if ctx.request is not None else stdio


async def _list_tools(ctx, params, *, stdio=None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=await in_thread(tools_of, _actor(ctx, stdio).team))


async def _call_tool(ctx, params: types.CallToolRequestParams, *, stdio=None) -> types.CallToolResult:
    actor = _actor(ctx, stdio)
    if not actor.can("run"):
        return _error(f"role {actor.role} in team {actor.team.slug} does not allow run")
    try:
        run_id, schema = await in_thread(_start, actor, params.name, dict(params.arguments or {}), trace_of(
            "mcp", ctx.request.scope if ctx.request is not None else None, (params.meta or {}).get("traceparent")))
    except DoorError as refused:
        return _error(str(refused).replace(WORKFLOW_PREFIX, WORKFLOW_TOOL) if refused.code == "model_not_found"
                      else str(refused))
    token = (ctx.meta or {}).get("progress_token")
    try:
        run = await asyncio.wait_for(_followed(ctx, run_id, token), timeout=settings.MAS_DOORS_WAIT_S)
    except asyncio.TimeoutError:
        return _error(f"run {run_id} has not finished after {settings.MAS_DOORS_WAIT_S:g} s; it goes on "
                      f"(GET /api/runs/{run_id})")
    except asyncio.CancelledError:  # the client cancelled the call: its run is cancelled too
        await asyncio.shield(in_thread(run_cancel_by_door, run_id))
        raise
    if run["status"] != "succeeded":
        return _error(f"run {run_id} {run['status']}: {run['error'] or 'no result'}")
    structured = None
    if schema is not None:
        try:
            structured = json.loads(run["result"])
        except ValueError:
            structured = None
    return types.CallToolResult(content=[types.TextContent(type="text", text=run["result"])],
                                structured_content=structured if isinstance(structured, dict) else None,
                                meta={"mas/run": run_id})


async def _followed(ctx, run_id: str, token) -> dict[str, Any]:
    """The run once ended; each event worth telling a progress notification when the client gave a token."""
    told = 0
    async with aclosing(RunFollower(run_id).events()) as events:
        async for event in events:
            said = progress_line(event) if token is not None else None
            if said:
                told += 1
                await ctx.session.send_progress_notification(progress_token=token, progress=told,
                                                             message=said[:MAX_PROGRESS_CHARS],
                                                             related_request_id=ctx.request_id)
    return await in_thread(run_ended, run_id)


def progress_line(event: dict[str, Any]) -> str | None:
    """What a progress notification says of a run's event (None: not told)."""
    kind, agent, data = event["type"], event.get("agent") or "", event.get("data") or {}
    if kind == "session_start":
        return f"{agent} started"
    if kind == "tool_call":
        return f"{agent} calls {data.get('name')}"
    if kind == "approval_requested":
        return f"waiting for a person: {data.get('reason', '')}"
    if kind == "human_question":
        return f"{agent} asks a person: {data.get('question', '')}"
    if kind == "session_end":
        return f"{agent} {data.get('status', 'ended')}"
    if kind == "run_complete":
        return f"run {data.get('status')}"
    return None


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


def server(stdio=None):
    """The MCP server: over HTTP each request's token says who calls; over stdio, ``stdio`` (an actor)."""
    from mcp.server.lowlevel.server import Server

    return Server("MAS", instructions="The team's agents and workflows, each a tool: a call is a run of it.",
                  on_list_tools=functools.partial(_list_tools, stdio=stdio),
                  on_call_tool=functools.partial(_call_tool, stdio=stdio))


async def serve_stdio(actor, read, write) -> None:
    """The server over a stdio connection (``manage.py mcp_serve``), acting as ``actor``."""
    running = server(stdio=actor)
    await running.run(read, write, running.create_initialization_options())


# -- streamable HTTP ------------------------------------------------------------------------------------


class _Manager:
    """One event loop's session manager, running (its task group) for as long as the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        self.manager = StreamableHTTPSessionManager(app=server(), stateless=True,
                                                    max_request_body_size=settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        self.loop, self.ready = loop, asyncio.Event()
        self.task = loop.create_task(self._run())

    async def _run(self) -> None:
        async with self.manager.run():
            self.ready.set()
            await asyncio.Event().wait()


_managers: dict[int, _Manager] = {}


async def app(scope, receive, send) -> None:
    """``/mcp`` (and ``/mcp/``): the token checked first (401 or 403 as JSON), then the SDK's transport."""
    try:
        actor = await in_thread(actor_of, bearer(scope), "view", client_address(scope))
    except DoorError as refused:
        await send_json(send, refused.status, {"error": str(refused), "code": refused.code}, headers=challenge(refused))
        return
    running = loop_local(_managers, _Manager)
    await running.ready.wait()
    await running.manager.handle_request({**scope, "mas_actor": actor}, receive, send)
