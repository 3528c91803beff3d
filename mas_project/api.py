"""The REST API: one NinjaAPI, one router per app, errors mapped in one place.

Served at /api/ — OpenAPI at /api/openapi.json, interactive docs at /api/docs.
Every operation needs a bearer token or a session (see ``api_auth``) unless
it says otherwise, as the health check does.
"""

from django.http import HttpRequest
from ninja import NinjaAPI
from ninja.parser import Parser

from agents_app.api import router as agents_router
from agents_app.api_approvals import router as approvals_router
from agents_app.api_runs import router as runs_router
from agents_app.api_forks import router as forks_router
from evals_app.api import router as evals_router
from mas_core.api_auth import TEAM_HEADER, api_auth
from mas_core.api_errors import UnsupportedMediaType, load_json, register_error_handlers
from mas_project.api_docs import MasSwagger
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


class MasNinjaAPI(NinjaAPI):
    """The API whose schema names the team header on every operation a session may call.

    A session user in several teams picks the team with ``X-MAS-Team`` (see ``api_auth``); as a header
    parameter it is a field of "Try it out" in the docs, so the interactive docs work for them too.

    The session is not a documented security scheme: it is the browser's sign-in, which the docs page
    carries by itself (cookie and CSRF token, see ``api_docs``); as a scheme it only put a ``sessionid``
    field in "Authorize", asking people to paste a cookie. Bearer tokens are the documented way in.
    """

    def get_openapi_schema(self, *args, **kwargs):
        schema = super().get_openapi_schema(*args, **kwargs)
        for operations in schema["paths"].values():
            for operation in operations.values():
                if not isinstance(operation, dict) or not any(
                        SESSION_SCHEME in requirement for requirement in operation.get("security", [])):
                    continue
                operation["security"] = [requirement for requirement in operation["security"]
                                         if SESSION_SCHEME not in requirement]
                parameters = operation.setdefault("parameters", [])
                if not any(p.get("in") == "header" and p.get("name") == TEAM_HEADER for p in parameters):
                    parameters.append(dict(TEAM_HEADER_PARAMETER))
        schema.get("components", {}).get("securitySchemes", {}).pop(SESSION_SCHEME, None)
        return schema


SESSION_SCHEME = "SessionTeamAuth"
TEAM_HEADER_PARAMETER = {
    "in": "header",
    "name": TEAM_HEADER,
    "required": False,
    "schema": {"type": "string", "pattern": "^[-a-zA-Z0-9_]{1,64}$"},
    "description": (
        "Signed in with a session and a member of several teams: the slug of the team to act in. "
        "Ignored with a bearer token (the token names its team)."
    ),
}


api = MasNinjaAPI(
    title="MAS API",
    version="1.0.0",
    description=(
        "Define a team's agents, tools, MCP servers, workflows, skills and model providers; start and watch runs. "
        "Authenticate with a bearer token of a team (Authorize). A browser signed in to MAS is authenticated by "
        "its session as well: /api/docs sends its CSRF token, and a member of several teams names the team in "
        "the X-MAS-Team header (chosen at the top of /api/docs)."),
    auth=api_auth("view"),
    docs=MasSwagger(),
    parser=JsonParser(),
)
register_error_handlers(api)

api.add_router("/", health_router)
api.add_router("/", agents_router)
api.add_router("/", runs_router)
api.add_router("/", forks_router)
api.add_router("/", approvals_router)
api.add_router("/", tools_router)
api.add_router("/", workflows_router)
api.add_router("/", workflow_runs_router)
api.add_router("/", memory_router)
api.add_router("/", evals_router)
