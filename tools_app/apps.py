from django.apps import AppConfig


class ToolsAppConfig(AppConfig):
    name = "tools_app"
    verbose_name = "Tools and MCP servers"

    def ready(self) -> None:
        from mas_core.definitions.kinds import register_kind
        from tools_app.kinds import MCP, TOOL

        register_kind(TOOL)
        register_kind(MCP)
