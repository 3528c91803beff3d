"""code_exec: run Python or bash in a sandbox holding a copy of the run's workspace (tools_app.sandbox)."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import Field

from tools_app import sandbox
from tools_app.paths import is_agent_file, normalise_path
from tools_app.plugin import Params, Tool, ToolContext, ToolError

MAX_WORKSPACE_BYTES = 20 * 1024 * 1024


class CodeExec(Tool):
    name = "code_exec"
    description = (
        "Run a Python 3 or bash program in a sandbox: no network, a time, memory and process limit, and a copy "
        "of the run's workspace files in its working directory. Files it creates or changes there are written "
        "back to the workspace (not agent files). Returns JSON: exit_code, stdout, stderr, duration_s, "
        "timed_out, files_written."
    )

    class Parameters(Params):
        language: Literal["python", "bash"]
        code: str = Field(min_length=1, max_length=100_000)

    async def run(self, args: Parameters, ctx: ToolContext) -> str:
        limits = sandbox.Limits.from_settings()
        files, total = {}, 0
        for path in sorted(await ctx.workspace.paths()):
            content = await ctx.workspace.read(path)
            if content is None or path in sandbox.SCRIPT_NAMES:
                continue
            total += len(content.encode("utf-8"))
            if total > MAX_WORKSPACE_BYTES:
                raise ToolError(f"code_exec: the workspace holds more than {MAX_WORKSPACE_BYTES // 2**20} MB of "
                                "files; nothing was run")
            files[path] = content
        try:
            result = await sandbox.run(args.language, args.code, files, limits)
        except sandbox.SandboxUnavailable as error:
            raise ToolError(str(error)) from None
        written, skipped = [], list(result.skipped)
        for path, content in result.changed.items():
            try:
                path = normalise_path(path)
            except ToolError as error:
                skipped.append(f"{path} ({error})")
                continue
            if is_agent_file(path):
                skipped.append(f"{path} (agent files are written with vfs_write)")
                continue
            await ctx.workspace.write(path, content)
            written.append(path)
        report = {"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr,
                  "duration_s": result.duration_s, "timed_out": result.timed_out, "files_written": written}
        if skipped:
            report["files_not_written"] = skipped
        if result.timed_out:
            report["stderr"] += f"\n[killed: the program ran longer than {limits.timeout_s:g} s]"
        return json.dumps(report, ensure_ascii=False)
