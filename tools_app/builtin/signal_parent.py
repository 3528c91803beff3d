"""signal_parent: re-activate the parent agent with a message (an error for a root agent)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from tools_app.plugin import Params, Tool, ToolContext
from tools_app.registry import require_service


class SignalParent(Tool):
    name = "signal_parent"
    description = "Send a message to the agent that spawned you and wake it up. Root agents have no parent."

    class Parameters(Params):
        message: str = Field(min_length=1, description="What the parent should know")

    async def run(self, args: Parameters, ctx: ToolContext) -> Any:
        signal = require_service(ctx, "signal_parent", self.name)
        return await signal(message=args.message)
