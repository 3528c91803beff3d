"""vfs_read: read a workspace file, whole or a piece at a time; a missing one lists similar paths and the files."""

from __future__ import annotations

from pydantic import Field

from mas_core.patterns import off_loop
from tools_app.paths import missing_file_message, normalise_path
from tools_app.plugin import Params, Tool, ToolContext, ToolError


class VfsRead(Tool):
    name = "vfs_read"
    description = (
        "Read a file of the run's shared workspace. Without offset and max_chars it returns the whole text "
        "(a long one is cut, saying how to read on); with them, max_chars characters from character offset, "
        "followed by a note giving the offset to read on from when more remains. Large tool results stored "
        "under tool-results/ are read this way."
    )

    class Parameters(Params):
        path: str = Field(description="Workspace path, e.g. 'notes/plan.md'")
        offset: int = Field(default=0, ge=0, description="Character to start at (0: the beginning)")
        max_chars: int | None = Field(default=None, ge=1, le=1_000_000,
                                      description="How many characters to return at most (default: the rest)")

    async def run(self, args: Parameters, ctx: ToolContext) -> str:
        path = normalise_path(args.path)
        content = await ctx.workspace.read(path)
        if content is None:
            raise ToolError(await off_loop(missing_file_message, path, await ctx.workspace.paths()))
        if not content:
            return f"{path} is empty."
        if args.offset == 0 and args.max_chars is None:
            return content
        if args.offset >= len(content):
            raise ToolError(f"offset {args.offset} is past the end of {path}, which has {len(content)} characters")
        end = len(content) if args.max_chars is None else min(len(content), args.offset + args.max_chars)
        piece = content[args.offset:end]
        if end < len(content):
            piece += (f"\n[{path}: characters {args.offset} to {end} of {len(content)}; "
                      f"read on with offset {end}]")
        return piece
