"""memory_store: remember something for later runs (the agent's own, or shared with the team)."""

from __future__ import annotations

from pydantic import Field

from mas_core.errors import Refused
from tools_app.plugin import Params, Tool, ToolContext, ToolError
from tools_app.registry import require_service

MEMORY_TYPES = ("skill", "fact", "procedure", "observation", "mistake", "preference")


class MemoryStore(Tool):
    name = "memory_store"
    description = ("Remember something for later runs: a fact, a procedure that worked, a mistake to avoid. "
                   "Private to you unless shared.")

    class Parameters(Params):
        content: str = Field(min_length=1, max_length=8000, description="What to remember, self-contained")
        type: str = Field(default="fact", pattern="^(" + "|".join(MEMORY_TYPES) + ")$",
                          description="skill | fact | procedure | observation | mistake | preference")
        tags: list[str] = Field(default_factory=list, max_length=20, description="Short labels to filter by")
        shared: bool = Field(default=False, description="Let the team's other agents find it too")

    async def run(self, args: Parameters, ctx: ToolContext) -> str:
        store = require_service(ctx, "memory_store", self.name)
        try:
            memory = await store(content=args.content, type=args.type, tags=args.tags, shared=args.shared)
        except Refused as error:
            raise ToolError(str(error)) from None
        return f"Remembered as memory {memory.id}{' (shared with the team)' if memory.shared else ''}."
