"""spawn_agent: write an agent file and run it as a child of the caller (SPEC §3.1).

Depth and fan-out limits belong to the kernel's ``spawn`` service, which
raises ToolError when one is reached.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from tools_app.paths import normalise_path
from tools_app.plugin import Params, Tool, ToolContext, ToolError
from tools_app.builtin.delegate import OUTCOME
from tools_app.registry import require_service


def agent_file_path(filename: str) -> str:
    """'researcher.md' → 'agents/researcher.md'; the path must end with .md."""
    path = normalise_path(filename)
    if not path.startswith("agents/"):
        path = f"agents/{path}"
    if not path.endswith(".md"):
        raise ToolError(f"filename {filename!r} must end with .md (an agent definition in markdown)")
    return path


class SpawnAgent(Tool):
    name = "spawn_agent"
    description = (
        "Create a child agent: write its definition (markdown with YAML frontmatter) to agents/<filename> and "
        "start it on a task. With wait (the default) you pause until the child has finished, and this call "
        f"returns its outcome as {OUTCOME}. Several spawn_agent calls in one turn run in parallel; you continue "
        "once all of them have finished. With wait false the call returns at once and the outcome reaches you "
        "later as a message. A child gets at most the tools you have."
    )

    class Parameters(Params):
        filename: str = Field(description="File name of the agent definition, e.g. 'researcher.md' (stored under agents/)")
        content: str = Field(description="The agent definition: YAML frontmatter (name, tools, …) and instructions")
        task: str = Field(min_length=1, description="What the child agent should do")
        wait: bool = Field(default=True, description="Wait for the outcome (true) or only start the child (false)")

    async def run(self, args: Parameters, ctx: ToolContext) -> Any:
        spawn = require_service(ctx, "spawn", self.name)  # before any write: no side effect when unavailable
        path = agent_file_path(args.filename)
        # The service validates the definition, then writes it — once, even when the call is resumed.
        return await spawn(filename=path, content=args.content, task=args.task, wait=args.wait,
                           write=ctx.workspace.write)
