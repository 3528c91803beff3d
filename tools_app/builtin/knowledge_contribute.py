"""knowledge_contribute: add to the team's shared knowledge; near-duplicates are not added twice."""

from __future__ import annotations

from pydantic import Field

from tools_app.builtin.memory_store import MEMORY_TYPES
from mas_core.errors import Refused
from tools_app.plugin import Params, Tool, ToolContext, ToolError
from tools_app.registry import require_service


class KnowledgeContribute(Tool):
    name = "knowledge_contribute"
    description = ("Add a finding to the team's shared knowledge base. If the team already knows nearly the same, "
                   "nothing is added and the reply names the existing entry.")

    class Parameters(Params):
        content: str = Field(min_length=1, max_length=8000, description="The finding, self-contained")
        type: str = Field(default="fact", pattern="^(" + "|".join(MEMORY_TYPES) + ")$")
        tags: list[str] = Field(default_factory=list, max_length=20)

    async def run(self, args: Parameters, ctx: ToolContext) -> str:
        contribute = require_service(ctx, "knowledge_contribute", self.name)
        try:
            result = await contribute(content=args.content, type=args.type, tags=args.tags)
        except Refused as error:
            raise ToolError(str(error)) from None
        if result.added:
            return f"Added to the team's knowledge as memory {result.memory.id}."
        return (f"Not added: the team already knows this as memory {result.memory.id} "
                f"(similarity {result.similarity:.2f}): {result.memory.content[:300]}")
