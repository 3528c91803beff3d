"""REST endpoints of custom tools and MCP server configs (built by the shared definition factory).

MCP secrets are write-only: env values and headers sent as literals are kept
in the row's secret columns by the save service; responses show only the
``${NAME}`` references and the names of the secret keys. Creating, editing
or deleting a stdio server needs ``Actor.can_manage_stdio`` (403 otherwise:
only in a team the operator granted stdio servers; without the grant one may
only be deleted), and so does testing or approving one. ``/test`` connects
and lists the tools, on the event loop; ``/approve`` approves them as listed:
an agent is offered only approved tools.
"""

# No `from __future__ import annotations`: ninja reads the annotations at import time.

from typing import Any

from asgiref.sync import sync_to_async
from ninja import Router
from ninja.errors import HttpError
from pydantic import BaseModel

from mas_core.api_definitions import add_definition_routes
from tools_app.kinds import MCP, TOOL
from mas_core.definitions.selectors import definition_get
from mas_core.schemas import error_responses
from mas_core.api_auth import api_auth

router = Router()

add_definition_routes(router, kind=TOOL, plural="tools")
add_definition_routes(router, kind=MCP, plural="mcp-servers")


# -- testing and approving MCP servers ---------------------------------------------------------------

class MCPToolOut(BaseModel):
    name: str
    description: str
    input_schema: dict[str, Any]
    approved: bool
    changed: bool


class MCPTestOut(BaseModel):
    ok: bool
    error: str | None
    timings_ms: dict[str, float]
    tools: list[MCPToolOut]


class MCPApproveOut(BaseModel):
    approved: list[str]


def _server_for(request, slug: str):
    actor = request.auth
    row = definition_get(kind=MCP, team=actor.team, slug=slug)
    if row.transport == "stdio" and not actor.can_manage_stdio:
        raise HttpError(403, "testing or approving a stdio MCP server (a command run on the server) needs the "
                             "stdio permission")
    return row


@router.post("/mcp-servers/{slug}/test", auth=api_auth("edit"), tags=["mcp-servers"], operation_id="mcp_test",
             response={200: MCPTestOut, **error_responses(401, 403, 404, 429)},
             summary="Connect to an MCP server, list its tools (kept on the row), report timings and errors")
async def test_server(request, slug: str):
    # Async: the connection is awaited on the event loop, bounded by the connect and list timeouts, with the
    # request's place in the web process and its database connection given up meanwhile (a slow or hanging
    # server holds up no other request); only the row's lookup and the save run in a thread.
    from tools_app.mcp.client import ServerConfig
    from tools_app.mcp.services import (TooManyTests, connection_given_back, mcp_server_discover,
                                        mcp_server_test_record, mcp_test_slot)

    def load():
        row = _server_for(request, slug)
        config = ServerConfig.of(row)
        connection_given_back()
        return row, config

    row, config = await sync_to_async(load)()
    try:
        with mcp_test_slot(row.team_id):
            found = await mcp_server_discover(config=config, close_in_background=True)
    except TooManyTests as error:
        raise HttpError(429, str(error)) from None
    return await sync_to_async(mcp_server_test_record)(row=row, found=found)


@router.post("/mcp-servers/{slug}/approve", auth=api_auth("edit"), tags=["mcp-servers"],
             operation_id="mcp_approve", response={200: MCPApproveOut, **error_responses(401, 403, 404)},
             summary="Approve the server's tools as last discovered; a tool that changes later waits for approval")
def approve_server(request, slug: str):
    from tools_app.mcp.services import mcp_server_approve

    return {"approved": mcp_server_approve(row=_server_for(request, slug))}
