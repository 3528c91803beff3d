"""Testing and approving an MCP server from the admin or the API.

Testing connects, lists the tools and disconnects, bounded by the connect and
list timeouts: the API's endpoint awaits :func:`mcp_server_discover` on the
event loop (a server that times out is answered at once, left in the
background), the admin's action runs it to the end in its request. Either
way the request gives its place in the web process up while it waits for the
server (``mas_core.webgate.away``): a slow server holds up its tester, not
the other requests. So that a team cannot start servers without end that way,
it tests at most ``MAS_MCP_TESTS_PER_TEAM`` at once in a process
(:func:`mcp_test_slot`; past it, :class:`TooManyTests`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection
from django.utils import timezone

from mas_core import webgate
from tools_app.mcp.client import MCPError, ServerConfig, connection_limits, discover
from tools_app.models import MCPServer

# On top of connecting and listing: leaving the server (the SDK ends a stdio process in a few seconds).
CLOSE_GRACE_S = 5.0


class TooManyTests(Exception):
    """The team tests as many MCP servers at once as it may (``MAS_MCP_TESTS_PER_TEAM``) in this process."""


_testing: Counter = Counter()  # team id -> its Tests under way in this process
_testing_lock = threading.Lock()


@contextlib.contextmanager
def mcp_test_slot(team_id: int) -> Iterator[None]:
    """One of the team's ``MAS_MCP_TESTS_PER_TEAM`` Tests at once in this process, for the block."""
    limit = settings.MAS_MCP_TESTS_PER_TEAM
    with _testing_lock:
        if _testing[team_id] >= limit:
            raise TooManyTests(f"this team's MCP server tests under way: {limit}, its most at once "
                               "(MAS_MCP_TESTS_PER_TEAM); test again when one has ended")
        _testing[team_id] += 1
    try:
        yield
    finally:
        with _testing_lock:
            _testing[team_id] -= 1
            if not _testing[team_id]:
                del _testing[team_id]


def connection_given_back() -> None:
    """Before a request waits for an MCP server: its database connection goes back to the pool meanwhile
    (unless a transaction holds it)."""
    if not connection.in_atomic_block:
        connection.close()


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
        async with webgate.away():
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
    """Connect, list the tools, disconnect: what the server offers (kept on the row), timings and any error;
    :class:`TooManyTests` past the team's Tests at once.

    Synchronous, for the admin's action (the API awaits :func:`mcp_server_discover` instead). In a web
    request's thread the test runs on the web process's loop, where its request gives its place up while
    it waits."""
    config = ServerConfig.of(row)
    with mcp_test_slot(row.team_id):
        connection_given_back()
        found = async_to_sync(mcp_server_discover)(config=config)
    return mcp_server_test_record(row=row, found=found)


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
