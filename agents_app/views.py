"""The live monitor's pages: a team's runs and one run, fed by the websockets of ``consumers``.

Thin views over the same services and selectors as the API: a page shows
the runs of the signed-in user's team (``?team=<slug>`` when they are in
several); operators may start and cancel runs.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from agents_app.api_runs import run_out
from agents_app.execution.services import RunError, run_cancel, run_start
from agents_app.models import Agent, Run, Team
from agents_app.permissions import Actor, memberships
from agents_app.selectors_runs import run_get, run_list


def _actors(user) -> list[Actor]:
    if user.is_superuser:
        return [Actor(user=user, team=team, role="admin") for team in Team.objects.order_by("slug")]
    return [Actor(user=user, team=m.team, role=m.role) for m in sorted(memberships(user), key=lambda m: m.team.slug)]


def _actor(request: HttpRequest, *, team_slug: str = "") -> Actor:
    actors = _actors(request.user)
    slug = team_slug or request.GET.get("team", "")
    if slug:
        actors = [actor for actor in actors if actor.team.slug == slug]
    if not actors:
        raise Http404("no such team")
    return actors[0]


def _run_actor(request: HttpRequest, run_id: str) -> tuple[Actor, Run]:
    """The run, if it belongs to one of the user's teams (404 otherwise: no probing of other teams)."""
    for actor in _actors(request.user):
        try:
            return actor, run_get(team=actor.team, run_id=run_id)
        except Http404:
            continue
    raise Http404("no such run")


@login_required
def runs_page(request: HttpRequest) -> HttpResponse:
    actor = _actor(request)
    if request.method == "POST":
        if not actor.can("run"):
            raise Http404("no such page")  # viewers and editors never see the form
        agent, task = request.POST.get("agent", "").strip(), request.POST.get("input", "").strip()
        if not agent or not task:
            messages.error(request, "Choose an agent and write its task.")
        else:
            try:
                run = run_start(team=actor.team, agent=agent, input=task, user=request.user)
            except RunError as error:
                messages.error(request, str(error))
            else:
                return redirect("monitor-run", run_id=run.id)
    # Taken before the list is read: the page's socket asks for every change since (see consumers).
    since = timezone.now().timestamp()
    runs = [run_out(run) for run in run_list(team=actor.team, limit=100)]
    return render(request, "monitor/runs.html", {
        "actor": actor, "teams": [a.team for a in _actors(request.user)], "runs": runs, "since": since,
        "agents": list(Agent.objects.filter(team=actor.team).order_by("slug").values_list("slug", "name")),
        "can_run": actor.can("run"),
    })


@login_required
def run_page(request: HttpRequest, run_id: str) -> HttpResponse:
    actor, run = _run_actor(request, run_id)
    detail = run_out(run, detail=True)
    return render(request, "monitor/run.html", {
        "actor": actor, "run": detail, "can_cancel": actor.can("run") and run.status in {"queued", "running", "waiting"},
        "workflow": _workflow_graph(run), "can_decide": actor.can("run"),
    })


@login_required
@require_POST
def run_cancel_view(request: HttpRequest, run_id: str) -> HttpResponse:
    actor, run = _run_actor(request, run_id)
    if not actor.can("run"):
        raise Http404("no such page")
    run_cancel(run=run, user=request.user)
    return redirect("monitor-run", run_id=run.id)


def _workflow_graph(run: Run) -> dict | None:
    """The steps and dependencies the run executes (for its DAG), when it is a workflow's or a planner's.

    The run's own copy of its steps when it has one (a plan, or the workflow as it was when the run
    started), else the team's workflow of that slug.
    """
    from workflows_app.models import Workflow, WorkflowRun

    flow = WorkflowRun.objects.filter(run_id=run.id).select_related("workflow").first()
    row = flow.workflow if flow else Workflow.objects.filter(team_id=run.team_id, slug=run.workflow).first()
    if flow is None and (row is None or not run.workflow):
        return None
    spec = flow.spec if flow else row.spec
    name = row.spec.get("name", run.workflow) if row else f"plan by {run.agent}"
    return {"name": name,
            "steps": [{"id": s["id"], "agent": s.get("agent", ""), "depends_on": s.get("depends_on", [])}
                      for s in spec.get("steps", [])],
            "loops": [{"steps": loop["steps"], "until": loop.get("until"), "max_rounds": loop["max_rounds"]}
                      for loop in spec.get("loops", [])]}
