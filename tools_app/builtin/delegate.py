"""delegate: hand a structured task to an existing agent of the run."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from tools_app.plugin import Params, Tool, ToolContext
from tools_app.registry import require_service


class Delegate(Tool):
    name = "delegate"
    description = "Hand a task to an existing agent (by name) with optional priority and context; returns its result."

    class Parameters(Params):
        agent: str = Field(min_length=1, description="Name of the agent to delegate to")
        task: str = Field(min_length=1, description="What that agent should do")
        priority: int | None = Field(default=None, description="Higher is handled first")
        context: dict[str, Any] | str | None = Field(default=None, description="Facts or data the agent needs")

    async def run(self, args: Parameters, ctx: ToolContext) -> Any:
        delegate = require_service(ctx, "delegate", self.name)
        return await delegate(agent=args.agent, task=args.task, priority=args.priority, context=args.context)
