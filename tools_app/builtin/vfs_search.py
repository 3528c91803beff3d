"""vfs_search: a regular expression (RE2) over file contents, optionally only in files matching a glob.

The pattern is the model's, so it is compiled by RE2 (linear time, see
``mas_core.patterns``) and the scan runs off the event loop, within
``SEARCH_TIMEOUT_S``: no pattern can hold the worker's other sessions.
"""

from __future__ import annotations

import fnmatch
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from pydantic import Field

from mas_core.patterns import PatternError, compiled, off_loop
from tools_app.plugin import Params, Tool, ToolContext, ToolError, Workspace

MAX_RESULT_LINES = 200
# Files read from the workspace at once: a search of thousands of files is dozens of reads, not thousands.
READ_BATCH = 64
MAX_LINE_CHARS = 200
SEARCH_TIMEOUT_S = 10.0


@dataclass
class _Scan:
    """Hits so far, shared by the per-file scans of one search; ``stop`` ends them (deadline or cancel)."""

    deadline: float
    hits: list[str] = field(default_factory=list)
    total: int = 0
    timed_out: bool = False
    stop: threading.Event = field(default_factory=threading.Event)


def _scan_file(regex, path: str, content: str, scan: _Scan) -> None:
    for number, line in enumerate(content.splitlines(), start=1):
        if scan.stop.is_set():
            return
        if number % 256 == 0 and time.monotonic() > scan.deadline:
            scan.timed_out = True
            scan.stop.set()
            return
        if regex.search(line):
            scan.total += 1
            if len(scan.hits) < MAX_RESULT_LINES:
                text = line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + "…"
                scan.hits.append(f"{path}:{number}: {text}")


async def _files(workspace: Workspace, paths: list[str]) -> AsyncIterator[tuple[str, str]]:
    """(path, content) of each of ``paths`` still there (a file may be deleted meanwhile), read ``READ_BATCH`` at a
    time."""
    for start in range(0, len(paths), READ_BATCH):
        batch = paths[start:start + READ_BATCH]
        contents = await workspace.read_many(batch)
        for path in batch:
            if path in contents:
                yield path, contents[path]


class VfsSearch(Tool):
    name = "vfs_search"
    description = (
        "Search the run's shared workspace: lines matching a regular expression, as 'path:line: text'. "
        "'glob' limits the files ('*.md', 'notes/*'; '*' also crosses '/'). "
        "An empty pattern lists the files matching the glob."
    )

    class Parameters(Params):
        pattern: str = Field(description="Regular expression in RE2 syntax (like Python's, without look-around "
                                         "or backreferences); (?i) for case-insensitive")
        glob: str | None = Field(default=None, description="Only files whose path matches this glob")

    async def run(self, args: Parameters, ctx: ToolContext) -> str:
        try:
            regex = compiled(args.pattern)
        except PatternError as exc:
            raise ToolError(f"Invalid regular expression {args.pattern!r}: {exc}") from None
        paths = sorted(await ctx.workspace.paths())
        if args.glob:
            glob = args.glob.lstrip("/")
            paths = [path for path in paths if fnmatch.fnmatchcase(path, glob)]
        scope = f" in files matching {args.glob!r}" if args.glob else ""
        if not args.pattern:
            if not args.glob:
                raise ToolError("Give a pattern, a glob, or both")
            return "\n".join(paths) if paths else f"No files match {args.glob!r}."
        scan = _Scan(deadline=time.monotonic() + SEARCH_TIMEOUT_S)
        try:
            async for path, content in _files(ctx.workspace, paths):
                await off_loop(_scan_file, regex, path, content, scan)
                if scan.stop.is_set():
                    break
        finally:
            scan.stop.set()  # a cancelled search stops its scan at the next line
        stopped = f"[stopped after {SEARCH_TIMEOUT_S:g} s: the results are partial]" if scan.timed_out else ""
        if not scan.hits:
            return f"No matches for {args.pattern!r}{scope} ({len(paths)} files searched).{' ' + stopped if stopped else ''}"
        hits = list(scan.hits)
        if scan.total > len(hits):
            hits.append(f"[truncated: showing {len(hits)} of {scan.total} matching lines]")
        if stopped:
            hits.append(stopped)
        return "\n".join(hits)
