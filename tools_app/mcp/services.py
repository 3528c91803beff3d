"""Testing and approving an MCP server from the admin or the API.

Testing connects, lists the tools and disconnects, bounded by the connect and
list timeouts: the API's endpoint awaits :func:`mcp_server_discover` on the
event loop (no web thread waits for a slow server, and one that times out is
answered at once, left in the background), the admin's action runs it to the
end in its request.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from tools_app.mcp.client import MCPError, ServerConfig, connection_limits, discover
from tools_app.models import MCPServer

# On top of connecting and listing: leaving the server (the SDK ends a stdio process in a few seconds).
CLOSE_GRACE_S = 5.0


@dataclass
class Discovery:
    """What testing a server found: its tools (``None`` when it failed), the timings (ms) and the error."""

    tools: list[dict[str, Any]] | None
    timings_ms: dict[str, float] = field(default_factory=dict)
    error: str | None = None


async def mcp_server_discover(*, config: ServerConfig, close_in_background: bool = False) -> Discovery:
    """Connect, list the tools, disconnect — within the connect and list timeouts (and a grace to close).

    ``close_in_background`` (a web server's loop, which outlives the request): a server that timed out is
    answered at once and left in the background, the SDK taking a few seconds to end its process."""
    connect_s, list_s, _ = connection_limits()
    bound = min(connect_s, float(config.spec.timeout_s)) + list_s + CLOSE_GRACE_S
    try:
        tools, timings = await asyncio.wait_for(discover(config, close_in_background=close_in_background),
                                                timeout=bound)
    except MCPError as error:
        return Discovery(tools=None, error=str(error))
    except asyncio.TimeoutError:
        return Discovery(tools=None, error=f"MCP server {config.slug} did not connect, list its tools and close "
                                           f"within {bound:g} s")
    return Discovery(tools=[tool.to_dict() for tool in tools], timings_ms=timings)


def mcp_server_test_record(*, row: MCPServer, found: Discovery) -> dict[str, Any]:
    """Keep the tools found on the row (when the test succeeded); the answer of a test."""
    if found.tools is not None:
        MCPServer.objects.filter(pk=row.pk, team_id=row.team_id).update(discovered_tools=found.tools,
                                                                     discovered_at=timezone.now())
        row.discovered_tools = found.tools
    return {"ok": found.tools is not None, "error": found.error, "timings_ms": found.timings_ms,
            "tools": _tools_out(row)}


def mcp_server_test(*, row: MCPServer) -> dict[str, Any]:
    """Connect, list the tools, disconnect: what the server offers (kept on the row), timings and any error.

    Synchronous, for the admin's action (the API awaits :func:`mcp_server_discover` instead)."""
    return mcp_server_test_record(row=row, found=asyncio.run(mcp_server_discover(config=ServerConfig.of(row))))


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
