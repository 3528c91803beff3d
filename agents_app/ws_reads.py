"""What the monitor's sockets read from the database: who is asking, a run's events, the team's runs.

Small sync functions, run in a thread (``database_sync_to_async``) by
``agents_app.consumers`` and ``agents_app.ws_rooms`` (through :func:`db_read`), which call them through
this module so a test can stand in for one read.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from channels.db import database_sync_to_async

SINCE_LIMIT = 100  # runs sent on connect to /ws/runs/?since=


def db_read(function):
    """``function`` run in a thread of the loop's pool, not in the one thread every thread-sensitive call of
    the process shares: fifty sockets joining at once read side by side instead of queueing behind each
    other while their live events wait. Each read holds a database connection only while it runs: it goes
    back to the web process's pool (``MAS_DB_POOL_MAX``), or is closed where there is no pool, rather than
    staying open in a pool thread."""

    def read(*args):
        from django.db import connection

        try:
            return function(*args)
        finally:
            connection.close()

    return database_sync_to_async(read, thread_sensitive=False)


def _bearer(scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def _team_ids(scope) -> tuple[list[int], tuple[int, str] | None]:
    """The teams the connection may see — the bearer token's team, or the session user's — or the close
    code and reason that refuse it.

    A session counts only from one of our own pages (``ws_security.origin_allowed``). A wrong token is a
    failed token authentication of the socket's address, counted with those over HTTP: past the limit
    the socket is closed 4429 (the reason says how long to wait) instead of 4401. A right token is never
    refused for its address's failures.
    """
    from agents_app.models import Team
    from mas_core import ratelimit
    from mas_core.permissions import memberships
    from mas_core.teams import api_token_authenticate
    from mas_core.ws_security import client_address, origin_allowed

    token = _bearer(scope)
    if token is not None:
        row = api_token_authenticate(token)
        if row is not None:
            return [row.team_id], None
        wait = ratelimit.token_failure(client_address(scope))
        if wait is None:
            return [], (4401, "")
        return [], (4429, f"too many failed token authentications from your address; retry in {wait} s")
    user = scope.get("user")
    if user is None or not user.is_authenticated or not origin_allowed(scope):
        return [], (4401, "")
    if user.is_superuser:
        return list(Team.objects.values_list("id", flat=True)), None
    return [membership.team_id for membership in memberships(user)], None


def _access_holds(scope, team_id: int) -> bool:
    """Whether what let the socket in still lets it see ``team_id``: the bearer token is not revoked and its
    member still holds at least its role there; the session user is still active, still signed in with this
    session and still a member (a superuser: still one). Counts no failed authentication: the socket was
    authenticated once, this only asks whether that still stands.
    """
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from mas_core.models import Membership
    from mas_core.teams import api_token_authenticate

    token = _bearer(scope)
    if token is not None:
        row = api_token_authenticate(token)
        return row is not None and row.team_id == team_id
    user, session = scope.get("user"), scope.get("session")
    if user is None or not user.is_authenticated:
        return False
    if session is None or not session.session_key:
        return False
    if not settings.SESSION_ENGINE.endswith("signed_cookies") and not session.exists(session.session_key):
        return False  # signed out (or the session was flushed) since; a signed cookie has no server side
    current = get_user_model().objects.filter(pk=user.pk, is_active=True).values_list("is_superuser", flat=True)
    if not current:
        return False
    return current[0] or Membership.objects.filter(user_id=user.pk, team_id=team_id).exists()


def _access_holds_all(checks: dict[tuple, tuple[Any, int]]) -> dict[tuple, bool]:
    """:func:`_access_holds` of each ``key: (scope, team_id)``, in one thread hop for all of a process's
    sockets (``consumers.AccessChecks``)."""
    return {key: _access_holds(scope, team_id) for key, (scope, team_id) in checks.items()}


def _run_team(run_id: str, team_ids: list[int]) -> tuple[int, int] | None:
    """The run's team and its last event's seq, if the run is in one of ``team_ids``."""
    from agents_app.models import Run

    try:
        return Run.objects.filter(pk=run_id, team_id__in=team_ids).values_list("team_id", "next_seq").first()
    except Exception:  # not a UUID
        return None


def _events_after(run_id: str, after: int, limit: int, before: int | None = None) -> list[dict[str, Any]]:
    from mas_core.events import events_after

    return events_after(run_id=run_id, after=after, limit=limit, before=before)


def _run_summary(run_id: str, team_id: int) -> dict[str, Any] | None:
    from agents_app.api_runs import run_out
    from agents_app.models import Run
    from agents_app.schemas_runs import RunOut

    run = Run.objects.filter(pk=run_id, team_id=team_id).select_related("created_by").first()
    return RunOut.model_validate(run_out(run)).model_dump(mode="json") if run is not None else None


def _runs_since(team_id: int, since: datetime) -> list[dict[str, Any]]:
    """The team's runs still going, or created or finished since ``since`` (oldest first, at most SINCE_LIMIT)."""
    from django.db.models import Q

    from agents_app.api_runs import run_out
    from agents_app.models import Run
    from agents_app.schemas_runs import RunOut

    runs = (Run.objects.filter(team_id=team_id, is_eval=False)  # the cases of evals: on their eval's page
            .filter(Q(status__in=["queued", "running", "waiting"]) | Q(created_at__gte=since) | Q(finished_at__gte=since))
            .select_related("created_by").order_by("-created_at", "-pk")[:SINCE_LIMIT])
    return [RunOut.model_validate(run_out(run)).model_dump(mode="json") for run in reversed(list(runs))]


def _pick_team(team_ids: list[int], slug: str) -> int | None:
    from agents_app.models import Team

    if slug:
        return Team.objects.filter(id__in=team_ids, slug=slug).values_list("id", flat=True).first()
    return team_ids[0] if len(team_ids) == 1 else None
