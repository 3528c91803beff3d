"""vfs_edit: replace one exact piece of text in a file (exactly one match, else a clear error)."""

from __future__ import annotations

from pydantic import Field

from mas_core.patterns import off_loop
from tools_app.builtin.vfs_write import register_if_agent
from tools_app.paths import missing_file_message, normalise_path
from tools_app.plugin import Params, Tool, ToolContext, ToolError
from tools_app.registry import ToolResult


class VfsEdit(Tool):
    name = "vfs_edit"
    description = (
        "Replace text in a workspace file. 'old' must occur exactly once in the file "
        "(include surrounding lines to make it unique); it is replaced by 'new'."
    )

    class Parameters(Params):
        path: str = Field(description="Workspace path of an existing file")
        old: str = Field(description="The exact text to replace, whitespace included")
        new: str = Field(description="The replacement text (may be empty to delete)")

    async def run(self, args: Parameters, ctx: ToolContext) -> ToolResult:
        path = normalise_path(args.path)
        if not args.old:
            raise ToolError("old must not be empty: give the exact text to replace")
        content = await ctx.workspace.read(path)
        if content is None:
            raise ToolError(await off_loop(missing_file_message, path, await ctx.workspace.paths()))
        count = content.count(args.old)
        if count == 0:
            hint = ""
            if args.old.strip() and args.old.strip() in content:
                hint = " It does occur once leading/trailing whitespace is removed: copy the whitespace exactly."
            raise ToolError(
                f"old text not found in {path} (0 matches); nothing was changed.{hint} "
                "Read the file and copy the exact text."
            )
        if count > 1:
            raise ToolError(
                f"old text matches {count} times in {path}; nothing was changed. "
                "Include more surrounding text so that it matches exactly once."
            )
        updated = content.replace(args.old, args.new, 1)
        version = await ctx.workspace.write(path, updated)
        written = f"Edited {path} (version {version})"
        note = await register_if_agent(ctx, path, updated, written)
        return ToolResult(f"{written}: replaced 1 occurrence.{note}", {"path": path, "version": version})
