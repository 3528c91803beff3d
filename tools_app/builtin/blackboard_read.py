"""blackboard_read: read a key of the run's blackboard, or list every key."""

from __future__ import annotations

from pydantic import Field

from tools_app.plugin import Params, Tool, ToolContext
from tools_app.registry import require_service

PREVIEW = 100


class BlackboardRead(Tool):
    name = "blackboard_read"
    description = "Read a key of this run's blackboard; without a key, list every key (values cut to 100 characters)."

    class Parameters(Params):
        key: str | None = Field(default=None, max_length=200)

    async def run(self, args: Parameters, ctx: ToolContext) -> str:
        read = require_service(ctx, "blackboard_read", self.name)
        entries = await read(key=args.key)
        if args.key:
            if not entries:
                return f"No key {args.key!r} on the blackboard."
            entry = entries[0]
            return f"{entry.key} (version {entry.version}, by {entry.author}):\n{entry.value}"
        if not entries:
            return "The blackboard is empty."
        return "\n".join(
            f"- {e.key} (v{e.version}, {e.author}): {e.value if len(e.value) <= PREVIEW else e.value[:PREVIEW] + '…'}"
            for e in entries)
