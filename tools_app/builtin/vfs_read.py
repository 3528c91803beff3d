"""vfs_read: read a workspace file; a missing one lists similar paths and the files."""

from __future__ import annotations

from pydantic import Field

from tools_app.paths import missing_file_message, normalise_path
from tools_app.plugin import Params, Tool, ToolContext, ToolError


class VfsRead(Tool):
    name = "vfs_read"
    description = "Read a file of the run's shared workspace and return its full text."

    class Parameters(Params):
        path: str = Field(description="Workspace path, e.g. 'notes/plan.md'")

    async def run(self, args: Parameters, ctx: ToolContext) -> str:
        path = normalise_path(args.path)
        content = await ctx.workspace.read(path)
        if content is None:
            raise ToolError(missing_file_message(path, await ctx.workspace.paths()))
        return content if content else f"{path} is empty."
