"""vfs_search: regex over file contents, optionally only in files matching a glob."""

from __future__ import annotations

import fnmatch
import re

from pydantic import Field

from tools_app.plugin import Params, Tool, ToolContext, ToolError

MAX_RESULT_LINES = 200
MAX_LINE_CHARS = 200


class VfsSearch(Tool):
    name = "vfs_search"
    description = (
        "Search the run's shared workspace: lines matching a regular expression, as 'path:line: text'. "
        "'glob' limits the files ('*.md', 'notes/*'; '*' also crosses '/'). "
        "An empty pattern lists the files matching the glob."
    )

    class Parameters(Params):
        pattern: str = Field(description="Python regular expression; (?i) for case-insensitive")
        glob: str | None = Field(default=None, description="Only files whose path matches this glob")

    async def run(self, args: Parameters, ctx: ToolContext) -> str:
        try:
            regex = re.compile(args.pattern)
        except re.error as exc:
            raise ToolError(f"Invalid regular expression {args.pattern!r}: {exc}") from exc
        paths = sorted(await ctx.workspace.paths())
        if args.glob:
            glob = args.glob.lstrip("/")
            paths = [path for path in paths if fnmatch.fnmatchcase(path, glob)]
        scope = f" in files matching {args.glob!r}" if args.glob else ""
        if not args.pattern:
            if not args.glob:
                raise ToolError("Give a pattern, a glob, or both")
            return "\n".join(paths) if paths else f"No files match {args.glob!r}."
        hits: list[str] = []
        total = 0
        for path in paths:
            content = await ctx.workspace.read(path)
            if content is None:  # deleted meanwhile
                continue
            for number, line in enumerate(content.splitlines(), start=1):
                if regex.search(line):
                    total += 1
                    if len(hits) < MAX_RESULT_LINES:
                        text = line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + "…"
                        hits.append(f"{path}:{number}: {text}")
        if not hits:
            return f"No matches for {args.pattern!r}{scope} ({len(paths)} files searched)."
        if total > len(hits):
            hits.append(f"[truncated: showing {len(hits)} of {total} matching lines]")
        return "\n".join(hits)
