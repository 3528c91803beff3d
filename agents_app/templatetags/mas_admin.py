"""Template tags of the admin: the team dashboard on the index page."""

from __future__ import annotations

from django import template

from mas_core.admin_base import teams_with
from agents_app.dashboard import dashboard_for

register = template.Library()


@register.inclusion_tag("admin/mas/dashboard.html", takes_context=True)
def mas_dashboard(context):
    """One dashboard per team the signed-in user may view (their teams; every team for a superuser)."""
    request = context["request"]
    teams = list(teams_with(request, "view").order_by("slug"))
    return {"request": request, "boards": dashboard_for(teams=teams), "several": len(teams) > 1}
