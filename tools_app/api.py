"""REST endpoints of custom tools and MCP server configs (built by the shared definition factory).

MCP secrets are write-only: env values and headers sent as literals are kept
in the row's secret columns by the save service; responses show only the
``${NAME}`` references and the names of the secret keys. Creating, editing
or deleting a stdio server needs ``Actor.can_manage_stdio`` (403 otherwise).
"""

from ninja import Router

from agents_app.api import add_definition_routes
from agents_app.definitions.kinds import MCP, TOOL

router = Router()

add_definition_routes(router, kind=TOOL, plural="tools")
add_definition_routes(router, kind=MCP, plural="mcp-servers")
