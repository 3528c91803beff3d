"""Starting a run by hand: what a person may start, and the start itself, for the monitor's start form.

The form (``/runs/start/``, also on the runs page; the admin's *Run…* buttons
lead to it) starts an agent with its task or a workflow with the inputs it
declares. It goes the way of the API: the role must allow running, the start
counts against the team's rate limit, and only the team's own agent or
workflow is found — then ``run_start`` (as ``POST /api/runs``) or the
workflow app's start (as ``POST /api/workflows/{slug}/runs``, through the
run hook ``workflow_start``: this app knows no workflow).

"Try without a model": an agent's run may carry a script (its model turns
given, as ``POST /api/runs`` takes one), and :func:`try_example` writes the
script that shows one of the agent's tools (``agents_app.script_examples``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agents_app.execution.errors import RunError
from agents_app.execution.hooks import RUN_HOOKS
from agents_app.execution.runs import run_start
from agents_app.models import Agent, Run
from agents_app.schemas_runs import MAX_INPUT_CHARS
from agents_app.script_examples import examples_for, script_example, tools_called
from mas_core import ratelimit
from mas_core.api_errors import JsonTooComplex, UnstorableBody, load_json
from mas_core.permissions import Actor
from tools_app.catalog import BUILTIN_TOOLS, SAFE_DEFAULT_TOOLS

MAX_CHOICES = 500  # agents (and as many workflows) offered in the form
MAX_SCRIPT_CHARS = 100_000  # a script typed or pasted in the form
KINDS = ("agent", "workflow")


@dataclass(frozen=True)
class StartChoice:
    """An agent or a workflow the form offers; a workflow with the inputs it declares."""

    kind: str  # "agent" | "workflow"
    slug: str
    name: str
    description: str = ""
    inputs: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()  # an agent's: the tools it can show without a model (try_example)

    @property
    def value(self) -> str:
        """How the form names it: ``agent:<slug>`` or ``workflow:<slug>``."""
        return f"{self.kind}:{self.slug}"


class StartRefused(RunError):
    """The form's start refused, with the message the form shows (nothing was started)."""


class StartNotFound(StartRefused):
    """What the form names is not the team's."""


def start_choices(*, team) -> list[StartChoice]:
    """The team's agents, then its workflows, each by slug."""
    agents = list(Agent.objects.filter(team=team).order_by("slug").values_list("slug", "name", "description", "spec")
                  [:MAX_CHOICES])
    slugs = [slug for slug, *_ in agents]
    choices = [StartChoice("agent", slug, name or slug, description or "",
                           examples=tuple(examples_for(**_abilities(spec, [other for other in slugs if other != slug]))))
               for slug, name, description, spec in agents]
    return choices + list(RUN_HOOKS.workflow_choices(team=team))[:MAX_CHOICES]


def _abilities(spec: dict[str, Any], others: list[str]) -> dict[str, list[str]]:
    """What an agent's examples may use: its tools (the safe defaults when it names none), its skills, the
    team's other agents."""
    tools = spec.get("tools")
    return {"tools": list(SAFE_DEFAULT_TOOLS) if tools is None else list(tools),
            "skills": list(spec.get("skills") or []), "others": others}


def try_example(*, actor: Actor, agent: str, tool: str) -> dict[str, Any]:
    """The script that shows ``tool`` as the team's agent ``agent``'s, and a task for it: ``{"script", "task"}``.
    A delegate example hands its task to the first other agent by slug, a skill_load example loads the
    agent's first skill.

    Raises StartNotFound (no such agent in the team) or StartRefused (it cannot run that example: the tools it
    lacks).
    """
    spec = Agent.objects.filter(team=actor.team, slug=agent).values_list("spec", flat=True).first()
    if spec is None:
        raise StartNotFound(f"No agent {agent!r} in team {actor.team.slug}.")
    others = list(Agent.objects.filter(team=actor.team).exclude(slug=agent).order_by("slug")
                  .values_list("slug", flat=True)[:1])
    abilities = _abilities(spec, others)
    if tool not in examples_for(**abilities):
        if tool not in BUILTIN_TOOLS:
            raise StartRefused(f"{tool!r} is not a built-in tool.")
        missing = sorted(tools_called(tool) - set(abilities["tools"]))
        why = (f"it lacks the tools {', '.join(missing)}" if missing else
               "it has no skill to load" if tool == "skill_load" else "the team has no other agent")
        raise StartRefused(f"Agent {agent} cannot show {tool}: {why}.")
    script = script_example(tool=tool, agent=agent, other=(others or [""])[0],
                            skill=(abilities["skills"] or [""])[0])
    return {"script": script, "task": f"Show how {tool} works."}


def script_parse(text: str) -> dict[str, Any] | None:
    """The form's script field: None when empty, else the JSON object typed (StartRefused if it is not one)."""
    if not text.strip():
        return None
    if len(text) > MAX_SCRIPT_CHARS:
        raise StartRefused(f"The script is {len(text)} characters long; the limit is {MAX_SCRIPT_CHARS}.")
    try:
        script = load_json(text.encode())
    except (JsonTooComplex, UnstorableBody) as error:
        raise StartRefused(f"The script is refused: {str(error).replace('the JSON body ', 'it ')}.") from None
    except json.JSONDecodeError as error:
        raise StartRefused(f"The script is not valid JSON: {error.msg} (line {error.lineno}, column "
                           f"{error.colno}).") from None
    except ValueError as error:
        raise StartRefused(f"The script is not valid JSON: {error}.") from None
    if not isinstance(script, dict):
        raise StartRefused("The script is a JSON object: each agent's slug and its list of turns.")
    return script


def choice_parse(value: str) -> tuple[str, str]:
    """``agent:<slug>`` or ``workflow:<slug>`` → (kind, slug); StartRefused otherwise."""
    kind, _, slug = (value or "").partition(":")
    if kind not in KINDS or not slug:
        raise StartRefused("Choose an agent or a workflow to run.")
    return kind, slug


def run_start_as(*, actor: Actor, choice: str, task: str = "", inputs: dict[str, str] | None = None,
                 script: str = "") -> Run:
    """Start ``choice`` in the actor's team: an agent on ``task`` (its model turns given by ``script``, JSON, if
    not empty), or a workflow with ``inputs`` (every input it declares, nothing else).

    Raises StartRefused (the role does not allow running, nothing chosen, an empty task, too long a text, a
    script that is no JSON object), RunError (the agent or workflow is not the team's, an input is missing, a
    bad turn in the script — the services' own messages) or ``ratelimit.RateLimited`` (the team started its
    runs of this minute).
    """
    if not actor.can("run"):
        raise StartRefused(f"your role in team {actor.team.slug} ({actor.role}) does not allow starting runs")
    kind, slug = choice_parse(choice)
    texts = [task] if kind == "agent" else list((inputs or {}).values())
    if sum(len(text) for text in texts) > MAX_INPUT_CHARS:
        raise StartRefused(f"the task and inputs may hold {MAX_INPUT_CHARS} characters in all")
    if kind == "agent" and not task.strip():
        raise StartRefused("Write the agent's task.")
    given = script_parse(script) if kind == "agent" else None
    ratelimit.run_start_check(actor.team)
    if kind == "agent":
        return run_start(team=actor.team, agent=slug, input=task, user=actor.user, script=given)
    return RUN_HOOKS.workflow_start(team=actor.team, workflow=slug, inputs=dict(inputs or {}), user=actor.user)
