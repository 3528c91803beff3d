"""tool_search: find tools of this session by what they do; the ones found are offered from the next turn."""

from __future__ import annotations

from pydantic import Field

from tools_app.plugin import Params, Tool, ToolContext
from tools_app.registry import require_service


class ToolSearch(Tool):
    name = "tool_search"
    description = ("Find more of your tools by describing what you need to do. The tools found are listed "
                   "with their descriptions and can be called from your next step on.")

    class Parameters(Params):
        query: str = Field(min_length=1, max_length=500, description="What you need a tool for")
        limit: int = Field(default=5, ge=1, le=20)

    async def run(self, args: Parameters, ctx: ToolContext) -> str:
        search = require_service(ctx, "tool_search", self.name)
        found = await search(query=args.query, limit=args.limit)
        if not found:
            return "No tool matches that."
        return "\n".join([f"{len(found)} tool(s) now available:", *(f"- {name}: {description}"
                                                                    for name, description in found)])
