"""web_search: search the web through the backend configured in settings."""

from __future__ import annotations

from pydantic import Field

from tools_app.plugin import Params, Tool, ToolContext, ToolError
from tools_app.web.search import SearchError, web_search


class WebSearch(Tool):
    name = "web_search"
    description = "Search the web; returns a list of {title, url, snippet}."

    class Parameters(Params):
        query: str = Field(min_length=1, max_length=500)
        max_results: int = Field(default=5, ge=1, le=20)

    async def run(self, args: Parameters, ctx: ToolContext) -> list[dict[str, str]]:
        try:
            return await web_search(query=args.query, max_results=args.max_results)
        except SearchError as exc:
            raise ToolError(str(exc)) from None
