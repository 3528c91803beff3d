from django.db import models

from mas_core.models import Definition


class CustomTool(Definition):
    kind_name = "tool"

    class Meta(Definition.Meta):
        verbose_name = "custom tool"
        verbose_name_plural = "custom tools"
        constraints = [models.UniqueConstraint(fields=["team", "slug"], name="tool_unique_team_slug")]


class MCPServer(Definition):
    """An MCP server config. ``secret_env``/``secret_headers`` are write-only."""

    kind_name = "mcp"
    transport = models.CharField(max_length=24)
    enabled = models.BooleanField(default=True)
    secret_env = models.JSONField(default=dict, blank=True)
    secret_headers = models.JSONField(default=dict, blank=True)
    # What the server offered when last connected: [{name, description, input_schema, hash}].
    discovered_tools = models.JSONField(default=list, blank=True, editable=False)
    discovered_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Tool name -> hash of the description and schema an admin approved; a changed tool is not offered.
    approved_tools = models.JSONField(default=dict, blank=True, editable=False)

    class Meta(Definition.Meta):
        verbose_name = "MCP server"
        verbose_name_plural = "MCP servers"
        constraints = [models.UniqueConstraint(fields=["team", "slug"], name="mcp_unique_team_slug")]
        permissions = [("manage_stdio_mcpserver", "Can create or edit stdio MCP servers (runs a command)")]
