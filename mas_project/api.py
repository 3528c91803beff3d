"""The REST API: one NinjaAPI, one router per app, errors mapped in one place.

Served at /api/ — OpenAPI at /api/openapi.json, interactive docs at /api/docs.
Every operation needs a bearer token or a session (see ``api_auth``) unless
it says otherwise, as the health check does.
"""

from django.http import HttpRequest
from ninja import NinjaAPI
from ninja.parser import Parser

from agents_app.api import router as agents_router
from agents_app.api_runs import router as runs_router
from evals_app.api import router as evals_router
from mas_project.api_auth import api_auth
from mas_project.api_errors import UnsupportedMediaType, load_json, register_error_handlers
from mas_project.health import router as health_router
from memory_app.api import router as memory_router
from tools_app.api import router as tools_router
from workflows_app.api import router as workflows_router
from workflows_app.api_runs import router as workflow_runs_router


class JsonParser(Parser):
    """JSON bodies only: a form post or plain text is a 415, not a guess."""

    def parse_body(self, request: HttpRequest):
        content_type = request.content_type or ""
        if content_type and content_type != "application/json" and not content_type.endswith("+json"):
            raise UnsupportedMediaType(f"send JSON with Content-Type: application/json, not {content_type!r}")
        return load_json(request.body)


api = NinjaAPI(
    title="MAS API",
    version="1.0.0",
    description="Define a team's agents, tools, MCP servers, workflows, skills and model providers.",
    auth=api_auth("view"),
    parser=JsonParser(),
)
register_error_handlers(api)

api.add_router("/", health_router)
api.add_router("/", agents_router)
api.add_router("/", runs_router)
api.add_router("/", tools_router)
api.add_router("/", workflows_router)
api.add_router("/", workflow_runs_router)
api.add_router("/", memory_router)
api.add_router("/", evals_router)
