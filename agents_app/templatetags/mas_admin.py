"""Template tags of the admin: the team dashboard on the index page."""

from __future__ import annotations

from django import template
from django.middleware.csrf import get_token

from mas_core.admin_base import team_ids, teams_with
from agents_app.dashboard import dashboard_for

register = template.Library()


@register.inclusion_tag("admin/mas/dashboard.html", takes_context=True)
def mas_dashboard(context):
    """One dashboard per team the signed-in user may view (their teams; every team for a superuser)."""
    request = context["request"]
    teams = list(teams_with(request, "view").order_by("slug"))
    boards = dashboard_for(teams=teams, run_team_ids=team_ids(request, "run"))
    # The Needs you block's buttons post to the API with the session: they send this token (as a form would).
    return {"request": request, "boards": boards, "several": len(teams) > 1,
            "mas_csrf": get_token(request) if any(board.can_run for board in boards) else ""}
