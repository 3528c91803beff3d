"""code_exec: run Python or bash in a sandbox holding a copy of the run's workspace (tools_app.sandbox).

Files come back all or nothing: when the program went over a quota (a full
working directory, /tmp or /dev/shm, more changed files than
``MAS_CODE_EXEC_MAX_FILES``) or its files would take the run's workspace
past ``MAS_WORKSPACE_MAX_BYTES`` or ``MAS_WORKSPACE_MAX_FILES``, the call fails with a message naming the
limit, its output is kept, and none of its files is written. Only a
concurrent write by another session can still refuse one file after the
check; each file then refused is listed in ``files_not_written``.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from django.conf import settings
from pydantic import Field

from tools_app import sandbox
from tools_app.paths import is_agent_file, normalise_path
from tools_app.plugin import Params, Tool, ToolContext, ToolError


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def _failed(message: str, report: dict[str, Any], kind: str) -> ToolError:
    error = ToolError(json.dumps({"error": f"code_exec: {message}", **report}, ensure_ascii=False))
    error.kind = kind
    return error


class CodeExec(Tool):
    name = "code_exec"
    description = (
        "Run a Python 3 or bash program in a sandbox: no network, a time, memory and process limit, and a copy "
        "of the run's workspace files in its working directory. Files it creates or changes there are written "
        "back to the workspace (not agent files), up to a limit on their number and size. Returns JSON: "
        "exit_code, stdout, stderr, duration_s, timed_out, files_written."
    )

    class Parameters(Params):
        language: Literal["python", "bash"]
        code: str = Field(min_length=1, max_length=100_000)

    async def run(self, args: Parameters, ctx: ToolContext) -> str:
        limits = sandbox.Limits.from_settings()
        capacity = settings.MAS_WORKSPACE_MAX_BYTES
        files = await ctx.workspace.contents()  # in one read, not one per file
        sizes = {path: _utf8_len(content) for path, content in files.items()}
        if sum(sizes.values()) > capacity:
            raise ToolError(f"code_exec: the workspace holds more than its limit of "
                            f"{capacity:,} bytes (MAS_WORKSPACE_MAX_BYTES); nothing was run")
        for name in sandbox.SCRIPT_NAMES:
            files.pop(name, None)
        try:
            result = await sandbox.run(args.language, args.code, files, limits)
        except sandbox.SandboxUnavailable as error:
            raise ToolError(str(error)) from None
        report = {"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr,
                  "duration_s": result.duration_s, "timed_out": result.timed_out, "files_written": []}
        if result.timed_out:
            report["stderr"] += f"\n[killed: the program ran longer than {limits.timeout_s:g} s]"
        if result.exceeded:
            raise _failed("; ".join(result.exceeded) + ". No files were copied back to the workspace.", report,
                          "policy_denied")
        if result.failure:
            raise _failed(f"{result.failure}. No files were copied back to the workspace.", report, "tool_error")
        chosen, skipped = {}, list(result.skipped)
        for path, content in result.changed.items():
            try:
                path = normalise_path(path)
            except ToolError as error:
                skipped.append(f"{path} ({error})")
                continue
            if is_agent_file(path):
                skipped.append(f"{path} (agent files are written with vfs_write)")
                continue
            chosen[path] = content
        after = sum(sizes.values()) + sum(_utf8_len(text) - sizes.get(path, 0) for path, text in chosen.items())
        if after > capacity:
            raise _failed(f"its files would bring the run's workspace to {after:,} bytes, over its limit of "
                          f"{capacity:,} bytes (MAS_WORKSPACE_MAX_BYTES). No files were copied back "
                          "to the workspace.", report, "policy_denied")
        added = sum(path not in sizes for path in chosen)
        most = settings.MAS_WORKSPACE_MAX_FILES
        if added and len(sizes) + added > most:
            raise _failed(f"its files would bring the run's workspace to {len(sizes) + added:,} files, over its limit "
                          f"of {most:,} files (MAS_WORKSPACE_MAX_FILES). No files were copied back to the workspace.",
                          report, "policy_denied")
        for path, content in chosen.items():
            try:
                await ctx.workspace.write(path, content)
            except ToolError as error:  # another session filled the workspace meanwhile
                skipped.append(f"{path} ({error})")
                continue
            report["files_written"].append(path)
        if skipped:
            report["files_not_written"] = skipped
        return json.dumps(report, ensure_ascii=False)
