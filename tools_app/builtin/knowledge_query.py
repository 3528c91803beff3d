"""knowledge_query: search the team's shared knowledge (what any agent contributed)."""

from __future__ import annotations

from pydantic import Field

from tools_app.builtin.memory_recall import format_hits
from tools_app.plugin import Params, Tool, ToolContext
from tools_app.registry import require_service


class KnowledgeQuery(Tool):
    name = "knowledge_query"
    description = "Search the team's shared knowledge base (contributed by any agent) by meaning and words."

    class Parameters(Params):
        query: str = Field(min_length=1, max_length=2000, description="What you want to know")
        k: int = Field(default=5, ge=1, le=50, description="How many entries")
        tags: list[str] = Field(default_factory=list, description="Only entries with any of these tags")

    async def run(self, args: Parameters, ctx: ToolContext) -> str:
        search = require_service(ctx, "memory_search", self.name)
        return format_hits(await search(query=args.query, k=args.k, types=None, tags=args.tags or None,
                                        shared_only=True))
