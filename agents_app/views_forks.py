"""The monitor's side of forks: a run's lineage, and "Fork from here" on the events of a run.

The form posts to :func:`run_fork_view`, which calls the same service as
``POST /api/runs/{id}/fork`` and opens the fork's monitor; a refusal comes
back as a message on the run's page.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from agents_app.execution.forks import TOOL_RESULT_MAX_CHARS, run_fork
from agents_app.execution.errors import RunError
from agents_app.models import Run
from mas_core.permissions import Actor
from mas_core import ratelimit

SEQ_MAX_DIGITS = 19


def fork_context(actor: Actor, run: Run) -> dict[str, Any]:
    """What the run's page shows of its lineage, and whether it offers "Fork from here"."""
    parent = None
    if run.forked_from_id:
        parent = Run.objects.filter(team=actor.team, pk=run.forked_from_id).values("id", "agent").first()
    return {"fork_parent": parent, "fork_max_chars": TOOL_RESULT_MAX_CHARS,
            # On every event, of a finished run or of one still going (its committed history is forked).
            "can_fork": actor.can("run")}


@login_required
@require_POST
def run_fork_view(request: HttpRequest, run_id: str) -> HttpResponse:
    """Start a fork of the run from the event ``seq`` (with ``tool_result`` when ``edit`` is ticked)."""
    from agents_app.views import _run_actor

    actor, run = _run_actor(request, run_id)
    if not actor.can("run"):
        raise Http404("no such page")
    seq_text = request.POST.get("seq", "")
    if not seq_text.isdigit() or len(seq_text) > SEQ_MAX_DIGITS:
        messages.error(request, "Fork: choose an event to fork from.")
        return redirect("monitor-run", run_id=run.id)
    tool_result = request.POST.get("tool_result", "") if request.POST.get("edit") else None
    try:
        ratelimit.run_start_check(actor.team)
        fork = run_fork(run=run, seq=int(seq_text), user=request.user, tool_result=tool_result)
    except (RunError, ratelimit.RateLimited) as error:
        messages.error(request, f"Fork refused: {error}")
        return redirect("monitor-run", run_id=run.id)
    messages.success(request, f"Forked from event #{seq_text} of run {run.id}.")
    return redirect("monitor-run", run_id=fork.id)
