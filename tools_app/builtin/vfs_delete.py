"""vfs_delete: delete a file; ``agents/*.md`` also unregisters that agent for the run."""

from __future__ import annotations

from pydantic import Field

from mas_core.patterns import off_loop
from tools_app.paths import is_agent_file, missing_file_message, normalise_path
from tools_app.plugin import Params, Tool, ToolContext, ToolError
from tools_app.registry import ToolResult


class VfsDelete(Tool):
    name = "vfs_delete"
    description = "Delete a file of the run's shared workspace. Deleting agents/<name>.md removes that agent from the run."

    class Parameters(Params):
        path: str = Field(description="Workspace path of the file to delete")

    async def run(self, args: Parameters, ctx: ToolContext) -> ToolResult:
        path = normalise_path(args.path)
        if not await ctx.workspace.delete(path):
            raise ToolError(await off_loop(missing_file_message, path, await ctx.workspace.paths()))
        note = ""
        service = ctx.services.get("unregister_agent")
        if is_agent_file(path) and service is not None:
            await service(path)
            note = " Agent unregistered for this run."
        return ToolResult(f"Deleted {path}.{note}", {"path": path, "agent_unregistered": bool(note)})
