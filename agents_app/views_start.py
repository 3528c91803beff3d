"""The monitor's start form: run an agent on a task, or a workflow with the inputs it declares.

One form, on its own page (``/runs/start/``, where the admin's *Run…*
buttons lead with the agent or workflow chosen: ``?agent=<slug>`` or
``?workflow=<slug>``) and at the top of the runs page. It posts here; the
start is :func:`agents_app.starts.run_start_as` (the role, the team's rate
limit, the team's own definitions — as the API), and the run's live monitor
opens. A refusal shows the form again with the reason and what was typed.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from agents_app.execution.errors import RunError
from agents_app.starts import StartChoice, run_start_as, start_choices
from mas_core import ratelimit
from mas_core.permissions import Actor

INPUT_PREFIX = "wf:"  # a workflow input's field: wf:<workflow slug>:<input name>


def start_form(actor: Actor, *, chosen: str = "", task: str = "", posted: dict[str, str] | None = None,
               error: str = "") -> dict[str, Any]:
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
                      "chosen": chosen, "kind": chosen.partition(":")[0], "task": task, "error": error}}


def input_field(choice: StartChoice, name: str) -> str:
    return f"{INPUT_PREFIX}{choice.slug}:{name}"


def posted_inputs(post, choice_value: str) -> dict[str, str]:
    """The chosen workflow's inputs as posted; one left empty is missing (the start says which)."""
    prefix = f"{INPUT_PREFIX}{choice_value.partition(':')[2]}:"
    return {key[len(prefix):]: value for key, value in post.items() if key.startswith(prefix) and value.strip()}


@login_required
@require_http_methods(["GET", "POST"])
def start_page(request: HttpRequest) -> HttpResponse:
    from agents_app.views import monitor_actor  # views imports this module (the runs page shows the form)

    actor = monitor_actor(request)
    if not actor.can("run"):
        raise Http404("no such page")  # viewers and editors never see the form
    if request.method != "POST":
        agent, workflow = request.GET.get("agent", ""), request.GET.get("workflow", "")
        chosen = f"workflow:{workflow}" if workflow else f"agent:{agent}" if agent else ""
        context = start_form(actor, chosen=chosen)
        if chosen and context["start"]["chosen"] != chosen:
            context["start"]["error"] = (f"No {'workflow' if workflow else 'agent'} {workflow or agent!r} in team "
                                         f"{actor.team.slug}: choose one of the list.")
        return render(request, "monitor/start.html", {"actor": actor, **context})
    chosen, task = request.POST.get("target", ""), request.POST.get("input", "")
    try:
        run = run_start_as(actor=actor, choice=chosen, task=task, inputs=posted_inputs(request.POST, chosen))
    except (RunError, ratelimit.RateLimited) as refusal:
        status = 429 if isinstance(refusal, ratelimit.RateLimited) else 400
        context = start_form(actor, chosen=chosen, task=task, posted=dict(request.POST.items()),
                             error=str(refusal))
        return render(request, "monitor/start.html", {"actor": actor, **context}, status=status)
    messages.success(request, f"Started run {run.id} of {run.workflow or run.agent}.")
    return redirect("monitor-run", run_id=run.id)
