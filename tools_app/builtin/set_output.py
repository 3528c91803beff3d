"""set_output: set one named output of the current workflow step."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from tools_app.plugin import Params, Tool, ToolContext
from tools_app.registry import require_service


class SetOutput(Tool):
    name = "set_output"
    description = "Set a named output of the current workflow step (any JSON value)."

    class Parameters(Params):
        name: str = Field(min_length=1, max_length=100, description="Output name declared by the workflow step")
        value: Any = Field(description="The output's value: any JSON value")

    async def run(self, args: Parameters, ctx: ToolContext) -> Any:
        set_output = require_service(ctx, "set_output", self.name)
        return await set_output(name=args.name, value=args.value)
