"""The interactive API docs (/api/docs): django-ninja's Swagger UI, made to work for a signed-in browser.

* "Try it out" sends the CSRF token (``X-CSRFToken``) with every request the
  page makes to this server, so a POST with the page's session is not a 403.
  The API's own check is unchanged: any other cookie-authenticated request
  without the token is still refused (``mas_core.api_auth``).
* A member of several teams picks, at the top of the page, the team the page
  acts in (``X-MAS-Team``); the first of them is chosen to start with, and an
  operation's own ``X-MAS-Team`` field wins over it.
* The page fits a phone: a viewport meta tag, and a stylesheet that keeps
  wide blocks scrolling inside themselves (``mas_api/docs.css``).
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from ninja.openapi.docs import Swagger

from mas_core.models import Team
from mas_core.permissions import memberships

MAX_TEAMS = 200  # offered in the page's team choice (a superuser may act in any team)


def docs_teams(user) -> list[dict[str, str]]:
    """The teams a signed-in user may act in through the API's session auth, by slug."""
    if not getattr(user, "is_authenticated", False):
        return []
    if user.is_superuser:
        return [{"slug": slug, "name": name}
                for slug, name in Team.objects.order_by("slug").values_list("slug", "name")[:MAX_TEAMS]]
    return sorted(({"slug": m.team.slug, "name": m.team.name} for m in memberships(user)), key=lambda t: t["slug"])


class MasSwagger(Swagger):
    template = "api/docs.html"

    def render_page(self, request: HttpRequest, api: Any, **kwargs: Any) -> HttpResponse:
        settings = {**self.settings, "url": self.get_openapi_url(api, kwargs)}
        return render(request, self.template, {
            "swagger_settings": json.dumps(settings, indent=1),
            "api": api,
            "teams": docs_teams(request.user),
        })
