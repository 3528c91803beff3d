"""vfs_list: the workspace paths under a prefix; none → the prefixes that do exist."""

from __future__ import annotations

from pydantic import Field

from tools_app.paths import normalise_prefix, top_level_prefixes
from tools_app.plugin import Params, Tool, ToolContext

MAX_LISTED = 500


class VfsList(Tool):
    name = "vfs_list"
    description = "List the files of the run's shared workspace whose path starts with a prefix (all when empty)."

    class Parameters(Params):
        prefix: str = Field(default="", description="Path prefix such as 'notes/'; empty lists every file")

    async def run(self, args: Parameters, ctx: ToolContext) -> str:
        prefix = normalise_prefix(args.prefix)
        paths = sorted(await ctx.workspace.paths())
        found = [path for path in paths if path.startswith(prefix)]
        if not found:
            if not paths:
                return "The workspace is empty."
            return f"No files under {prefix!r}. Existing top-level prefixes: {', '.join(top_level_prefixes(paths))}"
        where = f" under {prefix!r}" if prefix else ""
        lines = [f"{len(found)} file{'s' if len(found) != 1 else ''}{where}:", *found[:MAX_LISTED]]
        if len(found) > MAX_LISTED:
            lines.append(f"[truncated: showing {MAX_LISTED} of {len(found)}]")
        return "\n".join(lines)
