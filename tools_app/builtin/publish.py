"""publish: post a message on one of the run's channels."""

from __future__ import annotations

from pydantic import Field

from mas_core.errors import Refused
from tools_app.plugin import Params, Tool, ToolContext, ToolError
from tools_app.registry import require_service


class Publish(Tool):
    name = "publish"
    description = "Post a message on a channel of this run; every agent subscribed to it receives it once."

    class Parameters(Params):
        channel: str = Field(min_length=1, max_length=100)
        message: str = Field(min_length=1, max_length=20_000)

    async def run(self, args: Parameters, ctx: ToolContext) -> str:
        publish = require_service(ctx, "channel_publish", self.name)
        try:
            message = await publish(channel=args.channel, message=args.message)
        except Refused as error:
            raise ToolError(str(error)) from None
        return f"Published on {args.channel} as message {message.seq}."
