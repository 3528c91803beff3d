"""Testing and approving an MCP server from the admin or the API (synchronous: views call these)."""

from __future__ import annotations

import asyncio
from typing import Any

from django.utils import timezone

from tools_app.mcp.client import MCPError, ServerConfig, discover
from tools_app.models import MCPServer


def mcp_server_test(*, row: MCPServer) -> dict[str, Any]:
    """Connect, list the tools, disconnect: what the server offers (kept on the row), timings and any error."""
    try:
        tools, timings = asyncio.run(discover(ServerConfig.of(row)))
    except MCPError as error:
        return {"ok": False, "error": str(error), "timings_ms": {}, "tools": _tools_out(row)}
    data = [tool.to_dict() for tool in tools]
    MCPServer.objects.filter(pk=row.pk).update(discovered_tools=data, discovered_at=timezone.now())
    row.discovered_tools = data
    return {"ok": True, "error": None, "timings_ms": timings, "tools": _tools_out(row)}


def mcp_server_approve(*, row: MCPServer) -> list[str]:
    """Approve every tool as last discovered (its description and schema); returns their names."""
    approved = {tool["name"]: tool["hash"] for tool in row.discovered_tools or []}
    MCPServer.objects.filter(pk=row.pk).update(approved_tools=approved)
    row.approved_tools = approved
    return sorted(approved)


def _tools_out(row: MCPServer) -> list[dict[str, Any]]:
    approved = row.approved_tools or {}
    return [{"name": tool["name"], "description": tool["description"], "input_schema": tool["input_schema"],
             "approved": approved.get(tool["name"]) == tool["hash"],
             "changed": tool["name"] in approved and approved[tool["name"]] != tool["hash"]}
            for tool in row.discovered_tools or []]
