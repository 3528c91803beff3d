"""The monitor's start form: run an agent on a task, or a workflow with the inputs it declares.

One form, on its own page (``/runs/start/``, where the admin's *Run…*
buttons lead with the agent or workflow chosen: ``?agent=<slug>`` or
``?workflow=<slug>``) and at the top of the runs page. It posts here; the
start is :func:`agents_app.starts.run_start_as` (the role, the team's rate
limit, the team's own definitions — as the API), and the run's live monitor
opens. A refusal shows the form again with the reason and what was typed.

An agent's run may be tried without a model: the form's "Try without a model"
fills a script (the agent's model turns) with the example of one of the
agent's tools, fetched from ``/runs/start/example/`` (:func:`start_example`).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from agents_app.execution.errors import RunError
from agents_app.starts import StartChoice, StartNotFound, StartRefused, run_start_as, start_choices, try_example
from mas_core import ratelimit
from mas_core.permissions import Actor

INPUT_PREFIX = "wf:"  # a workflow input's field: wf:<workflow slug>:<input name>


def start_form(actor: Actor, *, chosen: str = "", task: str = "", posted: dict[str, str] | None = None,
               error: str = "", script: str = "") -> dict[str, Any]:
    """The form's context: the team's agents and workflows, the one chosen, and what was typed."""
    choices = start_choices(team=actor.team)
    values = {choice.value for choice in choices}
    if chosen not in values:
        chosen = choices[0].value if choices else ""
    posted = posted or {}
    workflows = [{"choice": choice, "fields": [
        {"name": name, "field": input_field(choice, name), "value": posted.get(input_field(choice, name), "")}
        for name in choice.inputs]} for choice in choices if choice.kind == "workflow"]
    return {"start": {"agents": [choice for choice in choices if choice.kind == "agent"], "workflows": workflows,
                      "chosen": chosen, "kind": chosen.partition(":")[0], "task": task, "error": error,
                      "script": script}}


def input_field(choice: StartChoice, name: str) -> str:
    return f"{INPUT_PREFIX}{choice.slug}:{name}"


def posted_inputs(post, choice_value: str) -> dict[str, str]:
    """The chosen workflow's inputs as posted; one left empty is missing (the start says which)."""
    prefix = f"{INPUT_PREFIX}{choice_value.partition(':')[2]}:"
    return {key[len(prefix):]: value for key, value in post.items() if key.startswith(prefix) and value.strip()}


def _starter(request: HttpRequest) -> Actor:
    """The signed-in member who may start runs in the chosen team (404 for anyone else)."""
    from agents_app.views import monitor_actor  # views imports this module (the runs page shows the form)

    actor = monitor_actor(request)
    if not actor.can("run"):
        raise Http404("no such page")  # viewers and editors never see the form
    return actor


@login_required
@require_GET
def start_example(request: HttpRequest) -> JsonResponse:
    """``{"script", "task"}``: the example that shows ``?tool=`` as the team's agent ``?agent=``'s; 404 for
    an agent the team has not, 400 with the reason for a tool the agent cannot show."""
    actor = _starter(request)
    try:
        return JsonResponse(try_example(actor=actor, agent=request.GET.get("agent", ""),
                                        tool=request.GET.get("tool", "")))
    except StartRefused as refusal:
        status = 404 if isinstance(refusal, StartNotFound) else 400
        return JsonResponse({"detail": str(refusal)}, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def start_page(request: HttpRequest) -> HttpResponse:
    actor = _starter(request)
    if request.method != "POST":
        agent, workflow = request.GET.get("agent", ""), request.GET.get("workflow", "")
        chosen = f"workflow:{workflow}" if workflow else f"agent:{agent}" if agent else ""
        context = start_form(actor, chosen=chosen)
        if chosen and context["start"]["chosen"] != chosen:
            context["start"]["error"] = (f"No {'workflow' if workflow else 'agent'} {workflow or agent!r} in team "
                                         f"{actor.team.slug}: choose one of the list.")
        return render(request, "monitor/start.html", {"actor": actor, **context})
    chosen, task = request.POST.get("target", ""), request.POST.get("input", "")
    script = request.POST.get("script", "")
    try:
        run = run_start_as(actor=actor, choice=chosen, task=task, inputs=posted_inputs(request.POST, chosen),
                           script=script)
    except (RunError, ratelimit.RateLimited) as refusal:
        status = 429 if isinstance(refusal, ratelimit.RateLimited) else 400
        context = start_form(actor, chosen=chosen, task=task, posted=dict(request.POST.items()),
                             error=str(refusal), script=script)
        return render(request, "monitor/start.html", {"actor": actor, **context}, status=status)
    messages.success(request, f"Started run {run.id} of {run.workflow or run.agent}.")
    return redirect("monitor-run", run_id=run.id)
