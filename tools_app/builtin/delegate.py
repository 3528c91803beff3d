"""delegate: hand a structured task to an existing agent of the run, and (by default) wait for its outcome."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from tools_app.plugin import Params, Tool, ToolContext
from tools_app.registry import require_service

OUTCOME = ("a JSON object: status (ok, failed or cancelled), result (its final answer), outputs (named outputs "
           "it set), files (path and bytes of the workspace files it wrote) and failure (the report when it failed)")


class Delegate(Tool):
    name = "delegate"
    description = (
        "Hand a task to an existing agent (by name). With wait (the default) you pause until that agent has "
        f"finished, and this call returns its outcome as {OUTCOME}. Several delegate calls in one turn run in "
        "parallel; you continue once all of them have finished. With wait false the call returns at once and "
        "the outcome reaches you later as a message. context is shown to the agent with its task; priority: "
        "lower numbers are started first (default 100)."
    )

    class Parameters(Params):
        agent: str = Field(min_length=1, max_length=100, description="Name of the agent to delegate to")
        task: str = Field(min_length=1, description="What that agent should do")
        context: dict[str, Any] | str | None = Field(
            default=None, description="Facts or data the agent needs; it sees them in its prompt")
        priority: int | None = Field(default=None, ge=0, le=1000,
                                     description="Lower numbers are started first (default 100)")
        wait: bool = Field(default=True, description="Wait for the outcome (true) or only start the agent (false)")

    async def run(self, args: Parameters, ctx: ToolContext) -> Any:
        delegate = require_service(ctx, "delegate", self.name)
        return await delegate(agent=args.agent, task=args.task, priority=args.priority, context=args.context,
                              wait=args.wait)
