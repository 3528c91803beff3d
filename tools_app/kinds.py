"""tools_app's definition kinds: custom tools and MCP servers (registered in ``ToolsAppConfig.ready``)."""

from __future__ import annotations

from mas_core.definitions.kinds import Kind
from tools_app.specs import CustomToolSpec, MCPServerSpec

TOOL = Kind("tool", "Custom tool", "tools_app.CustomTool", CustomToolSpec, "tools", order=20)
MCP = Kind("mcp", "MCP server", "tools_app.MCPServer", MCPServerSpec, "mcp", order=30)
