import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mas_project.settings")
os.environ.setdefault("MAS_DB_POOL", "1")  # see DATABASES in settings: bounded connections under load
django.setup(set_prefix=False)

from mas_project.request_gate import GatedASGIHandler  # noqa: E402

django_asgi_app = GatedASGIHandler()  # Django's, a few requests at a time (see request_gate)

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path, re_path  # noqa: E402

from agents_app.consumers import NoSuchSocketConsumer, RunEventsConsumer, TeamRunsConsumer  # noqa: E402
from agents_app.doors import a2a_door, agui, mcp_door, openai_compat  # noqa: E402
from mas_core.lanes import lane  # noqa: E402
from mas_core.webgate import caller_lane  # noqa: E402
from mas_project.http_limits import UrlLengthLimit, answer_overlong_lines, bodies_left_to_the_application  # noqa: E402
from mas_project.startup_gc import frozen_once_daphne_serves  # noqa: E402

answer_overlong_lines()
bodies_left_to_the_application()
frozen_once_daphne_serves()

# The live monitor (agents_app/consumers.py). Browsers authenticate with their
# session cookie (checked against the Origin header there), scripts with
# ``Authorization: Bearer <token>``.
websocket_urlpatterns = [
    path("ws/runs/", TeamRunsConsumer.as_asgi()),
    path("ws/runs/<str:run_id>/", RunEventsConsumer.as_asgi()),
    re_path(r"", NoSuchSocketConsumer.as_asgi()),  # anything else: 4404, not the router's exception
]


async def http_app(scope, receive, send):
    """The doors beside MAS's own API (``agents_app.doors``: ``/v1/``, the OpenAI-compatible endpoint; ``/mcp``,
    the MCP server; ``/ag-ui/``, runs as AG-UI events; ``/a2a/``, the A2A server), and Django for everything else."""
    lane.set(("web", caller_lane(scope)))  # its turn at the gate (webgate)
    path = scope["path"]
    if path == "/v1" or path.startswith("/v1/"):
        return await openai_compat.app(scope, receive, send)
    if path in ("/mcp", "/mcp/"):
        return await mcp_door.app(scope, receive, send)
    if path.startswith("/ag-ui/"):
        return await agui.app(scope, receive, send)
    if path.startswith("/a2a/"):
        return await a2a_door.app(scope, receive, send)
    return await django_asgi_app(scope, receive, send)


application = UrlLengthLimit(ProtocolTypeRouter({
    "http": http_app,
    "websocket": AuthMiddlewareStack(URLRouter(websocket_urlpatterns)),
}))
