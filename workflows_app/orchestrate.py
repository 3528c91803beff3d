"""Orchestrate mode: a planner agent writes the plan, which runs as a workflow, then a synthesis step.

The planner's session (an activation of kind ``plan``) must answer with JSON
(:class:`Plan`). Its subtasks become steps with one output, ``result``; a
``synthesis`` step depends on all of them and receives every result. When a
subtask fails after its retries, the planner is asked once more (up to
``max_adaptations``) for an adapted plan: the subtasks that succeeded keep
their results, the rest of the plan is replaced (event ``plan_adapted``).

Each plan's steps are kept in the run's spec under ``plans``, with the seq of
the event that took it (``plan_created`` or ``plan_adapted``): a fork rebuilds
the plan as it was at its event (workflows_app.forks).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from django.db import transaction
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents_app.execution.errors import RunError
from agents_app.execution.runs import activation_create, DEFAULT_LIMITS, script_check
from agents_app.scheduler import dispatch
from mas_core.eventlog import event_append as event_emit
from agents_app.models import Activation, ActivationContext, Agent, RemoteAgent, Run, Team
from agents_app.models.runs import ActivationStatus
from workflows_app.engine.dag import validate_graph
from workflows_app.engine.scheduler import Engine
from workflows_app.models import WorkflowMode, WorkflowRun
from workflows_app.specs import STEP_ID, WorkflowStep

PLAN = "plan"
SYNTHESIS = "synthesis"
PLANS = "plans"  # the spec's key for every plan taken: [{"seq": its event, "steps": [...]}]
MAX_SUBTASKS = 20
FENCE_RE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


class Subtask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=STEP_ID)
    agent: str = Field(min_length=1, max_length=100)
    task: str = Field(min_length=1, max_length=20_000)
    depends_on: list[str] = Field(default_factory=list)


class Plan(BaseModel):
    """What the planner returns: ``{"subtasks": [{"id", "agent", "task", "depends_on"}, ...]}``."""

    model_config = ConfigDict(extra="forbid")

    subtasks: list[Subtask] = Field(min_length=1, max_length=MAX_SUBTASKS)


class PlanError(ValueError):
    pass


def plan_parse(text: str, *, agents: set[str], done: set[str] = frozenset(), taken: set[str] = frozenset()) -> Plan:
    """The plan in the planner's answer (bare JSON or a fenced block), checked; PlanError says what is wrong.

    ``done`` are subtasks of an earlier plan that succeeded or are still running: new subtasks may
    depend on them. ``taken`` are the ids of that plan's failed subtasks, which stay on record.
    """
    fenced = FENCE_RE.search(text)
    raw = (fenced.group(1) if fenced else text).strip()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as error:
        raise PlanError(f"the plan is not JSON ({error.msg} at line {error.lineno} column {error.colno})") from None
    if isinstance(data, list):
        data = {"subtasks": data}
    try:
        plan = Plan.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "plan"
        raise PlanError(f"the plan does not match its schema: {where}: {first['msg']}") from None
    ids = [subtask.id for subtask in plan.subtasks]
    if SYNTHESIS in ids:
        raise PlanError(f"the plan may not name a subtask {SYNTHESIS!r}: that step is added after the plan")
    clash = sorted(set(ids) & (set(done) | set(taken)))
    if clash:
        raise PlanError(f"subtask id(s) {', '.join(clash)} were used by the earlier plan: give new work new ids")
    steps = [WorkflowStep(id=s.id, agent=s.agent, prompt="", depends_on=[d for d in s.depends_on if d not in done])
             for s in plan.subtasks]
    errors = validate_graph(steps, inputs=[], known_agents=agents)
    if errors:
        message = "; ".join(str(error) for error in errors).replace("steps[", "subtasks[")
        raise PlanError(f"the plan is not valid: {message}")
    return plan


# -- starting --------------------------------------------------------------------------------


@transaction.atomic
def orchestrate_run_start(
    *, team: Team, planner: str, task: str, user=None, synthesizer: str = "", max_adaptations: int = 1,
    subtask_retries: int = 1, limits: dict[str, Any] | None = None, budget: dict[str, Any] | None = None,
    provider: str = "", script: dict[str, Any] | None = None, trigger: str = "manual",
) -> Run:
    """Start a run whose plan the ``planner`` agent writes for ``task``."""
    agents = _agents(team)
    for role, slug in (("planner", planner), ("synthesizer", synthesizer or planner)):
        if slug not in agents:
            raise RunError(f"{role} agent {slug!r} does not exist in this team")
    script_check(team=team, script=script, agents=sorted({planner, synthesizer or planner}))
    run = Run.objects.create(
        team=team, agent=planner, input=task, created_by=user if getattr(user, "pk", None) else None,
        limits={**DEFAULT_LIMITS, **(limits or {})}, budget=budget or {}, provider=provider, script=script,
    )
    WorkflowRun.objects.create(
        run=run, mode=WorkflowMode.ORCHESTRATE, trigger=trigger, planner=planner,
        spec={"on_failure": "continue", "steps": [], "task": task, "synthesizer": synthesizer or planner,
              "max_adaptations": max_adaptations, "subtask_retries": subtask_retries},
        state=Engine([], inputs={}, started_at=time.time()).to_dict(),
    )
    event_emit(run_id=run.id, type="run_start", agent=planner, data={
        "agent": planner, "input": task, "limits": run.limits, "budget": run.budget, "mode": "orchestrate"})
    event_emit(run_id=run.id, type="workflow_start", agent=planner, data={
        "mode": "orchestrate", "planner": planner, "synthesizer": synthesizer or planner, "task": task,
        "trigger": trigger, "max_adaptations": max_adaptations, "steps": []})
    activation_create(run=run, agent=planner, input=_plan_prompt(task, agents), kind=PLAN, parent=None,
                             context=ActivationContext(plan=1))
    dispatch(run)
    return run


def _agents(team_id_or_team) -> dict[str, str]:
    """The team's agents and remote agents, by slug, with their descriptions (what a planner chooses from)."""
    team_id = getattr(team_id_or_team, "id", team_id_or_team)
    found = {**dict(RemoteAgent.objects.filter(team_id=team_id).values_list("slug", "description")),
             **dict(Agent.objects.filter(team_id=team_id).values_list("slug", "description"))}
    return dict(sorted(found.items()))


def _plan_prompt(task: str, agents: dict[str, str], *, adapt: str = "") -> str:
    roster = "\n".join(f"- {slug}: {description or '(no description)'}" for slug, description in agents.items())
    head = adapt or f"Plan this task as subtasks for the team's agents:\n\n{task}"
    return (
        f"{head}\n\nAgents you can assign:\n{roster}\n\n"
        'Answer with JSON only: {"subtasks": [{"id": "short_id", "agent": "<agent slug>", '
        '"task": "what to do", "depends_on": ["ids of subtasks whose results it needs"]}]}. '
        "Subtasks without dependencies run at the same time; a synthesis step receives every result."
    )


# -- the planner answered --------------------------------------------------------------------


def plan_settled(*, run: Run, activation: Activation, failure: dict[str, Any] | None) -> None:
    """The planner's session ended (``run`` locked): run its plan, or fail the run with the reason."""
    from workflows_app import services

    if activation.status not in {ActivationStatus.DONE, ActivationStatus.FAILED}:
        return  # re-queued by the kernel's own retry, or cancelled
    flow = WorkflowRun.objects.select_for_update().get(run_id=run.id)
    engine = services._engine(flow)
    adapting = activation.ctx.adapt
    if activation.status == ActivationStatus.FAILED:
        reason = f"{failure.get('kind')}: {failure.get('message')}" if failure else "failed"
        _plan_failed(run, flow, engine, f"the planner failed: {reason}", adapting=adapting)
        return
    done = {sid for sid, state in engine.states.items()
            if state.status in {"succeeded", "running"} and sid != SYNTHESIS}
    failed = {sid for sid, state in engine.states.items() if state.status == "failed" and sid != SYNTHESIS}
    try:
        plan = plan_parse(activation.result, agents=set(_agents(run.team_id)), done=done, taken=failed)
    except PlanError as error:
        event_emit(run_id=run.id, type="plan_invalid", agent=activation.agent,
                   data={"error": str(error), "answer": activation.result[:2000]})
        _plan_failed(run, flow, engine, f"the planner's plan was refused: {error}", adapting=adapting)
        return
    steps = _plan_steps(flow, plan, done, failed)
    flow.spec = {**flow.spec, "steps": [step.model_dump() for step in steps]}
    # Succeeded subtasks keep their results, running ones go on; failed ones stay on record, depended on by nothing.
    states = {sid: state for sid, state in engine.states.items() if sid in done | failed}
    engine = Engine(steps, inputs={}, on_failure="continue", backoff=services._backoff(), states=states,
                    started_at=engine.started_at)
    subtasks = [subtask.model_dump() for subtask in plan.subtasks]
    if adapting:
        taken = event_emit(run_id=run.id, type="plan_adapted", agent=activation.agent, data={
            "adaptation": flow.adaptations, "kept": sorted(done), "dropped": sorted(failed), "subtasks": subtasks})
    else:
        taken = event_emit(run_id=run.id, type="plan_created", agent=activation.agent, data={
            "subtasks": subtasks, "synthesis": flow.spec["synthesizer"]})
    flow.spec = {**flow.spec, PLANS: [*flow.spec.get(PLANS, []), {"seq": taken["seq"], "steps": flow.spec["steps"]}]}
    services._advance(run, flow, engine)


def _plan_steps(flow: WorkflowRun, plan: Plan, done: set[str], failed: set[str]) -> list[WorkflowStep]:
    retries = int(flow.spec.get("subtask_retries", 1))
    kept = [WorkflowStep.model_validate(step) for step in flow.spec["steps"] if step["id"] in done | failed]
    steps = list(kept)
    for subtask in plan.subtasks:
        prompt = subtask.task
        if subtask.depends_on:
            prompt += "\n\nResults of the subtasks this one builds on:\n" + "\n".join(
                f"\n### {dep}\n{{{dep}.result}}" for dep in subtask.depends_on)
        steps.append(WorkflowStep(id=subtask.id, agent=subtask.agent, prompt=prompt,
                                  depends_on=list(subtask.depends_on), outputs=["result"], max_retries=retries))
    inputs = [step for step in steps if step.id not in failed]
    listing = "\n".join(f"\n### {step.id} ({step.agent})\n{{{step.id}.result}}" for step in inputs)
    steps.append(WorkflowStep(
        id=SYNTHESIS, agent=flow.spec["synthesizer"], depends_on=[step.id for step in inputs], outputs=["result"],
        prompt=(f"Synthesize the final answer to this task from the subtasks' results.\n\nTask:\n"
                f"{flow.spec['task']}\n\nResults:{listing}"),
    ))
    return steps


def _plan_failed(run: Run, flow: WorkflowRun, engine: Engine, reason: str, *, adapting: bool) -> None:
    from workflows_app import services

    if adapting:
        # The adapted plan is unusable: the old plan goes on without its failed subtask.
        event_emit(run_id=run.id, type="plan_adaptation_failed", agent=flow.planner, data={"error": reason})
        engine.stopped = ""
        for state in engine.states.values():
            if state.status == "skipped":
                state.status = "pending"
        services._advance(run, flow, engine)
        return
    flow.spec = {**flow.spec, "error": reason}
    flow.save(update_fields=["spec"])
    if not run.error:
        run.error = reason
        run.save(update_fields=["error"])


def subtask_failed(*, run: Run, flow: WorkflowRun, engine: Engine, step_id: str) -> bool:
    """A subtask failed for good: ask the planner for an adapted plan if any adaptation is left.

    Returns True when the planner was asked (the caller then queues nothing new).
    """
    if step_id == SYNTHESIS or flow.adaptations >= int(flow.spec.get("max_adaptations", 1)):
        return False
    flow.adaptations += 1
    engine.stop(f"adapting the plan after {step_id!r} failed")
    results = "\n".join(
        f"- {sid} ({engine.steps[sid].agent}): {state.status}"
        + (f" — {state.outputs.get('result', '')[:500]}" if state.status == "succeeded" else "")
        + (f" — {state.error[:500]}" if state.status == "failed" else "")
        for sid, state in engine.states.items() if sid != SYNTHESIS)
    head = (f"The plan for this task needs adapting:\n\n{flow.spec['task']}\n\n"
            f"Subtask {step_id!r} failed after its retries: {engine.states[step_id].error}\n\n"
            f"Where the plan stands:\n{results}\n\n"
            "Write the remaining subtasks. Succeeded subtasks keep their results (new subtasks may depend on their "
            "ids); do not repeat them.")
    activation_create(run=run, agent=flow.planner, input=_plan_prompt(flow.spec["task"], _agents(run.team_id),
                                                                             adapt=head),
                             kind=PLAN, parent=None, context=ActivationContext(plan=flow.adaptations + 1, adapt=True))
    event_emit(run_id=run.id, type="plan_adapting", agent=flow.planner, data={
        "adaptation": flow.adaptations, "failed_step": step_id, "error": engine.states[step_id].error})
    return True
