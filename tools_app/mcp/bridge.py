"""An agent's MCP servers in its session: connected at the start, bridged as tools, closed at the end.

``agent.mcp_servers`` lists server names (the team's ``MCPServer`` rows), or
``{"name": <server>, "tools": [...]}`` to narrow a server's tools for this
agent. A row's own ``tools`` list narrows them too, and only tools whose
description and schema are as an admin approved them are offered (a changed
tool waits for approval again). Every connect, disconnect and call is an
event; a server that cannot be reached is an event and a missing tool, never
a failed session.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import jsonschema
from pydantic import create_model, model_validator

from mas_core.outputs import validator as schema_validator
from tools_app.mcp.client import Connection, DiscoveredTool, Emit, MCPError, ServerConfig, bridged_name
from tools_app.mcp.client import breaker_check, breaker_record
from tools_app.plugin import Params, Tool, ToolContext, ToolError


def agent_servers(entries: list[Any]) -> list[tuple[str, set[str] | None]]:
    """(server slug, the agent's own allow-list or None) for each entry of ``mcp_servers``."""
    found = []
    for entry in entries:
        if isinstance(entry, str):
            found.append((entry, None))
        elif isinstance(entry, dict) and isinstance(entry.get("name"), str):
            tools = entry.get("tools")
            found.append((entry["name"], set(tools) if isinstance(tools, list) else None))
    return found


def rows_for(team_id: int, entries: list[Any], specs: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The agent's enabled servers as plain data (read in a database thread).

    ``specs``: each server's config at the version the run pinned (by slug); a server it lacks is missing.
    """
    from tools_app.models import MCPServer

    wanted = agent_servers(entries)
    rows = {row.slug: row for row in MCPServer.objects.filter(team_id=team_id, slug__in=[slug for slug, _ in wanted])
            .select_related("team")}
    found = []
    for slug, allowed in wanted:
        row = rows.get(slug)
        spec = None if specs is None else specs.get(slug)
        if specs is not None and spec is None:
            row = None
        enabled = row is not None and (row.enabled if spec is None else spec.get("enabled", True))
        found.append({"slug": slug, "config": ServerConfig.of(row, spec) if enabled else None,
                      "missing": row is None, "approved": dict(row.approved_tools or {}) if row else {},
                      "agent_allow": allowed, "known": [tool.get("hash") for tool in (row.discovered_tools or [])]
                      if row else []})
    return found


def discovered_save(slug: str, team_id: int, tools: list[DiscoveredTool]) -> None:
    """Keep what the server offers on its row (only when it changed)."""
    from django.utils import timezone

    from tools_app.models import MCPServer

    row = MCPServer.objects.filter(team_id=team_id, slug=slug).first()
    data = [tool.to_dict() for tool in tools]
    if row is not None and row.discovered_tools != data:
        MCPServer.objects.filter(pk=row.pk).update(discovered_tools=data, discovered_at=timezone.now())


def bridged_tool(connection: Connection, tool: DiscoveredTool, emit: Emit) -> Tool:
    """A registry tool that calls ``tool`` on ``connection``; arguments checked against its JSON schema."""
    schema = dict(tool.input_schema or {"type": "object"})
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    fields = {name: (Any, ... if name in required else None) for name in properties}
    # Compiled once, not per call; its `pattern` keyword matches with RE2 (a server's pattern meets the model's text).
    validator = schema_validator(schema)

    def check(cls, values):
        if isinstance(values, dict):
            error = jsonschema.exceptions.best_match(validator.iter_errors(values))
            if error is not None:
                where = ".".join(str(part) for part in error.absolute_path) or "arguments"
                raise ValueError(f"{where}: {error.message}")
        return values

    parameters = create_model(f"MCP_{tool.name}", __base__=Params,
                              __validators__={"schema_check": model_validator(mode="before")(check)}, **fields)
    server = connection.config.slug

    class MCPTool(Tool):
        name = bridged_name(server, tool.name)
        description = (tool.description or f"{tool.name} of the MCP server {server}")[:1024]
        Parameters = parameters
        input_schema = {**schema, "type": "object", "properties": properties}
        mcp_server = server
        read_only = tool.read_only  # approval policies may exempt what the server marks read-only

        async def run(self, args: Params, ctx: ToolContext) -> str:
            arguments = args.model_dump(exclude_unset=True)
            started = time.perf_counter()
            try:
                breaker_check(connection.config)
                text = await connection.call(tool.name, arguments)
            except MCPError as error:
                breaker_record(connection.config, ok=False)
                await emit("mcp_tool_call", {"server": server, "tool": tool.name, "ok": False, "error": str(error),
                                             "duration_ms": round((time.perf_counter() - started) * 1000, 1)})
                raise ToolError(str(error)) from None
            breaker_record(connection.config, ok=True)
            await emit("mcp_tool_call", {"server": server, "tool": tool.name, "ok": True, "error": None,
                                         "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                                         "chars": len(text)})
            return text

    MCPTool.__name__ = f"MCPTool_{MCPTool.name}"
    return MCPTool()


class SessionServers:
    """The MCP connections of one session."""

    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        self.connections: list[Connection] = []

    async def open(self, servers: list[dict[str, Any]], *, team_id: int, db) -> list[Tool]:
        """Connect every server at once; the tools to offer. Failures become events, not exceptions."""
        results = await asyncio.gather(*(self._open_one(server, team_id=team_id, db=db) for server in servers))
        return [tool for tools in results for tool in tools]

    async def _open_one(self, server: dict[str, Any], *, team_id: int, db) -> list[Tool]:
        slug, config = server["slug"], server["config"]
        if config is None:
            reason = "no such MCP server in this team" if server["missing"] else "the server is disabled"
            await self.emit("mcp_connect", {"server": slug, "ok": False, "error": reason, "tools": []})
            return []
        started = time.perf_counter()
        try:
            breaker_check(config)
            connection, reused = await pool_acquire(config)
        except MCPError as error:
            breaker_record(config, ok=False)
            await self.emit("mcp_connect", {"server": slug, "transport": config.spec.transport, "ok": False,
                                            "error": str(error), "tools": [],
                                            "duration_ms": round((time.perf_counter() - started) * 1000, 1)})
            return []
        breaker_record(config, ok=True)
        self.connections.append(connection)
        if [tool.hash for tool in connection.tools] != server["known"]:
            await db(discovered_save)(slug, team_id, connection.tools)
        offered, names, held = [], [], []
        row_allow = set(config.spec.tools) if config.spec.tools is not None else None
        for tool in connection.tools:
            if (row_allow is not None and tool.name not in row_allow) or (
                    server["agent_allow"] is not None and tool.name not in server["agent_allow"]):
                continue
            if server["approved"].get(tool.name) != tool.hash:
                held.append(tool.name)  # new or changed since an admin approved it
                continue
            offered.append(bridged_tool(connection, tool, self.emit))
            names.append(tool.name)
        await self.emit("mcp_connect", {
            "server": slug, "transport": config.spec.transport, "ok": True, "error": None,
            "tools": names, "bridged_as": [tool.name for tool in offered], "awaiting_approval": held,
            "reused": reused,
            "duration_ms": round((time.perf_counter() - started) * 1000, 1)})
        return offered

    async def close(self) -> None:
        for connection in self.connections:
            started = time.perf_counter()
            kept = await pool_release(connection)
            await self.emit("mcp_disconnect", {"server": connection.config.slug, "kept_open": kept,
                                               "duration_ms": round((time.perf_counter() - started) * 1000, 1)})
        self.connections.clear()


# -- connections kept open between sessions (HTTP transports only) ---------------------------------------------

# A stdio server is a process of the session's own (its state is the session's); an HTTP server's connection
# is kept for the next session of the same worker that uses the same config, while it stays healthy.
_pool: dict[tuple, dict] = {}
REUSABLE = {"streamable-http", "sse"}


def _pool_key(config) -> tuple:
    import hashlib
    import json

    spec = json.dumps([config.spec.model_dump(mode="json"), config.secret_headers], sort_keys=True)
    return (id(asyncio.get_running_loop()), config.team_id, config.slug, hashlib.sha256(spec.encode()).hexdigest())


async def pool_acquire(config) -> tuple[Connection, bool]:
    """An open connection for ``config``: the worker's idle one when there is a healthy one, else a new one."""
    from django.conf import settings

    idle_s = float(settings.MAS_MCP_IDLE_S)
    now = time.monotonic()
    for key, entry in list(_pool.items()):  # close what has been idle too long
        if entry["users"] == 0 and now - entry["last_used"] > idle_s:
            _pool.pop(key, None)
            await entry["connection"].close()
    key = _pool_key(config)
    entry = _pool.get(key)
    if entry is not None and entry["connection"].alive:
        entry["users"] += 1
        return entry["connection"], True
    connection = Connection(config)
    await connection.open()
    if config.spec.transport in REUSABLE and idle_s > 0:
        if entry is not None:
            await entry["connection"].close()
        _pool[key] = {"connection": connection, "users": 1, "last_used": now}
    return connection, False


async def pool_release(connection: Connection) -> bool:
    """Give the connection back (kept open when pooled and healthy); returns whether it stays open."""
    for key, entry in list(_pool.items()):
        if entry["connection"] is connection:
            entry["users"] -= 1
            entry["last_used"] = time.monotonic()
            if connection.alive:
                return True
            _pool.pop(key, None)
            break
    await connection.close()
    return False
