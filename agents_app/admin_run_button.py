"""*Run…* on the admin's pages of what runs (agents, workflows): a button on the definition's page and a column
in its list, both to the monitor's start form with it chosen (``/runs/start/?team=…&agent=…``). Shown to whom
the definition's team lets run (the role's ``run``); the form checks again when it starts."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from mas_core.admin_base import team_ids


def run_url(*, kind: str, team_slug: str, slug: str) -> str:
    """The monitor's start form with the ``kind`` (agent | workflow) ``slug`` of team ``team_slug`` chosen."""
    return f"{reverse('monitor-start')}?{urlencode({'team': team_slug, kind: slug})}"


class RunButtonAdmin:
    """Mixed into the ModelAdmin of a definition kind that runs; ``run_kind`` names it in the start form."""

    run_kind = "agent"

    def may_run(self, request: HttpRequest, team_id: int) -> bool:
        ids = team_ids(request, "run")
        return ids is None or team_id in ids

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None and obj.pk and self.may_run(request, obj.team_id):
            context["mas_run_url"] = run_url(kind=self.run_kind, team_slug=obj.team.slug, slug=obj.slug)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def get_list_display(self, request):
        shown = super().get_list_display(request)
        ids = team_ids(request, "run")
        if ids is not None and not ids:
            return shown  # runs in none of the user's teams: no column

        @admin.display(description="Run")
        def run_link(obj):
            if not self.may_run(request, obj.team_id):
                return "—"
            return format_html('<a class="mas-run-link" href="{}">Run…</a>',
                               run_url(kind=self.run_kind, team_slug=obj.team.slug, slug=obj.slug))

        return (*shown, run_link)
