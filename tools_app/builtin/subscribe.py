"""subscribe: subscribe to a channel and take the messages you have not read yet."""

from __future__ import annotations

from pydantic import Field

from mas_core.errors import Refused
from tools_app.plugin import Params, Tool, ToolContext, ToolError
from tools_app.registry import require_service


class Subscribe(Tool):
    name = "subscribe"
    description = ("Subscribe to a channel of this run (if not yet) and check it: returns the messages you have "
                   "not received yet, oldest first, and marks them read.")

    class Parameters(Params):
        channel: str = Field(min_length=1, max_length=100)

    async def run(self, args: Parameters, ctx: ToolContext) -> str:
        check = require_service(ctx, "channel_check", self.name)
        try:
            messages = await check(channel=args.channel)
        except Refused as error:
            raise ToolError(str(error)) from None
        if not messages:
            return f"No new messages on {args.channel}."
        return "\n".join(f"#{m.seq} from {m.sender}: {m.content}" for m in messages)
