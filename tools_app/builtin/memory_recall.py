"""memory_recall: search what you (and the team) remember."""

from __future__ import annotations

from pydantic import Field

from tools_app.builtin.memory_store import MEMORY_TYPES
from tools_app.plugin import Params, Tool, ToolContext
from tools_app.registry import require_service


def format_hits(hits) -> str:
    if not hits:
        return "Nothing remembered matches."
    return "\n".join(
        f"- [{hit.memory.id}] ({hit.memory.type}{', shared' if hit.memory.shared else ''}) {hit.memory.content}"
        for hit in hits)


class MemoryRecall(Tool):
    name = "memory_recall"
    description = "Search your memories and the team's shared knowledge by meaning and words."

    class Parameters(Params):
        query: str = Field(min_length=1, max_length=2000, description="What you are looking for")
        k: int = Field(default=5, ge=1, le=50, description="How many memories")
        types: list[str] = Field(default_factory=list, description="Only these types: " + ", ".join(MEMORY_TYPES))
        tags: list[str] = Field(default_factory=list, description="Only memories with any of these tags")

    async def run(self, args: Parameters, ctx: ToolContext) -> str:
        search = require_service(ctx, "memory_search", self.name)
        return format_hits(await search(query=args.query, k=args.k, types=args.types or None, tags=args.tags or None,
                                        shared_only=False))
