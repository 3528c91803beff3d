"""skill_load: a skill's rules and reference files, the ones most relevant to a query first."""

from __future__ import annotations

from pydantic import Field

from tools_app.plugin import Params, Tool, ToolContext
from tools_app.registry import require_service


class SkillLoad(Tool):
    name = "skill_load"
    description = ("Read one of your skills in full: its rules and its reference files, the ones most relevant "
                   "to the query first.")

    class Parameters(Params):
        name: str = Field(min_length=1, max_length=100, description="The skill's name")
        query: str = Field(default="", max_length=500, description="What you need from it (orders the references)")

    async def run(self, args: Parameters, ctx: ToolContext) -> str:
        load = require_service(ctx, "skill_load", self.name)
        return await load(name=args.name, query=args.query)
