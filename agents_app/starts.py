"""Starting a run by hand: what a person may start, and the start itself, for the monitor's start form.

The form (``/runs/start/``, also on the runs page; the admin's *Run…* buttons
lead to it) starts an agent with its task or a workflow with the inputs it
declares. It goes the way of the API: the role must allow running, the start
counts against the team's rate limit, and only the team's own agent or
workflow is found — then ``run_start`` (as ``POST /api/runs``) or the
workflow app's start (as ``POST /api/workflows/{slug}/runs``, through the
run hook ``workflow_start``: this app knows no workflow).
"""

from __future__ import annotations

from dataclasses import dataclass

from agents_app.execution.errors import RunError
from agents_app.execution.hooks import RUN_HOOKS
from agents_app.execution.runs import run_start
from agents_app.models import Agent, Run
from agents_app.schemas_runs import MAX_INPUT_CHARS
from mas_core import ratelimit
from mas_core.permissions import Actor

MAX_CHOICES = 500  # agents (and as many workflows) offered in the form
KINDS = ("agent", "workflow")


@dataclass(frozen=True)
class StartChoice:
    """An agent or a workflow the form offers; a workflow with the inputs it declares."""

    kind: str  # "agent" | "workflow"
    slug: str
    name: str
    description: str = ""
    inputs: tuple[str, ...] = ()

    @property
    def value(self) -> str:
        """How the form names it: ``agent:<slug>`` or ``workflow:<slug>``."""
        return f"{self.kind}:{self.slug}"


class StartRefused(RunError):
    """The form's start refused, with the message the form shows (nothing was started)."""


def start_choices(*, team) -> list[StartChoice]:
    """The team's agents, then its workflows, each by slug."""
    agents = Agent.objects.filter(team=team).order_by("slug").values_list("slug", "name", "description")
    choices = [StartChoice("agent", slug, name or slug, description or "") for slug, name, description
               in agents[:MAX_CHOICES]]
    return choices + list(RUN_HOOKS.workflow_choices(team=team))[:MAX_CHOICES]


def choice_parse(value: str) -> tuple[str, str]:
    """``agent:<slug>`` or ``workflow:<slug>`` → (kind, slug); StartRefused otherwise."""
    kind, _, slug = (value or "").partition(":")
    if kind not in KINDS or not slug:
        raise StartRefused("Choose an agent or a workflow to run.")
    return kind, slug


def run_start_as(*, actor: Actor, choice: str, task: str = "", inputs: dict[str, str] | None = None) -> Run:
    """Start ``choice`` in the actor's team: an agent on ``task``, or a workflow with ``inputs`` (every input it
    declares, nothing else).

    Raises StartRefused (the role does not allow running, nothing chosen, an empty task, too long a text),
    RunError (the agent or workflow is not the team's, an input is missing — the services' own messages) or
    ``ratelimit.RateLimited`` (the team started its runs of this minute).
    """
    if not actor.can("run"):
        raise StartRefused(f"your role in team {actor.team.slug} ({actor.role}) does not allow starting runs")
    kind, slug = choice_parse(choice)
    texts = [task] if kind == "agent" else list((inputs or {}).values())
    if sum(len(text) for text in texts) > MAX_INPUT_CHARS:
        raise StartRefused(f"the task and inputs may hold {MAX_INPUT_CHARS} characters in all")
    if kind == "agent" and not task.strip():
        raise StartRefused("Write the agent's task.")
    ratelimit.run_start_check(actor.team)
    if kind == "agent":
        return run_start(team=actor.team, agent=slug, input=task, user=actor.user)
    return RUN_HOOKS.workflow_start(team=actor.team, workflow=slug, inputs=dict(inputs or {}), user=actor.user)
