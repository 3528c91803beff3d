"""vfs_write: write a file; ``agents/*.md`` also registers that agent for the run."""

from __future__ import annotations

from pydantic import Field

from tools_app.paths import is_agent_file, normalise_path
from tools_app.plugin import Params, Tool, ToolContext, ToolError
from tools_app.registry import ToolResult


async def register_if_agent(ctx: ToolContext, path: str, content: str, written: str) -> str:
    """Register an agent file with the kernel when it offers ``register_agent``; returns a note for the model."""
    service = ctx.services.get("register_agent")
    if not is_agent_file(path) or service is None:
        return ""
    try:
        registered = await service(path, content)
    except ToolError as exc:
        # The file stays written: the model should fix it, not write it again blindly.
        raise ToolError(f"{written}, but the agent was not registered: {exc}") from exc
    return f" Agent registered for this run: {registered}." if registered else " Agent registered for this run."


class VfsWrite(Tool):
    name = "vfs_write"
    description = (
        "Create or overwrite a file of the run's shared workspace. Writing agents/<name>.md "
        "(an agent definition) makes that agent available to this run."
    )

    class Parameters(Params):
        path: str = Field(description="Workspace path, e.g. 'notes/plan.md'")
        content: str = Field(description="The file's full new text")

    async def run(self, args: Parameters, ctx: ToolContext) -> ToolResult:
        path = normalise_path(args.path)
        version = await ctx.workspace.write(path, args.content)
        written = f"Wrote {path} (version {version}, {len(args.content)} characters)"
        note = await register_if_agent(ctx, path, args.content, written)
        return ToolResult(f"{written}.{note}", {"path": path, "version": version, "agent_registered": bool(note)})
