"""REST endpoints of agents, skills, model providers, guardrails, remote agents and the caller (``/api/me``).

The definition endpoints are the foundation's (``mas_core.api_definitions``), built here for this app's kinds.
"""

# No `from __future__ import annotations` here: ninja reads the endpoint annotations at import time.

from ninja import Router

from agents_app.kinds import AGENT, GUARDRAIL, PROVIDER, REMOTE_AGENT, SKILL
from mas_core.api_auth import api_auth
from mas_core.api_definitions import add_definition_routes
from mas_core.models import ROLE_CAPABILITIES
from mas_core.permissions import Actor
from mas_core.schemas import MeOut, error_responses

router = Router()


@router.get(
    "/me",
    response={200: MeOut, **error_responses(400, 401, 403, 404)},
    auth=api_auth("view"),
    tags=["me"],
    operation_id="me",
    summary="Who am I, in which team, with which role",
)
def me(request):
    actor: Actor = request.auth
    return {
        "user": {"id": actor.user.pk, "username": actor.user.get_username()},
        "team": {"slug": actor.team.slug, "name": actor.team.name},
        "role": actor.role,
        "capabilities": sorted(ROLE_CAPABILITIES[actor.role]),
        "can_manage_stdio": actor.can_manage_stdio,
        "auth": getattr(request, "mas_auth_method", "token"),
    }


add_definition_routes(router, kind=AGENT, plural="agents")
add_definition_routes(router, kind=SKILL, plural="skills")
add_definition_routes(router, kind=PROVIDER, plural="providers")
add_definition_routes(router, kind=GUARDRAIL, plural="guardrails")
add_definition_routes(router, kind=REMOTE_AGENT, plural="remote-agents")
