"""blackboard_write: set a key on the run's shared blackboard."""

from __future__ import annotations

from pydantic import Field

from mas_core.errors import Refused
from tools_app.plugin import Params, Tool, ToolContext, ToolError
from tools_app.registry import require_service


class BlackboardWrite(Tool):
    name = "blackboard_write"
    description = "Set a key on this run's shared blackboard (every agent of the run can read it)."

    class Parameters(Params):
        key: str = Field(min_length=1, max_length=200)
        value: str = Field(max_length=50_000)

    async def run(self, args: Parameters, ctx: ToolContext) -> str:
        write = require_service(ctx, "blackboard_write", self.name)
        try:
            entry = await write(key=args.key, value=args.value)
        except Refused as error:
            raise ToolError(str(error)) from None
        return f"{entry.key} is now version {entry.version}."
