"""The live monitor's pages: a team's runs and one run, fed by the websockets of ``consumers``.

Thin views over the same services and selectors as the API: a page shows
the runs of the signed-in user's team (``?team=<slug>`` when they are in
several), paged and filtered; operators may start (``views_start``), cancel,
archive and delete runs. A run's workspace files are served as plain text (viewed or downloaded),
never as HTML.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import content_disposition_header, url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from agents_app.api_runs import run_detail_out, run_out
from agents_app.execution.hooks import RUN_HOOKS
from agents_app.execution.housekeeping import RunBusy, run_archive, run_delete
from agents_app.execution.runs import run_cancel
from agents_app.models import Run, Team
from agents_app.models.runs import FINISHED_RUN_STATUSES, RunStatus
from mas_core.permissions import Actor, memberships
from agents_app.views_forks import fork_context
from agents_app.views_start import start_form
from agents_app.selectors_runs import (
    SEARCH_MAX_CHARS,
    TRIGGERS,
    file_size,
    run_detail,
    run_file_get,
    run_files,
    run_filter,
    run_get,
)

RUNS_PER_PAGE = 25


def _actors(user) -> list[Actor]:
    if user.is_superuser:
        return [Actor(user=user, team=team, role="admin") for team in Team.objects.order_by("slug")]
    return [Actor(user=user, team=m.team, role=m.role) for m in sorted(memberships(user), key=lambda m: m.team.slug)]


def monitor_actor(request: HttpRequest, *, team_slug: str = "") -> Actor:
    """The signed-in user in the team of ``?team=<slug>`` (their first team by slug without one); 404 for a team
    they are not in."""
    actors = _actors(request.user)
    slug = team_slug or request.GET.get("team", "")
    if slug:
        actors = [actor for actor in actors if actor.team.slug == slug]
    if not actors:
        raise Http404("no such team")
    return actors[0]


def _run_actor(request: HttpRequest, run_id: str, read=run_get):
    """The run, if it belongs to one of the user's teams (404 otherwise: no probing of other teams), as ``read``
    reads it (:func:`run_get`: the Run; :func:`run_detail`: its RunDetail)."""
    for actor in _actors(request.user):
        try:
            return actor, read(team=actor.team, run_id=run_id)
        except Http404:
            continue
    raise Http404("no such run")


HOME_RUNS = 5


def home_page(request: HttpRequest) -> HttpResponse:
    """The landing page: where everything is, and for a signed-in member the latest runs of their teams."""
    recent = []
    if request.user.is_authenticated:
        for actor in _actors(request.user)[:5]:
            runs = run_filter(team=actor.team, archived="exclude")[:HOME_RUNS]
            recent.append({"team": actor.team, "runs": [run_out(run) for run in runs]})
    return render(request, "home.html", {"recent": recent})


class RunFilterForm(forms.Form):
    """The runs list's filters, from the query string; every field may be left empty."""

    status = forms.ChoiceField(required=False, choices=[("", "any status"), *RunStatus.choices])
    agent = forms.CharField(required=False, max_length=100)
    workflow = forms.CharField(required=False, max_length=100)
    trigger = forms.ChoiceField(required=False, choices=[("", "any trigger"), *((t, t) for t in TRIGGERS)])
    created_from = forms.DateField(required=False, label="From")
    created_to = forms.DateField(required=False, label="To")
    q = forms.CharField(required=False, max_length=SEARCH_MAX_CHARS, label="Search")
    archived = forms.ChoiceField(required=False, choices=[("exclude", "not archived"), ("only", "archived only"),
                                                          ("include", "archived too")])
    page = forms.IntegerField(required=False, min_value=1, max_value=1_000_000)

    def clean(self):
        data = super().clean()
        start, end = data.get("created_from"), data.get("created_to")
        if start and end and start > end:
            self.add_error("created_to", "The last day comes before the first.")
        return data


@login_required
@require_GET
def runs_page(request: HttpRequest) -> HttpResponse:
    """The team's runs, filtered and paged; the start form on top (it posts to ``views_start.start_page``)."""
    actor = monitor_actor(request)
    # Taken before the list is read: the page's socket asks for every change since (see consumers).
    since = timezone.now().timestamp()
    form = RunFilterForm(request.GET)
    valid = form.is_valid()
    page = None
    if valid:
        data = form.cleaned_data
        runs = run_filter(team=actor.team, status=data["status"] or None, agent=data["agent"] or None,
                          workflow=data["workflow"] or None, search=data["q"], created_from=data["created_from"],
                          created_to=data["created_to"], archived=data["archived"] or "exclude",
                          trigger=data["trigger"] or None)
        page = Paginator(runs, RUNS_PER_PAGE).get_page(data.get("page") or 1)
    runs = [run_out(run) for run in page] if page else []
    # The query string without the page, for the page links; the team stays chosen.
    kept = {key: value for key, value in request.GET.items() if key != "page" and value}
    filtered = any(key not in {"team", "archived"} for key in kept) or kept.get("archived", "exclude") != "exclude"
    team_runs = Run.objects.filter(team=actor.team)
    return render(request, "monitor/runs.html", {
        "actor": actor, "teams": [a.team for a in _actors(request.user)], "runs": runs, "since": since,
        "run_agents": _slugs(team_runs.exclude(agent=""), "agent"),
        "run_workflows": _slugs(team_runs.exclude(workflow=""), "workflow"),
        "can_run": actor.can("run"), "form": form, "page": page, "query": urlencode(kept),
        # New runs appear live only where they belong: the first page of an unfiltered list.
        "live_new": page is not None and page.number == 1 and not filtered,
        "filtered": filtered, "next": request.get_full_path(), "time_zone": timezone.get_current_timezone_name(),
        **(start_form(actor) if actor.can("run") else {}),
    }, status=200 if valid else 400)


FILTER_CHOICES_MAX = 500


def _slugs(runs, field: str) -> list[str]:
    """The agents (or workflows) the team's runs name, for the filters' choices."""
    return list(runs.order_by(field).values_list(field, flat=True).distinct()[:FILTER_CHOICES_MAX])


@login_required
def run_page(request: HttpRequest, run_id: str) -> HttpResponse:
    actor, found = _run_actor(request, run_id, read=run_detail)
    run, detail = found.run, run_detail_out(found)
    files = [{"path": file.path, "size": file_size(file), "version": file.version, "author": file.author}
             for file in run_files(run=run)]
    return render(request, "monitor/run.html", {
        "actor": actor, "run": detail, "can_cancel": actor.can("run") and run.status in {"queued", "running", "waiting"},
        "workflow": RUN_HOOKS.run_graph(run), "files": files, "can_run": actor.can("run"), "can_decide": actor.can("run"),
        # "Save as eval case" (POST /api/runs/<id>/eval-case): editors, once the run has finished.
        "can_save_case": actor.can("edit"), "finished": run.status in FINISHED_RUN_STATUSES,
        "clock": {"started_at": run.started_at.isoformat() if run.started_at else None,
                  "finished_at": run.finished_at.isoformat() if run.finished_at else None,
                  "duration_s": detail["totals"]["duration_s"]},
        **fork_context(actor, run),
    })


@login_required
@require_POST
def run_cancel_view(request: HttpRequest, run_id: str) -> HttpResponse:
    actor, run = _run_actor(request, run_id)
    if not actor.can("run"):
        raise Http404("no such page")
    run_cancel(run=run, user=request.user)
    return redirect("monitor-run", run_id=run.id)


def _back(request: HttpRequest, actor: Actor, *, gone: str = "") -> HttpResponse:
    """To the page the form came from (``next``: a runs page of this site), else the team's list."""
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=False) \
            or not target.startswith("/runs/") or (gone and target.startswith(f"/runs/{gone}/")):
        target = f"{reverse('monitor-runs')}?{urlencode({'team': actor.team.slug})}"
    return redirect(target)


@login_required
@require_POST
def run_archive_view(request: HttpRequest, run_id: str) -> HttpResponse:
    """Archive a run (``archived=0`` brings it back); operators and admins."""
    actor, run = _run_actor(request, run_id)
    if not actor.can("run"):
        raise Http404("no such page")
    archived = request.POST.get("archived", "1") != "0"
    run_archive(run=run, archived=archived)
    messages.success(request, f"Archived run {run.id}." if archived else f"Run {run.id} is back in the list.")
    return _back(request, actor)


@login_required
@require_POST
def run_delete_view(request: HttpRequest, run_id: str) -> HttpResponse:
    """Delete a finished run with its events and files; operators and admins."""
    actor, run = _run_actor(request, run_id)
    if not actor.can("run"):
        raise Http404("no such page")
    try:
        deleted = run_delete(run=run, user=request.user)
    except RunBusy as error:
        messages.error(request, str(error))
        return _back(request, actor)
    messages.success(request, f"Deleted run {deleted.run_id} with {deleted.events} events and {deleted.files} files.")
    return _back(request, actor, gone=deleted.run_id)  # the run's own page is gone


@login_required
@require_GET
def run_file_view(request: HttpRequest, run_id: str, path: str) -> HttpResponse:
    """One workspace file as plain text (``?download=1``: as an attachment); 404 outside the user's teams."""
    _, run = _run_actor(request, run_id)
    file = run_file_get(run=run, path=path)
    response = HttpResponse(file.content, content_type="text/plain; charset=utf-8")
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["Content-Disposition"] = content_disposition_header(
        bool(request.GET.get("download")), file.path.rsplit("/", 1)[-1] or "file.txt")
    return response


