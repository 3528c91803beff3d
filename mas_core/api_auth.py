"""Who is calling the API, and as which team: every endpoint gets an :class:`Actor`.

Two ways in, tried in order:

* ``Authorization: Bearer <token>`` — the token names its team and role.
* A Django session (browsers). The team is the user's only membership, or
  the one named by the ``X-MAS-Team: <slug>`` header; a team the user is not
  in is answered 404, so the header cannot probe which teams exist. CSRF is
  enforced for unsafe methods, as for any cookie-authenticated request.

Anything else is a 401 (a 429 once the address has sent too many wrong tokens,
see ``ratelimit``), and a role without the operation's capability a
403 — both before the request body is read.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.http import Http404, HttpRequest
from ninja.errors import HttpError
from ninja.security import APIKeyCookie, HttpBearer
from ninja.utils import check_csrf

from mas_core.models import Role, Team
from mas_core.permissions import Actor, memberships
from mas_core.teams import api_token_authenticate
from mas_core import ratelimit

TEAM_HEADER = "X-MAS-Team"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
# Schemes named in the log when a request uses one; any other first word is logged as "other" (a header
# without a scheme starts with its credential).
KNOWN_SCHEMES = frozenset({"basic", "digest", "token", "negotiate", "ntlm", "hoba", "mutual", "apikey", "oauth"})

logger = logging.getLogger(__name__)


class TokenAuth(HttpBearer):
    """``Authorization: Bearer mas_…``: the team and role come from the token."""

    def __init__(self, capability: str = "view") -> None:
        self.capability = capability
        super().__init__()

    def __call__(self, request: HttpRequest) -> Actor | None:
        # Not ninja's HttpBearer.__call__: with DEBUG on it logs a header of another scheme whole
        # ("Unexpected auth - 'Basic cGEt…'"), credential included. Here only the scheme's name is logged.
        value = request.headers.get(self.header) or ""
        if not value:
            return None
        scheme, _, token = value.partition(" ")
        if scheme.lower() != self.openapi_scheme:
            logger.info("authorization scheme not supported",
                        extra={"scheme": scheme.lower() if scheme.lower() in KNOWN_SCHEMES else "other"})
            return None
        return self.authenticate(request, token)

    def authenticate(self, request: HttpRequest, token: str) -> Actor | None:
        # The token is checked before the address's failure count: a valid one always works (see ratelimit).
        row = api_token_authenticate(token.strip())
        if row is None:
            ratelimit.auth_failure(request)
            return None
        request.mas_auth_method = "token"
        return permit(Actor(user=row.user, team=row.team, role=row.role), self.capability)


class SessionTeamAuth(APIKeyCookie):
    """A logged-in browser session acting in one of the user's teams."""

    param_name = settings.SESSION_COOKIE_NAME

    def __init__(self, capability: str = "view") -> None:
        self.capability = capability
        # CSRF is checked in authenticate(), only once a session user is
        # known: an anonymous request must get 401, not a CSRF 403.
        super().__init__(csrf=False)

    def authenticate(self, request: HttpRequest, key: str | None) -> Actor | None:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None
        if request.method not in SAFE_METHODS and check_csrf(request) is not None:
            raise HttpError(403, "CSRF check failed: send the csrftoken cookie's value in X-CSRFToken")
        actor = session_actor(user=user, team_slug=request.headers.get(TEAM_HEADER, "").strip())
        request.mas_auth_method = "session"
        return permit(actor, self.capability)


def session_actor(*, user, team_slug: str) -> Actor:
    """The actor of a session user: their only team, or the one named in ``X-MAS-Team``."""
    if team_slug:
        if user.is_superuser:
            # Superusers see every team in the admin; the API agrees.
            team = Team.objects.filter(slug=team_slug).first()
            if team is not None:
                return Actor(user=user, team=team, role=Role.ADMIN)
        for membership in memberships(user):
            if membership.team.slug == team_slug:
                return Actor(user=user, team=membership.team, role=membership.role)
        raise Http404(f"no team {team_slug!r}")
    found = memberships(user)
    if len(found) == 1:
        return Actor(user=user, team=found[0].team, role=found[0].role)
    if not found:
        raise HttpError(403, "you are not a member of any team")
    slugs = ", ".join(sorted(m.team.slug for m in found))
    raise HttpError(400, f"you are in several teams ({slugs}): name one in the {TEAM_HEADER} header")


def permit(actor: Actor, capability: str) -> Actor:
    """``actor`` if its role grants ``capability`` (view | edit | run | manage); else 403."""
    if not actor.can(capability):
        raise HttpError(403, f"role {actor.role} in team {actor.team.slug} does not allow {capability}")
    return actor


def api_auth(capability: str = "view") -> list:
    """The authenticators of an operation that needs ``capability``; tried in order."""
    return [TokenAuth(capability), SessionTeamAuth(capability)]
