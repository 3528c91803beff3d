"""Workflows on the kernel: each step a session of its agent inside one run.

``workflow_run_start`` creates the run, its :class:`WorkflowRun` and the
activations of the first ready steps. From then on the kernel calls
:func:`workflow_activation_settled` in the transaction that settles a step's
session (``execution.services.session_settle``, the run's row locked): the
scheduler (``engine.scheduler.Engine``) records the outcome, decides on a
retry, and the steps that became ready are queued as activations, which the
kernel's dispatcher sends to workers in parallel (up to ``max_concurrency``).
When nothing is left to run the kernel calls :func:`workflow_finish`.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agents_app.execution.agents import agent_slugs
from agents_app.execution.errors import RunError
from agents_app.execution.escalation import Escalation
from agents_app.execution.runs import activation_create, DEFAULT_LIMITS, script_check
from agents_app.scheduler import dispatch
from agents_app.starts import MAX_CHOICES, StartChoice
from mas_core.eventlog import event_append as event_emit
from mas_core.rows import Columns
from mas_core.telemetry import RunTrace
from agents_app.models import Activation, ActivationContext, Agent, RemoteAgent, Run, Team
from agents_app.models.runs import ActivationStatus, RunStatus
from agents_app.money import money_display, money_str
from workflows_app.engine.scheduler import Engine, Failure, LoopEvent
from workflows_app.models import Workflow, WorkflowMode, WorkflowRun
from workflows_app.orchestrate import PLAN, plan_settled, subtask_failed
from workflows_app.specs import WorkflowLoop, WorkflowSpec, WorkflowStep

STEP = "step"


class WorkflowInputError(RunError):
    pass


# -- starting ---------------------------------------------------------------------------


def workflow_resolve(*, team: Team, workflow: Workflow | str) -> Workflow:
    if isinstance(workflow, Workflow):
        if workflow.team_id != team.id:
            raise RunError(f"workflow {workflow.slug!r} does not exist in this team")
        return workflow
    row = Workflow.objects.filter(team=team, slug=workflow).first()
    if row is None:
        raise RunError(f"workflow {workflow!r} does not exist in this team")
    return row


def workflow_spec(*, team: Team, row: Workflow) -> WorkflowSpec:
    """The workflow's steps, checked again against the agents (and remote agents) the team has now."""
    agents = agent_slugs(team_ids=[team.id])
    try:
        return WorkflowSpec.model_validate(row.spec, context={"known_agents": agents})
    except ValueError as error:
        raise RunError(f"workflow {row.slug!r} cannot run: {_first_line(error)}") from None


def _first_line(error: Exception) -> str:
    errors = getattr(error, "errors", None)
    if callable(errors):
        return "; ".join(str(item.get("msg", "")).removeprefix("Value error, ") for item in errors())
    return str(error)


def inputs_check(spec: WorkflowSpec, inputs: dict[str, Any]) -> dict[str, str]:
    declared = list(spec.inputs)
    missing = [name for name in declared if name not in inputs]
    unknown = sorted(set(inputs) - set(declared))
    problems = []
    if missing:
        problems.append(f"missing input(s): {', '.join(missing)}")
    if unknown:
        problems.append(f"unknown input(s): {', '.join(unknown)} (the workflow declares: {', '.join(declared) or 'none'})")
    if problems:
        raise WorkflowInputError("; ".join(problems))
    return {name: str(inputs[name]) for name in declared}


@transaction.atomic
def workflow_run_start(
    *, team: Team, workflow: Workflow | str, inputs: dict[str, Any], user=None, trigger: str = "manual",
    limits: dict[str, Any] | None = None, budget: dict[str, Any] | None = None, provider: str = "",
    script: dict[str, Any] | None = None, versions: dict[str, int] | None = None, is_eval: bool = False,
    eval_real_models: bool = False, trace: RunTrace | None = None,
) -> Run:
    """Start a run of the team's workflow: its first ready steps are sent to workers after commit.

    ``versions`` pins agents at other versions than their current ones; ``is_eval`` marks a case of an eval,
    and ``eval_real_models`` lets its unscripted agents call the team's real models. ``trace``: where the run's
    trace starts (a door's run), kept in its ``run_start`` event.
    """
    row = workflow_resolve(team=team, workflow=workflow)
    spec = workflow_spec(team=team, row=row)
    values = inputs_check(spec, inputs or {})
    script_check(team=team, script=script, agents=[] if is_eval else sorted({step.agent for step in spec.steps}))
    run = Run.objects.create(
        is_eval=is_eval, eval_real_models=is_eval and eval_real_models,
        team=team, workflow=row.slug, input="\n".join(f"{name}: {value}" for name, value in values.items()),
        created_by=user if getattr(user, "pk", None) else None,
        limits={**DEFAULT_LIMITS, **(limits or {})}, budget=budget or {}, provider=provider, script=script,
        versions={f"workflow:{row.slug}": row.version, **_agent_versions(team, {step.agent for step in spec.steps}),
                  **(versions or {})},
    )
    steps = [step.model_dump() for step in spec.steps]
    loops = [loop.model_dump() for loop in spec.loops]
    engine = Engine(spec.steps, inputs=values, on_failure=spec.on_failure, backoff=_backoff(),
                    started_at=time.time(), loops=spec.loops)
    flow = WorkflowRun.objects.create(run=run, workflow=row, mode=WorkflowMode.WORKFLOW, trigger=trigger,
                                      spec={"on_failure": spec.on_failure, "steps": steps, "loops": loops},
                                      state=engine.to_dict())
    event_emit(run_id=run.id, type="run_start", agent="", data={
        "workflow": row.slug, "input": run.input, "limits": run.limits, "budget": run.budget,
        **(trace.to_json() if trace else {})})
    event_emit(run_id=run.id, type="workflow_start", agent="", data={
        "workflow": row.slug, "version": row.version, "trigger": trigger, "inputs": values,
        "on_failure": spec.on_failure,
        "steps": [{"id": s["id"], "agent": s["agent"], "depends_on": s["depends_on"], "outputs": s["outputs"]}
                  for s in steps],
        "levels": spec.levels(), "loops": loops,
    })
    _advance(run, flow, engine)
    dispatch(run)
    return run


def workflow_start_choices(*, team: Team) -> list[StartChoice]:
    """The team's workflows for the monitor's start form, each with the inputs it declares (run hook
    ``workflow_choices``)."""
    rows = Workflow.objects.filter(team=team).order_by("slug").values_list("slug", "name", "description", "spec")
    return [StartChoice("workflow", slug, name or slug, description or "",
                        tuple(str(name) for name in (spec or {}).get("inputs") or []))
            for slug, name, description, spec in rows[:MAX_CHOICES]]


def workflows_exposed(*, team: Team) -> list[tuple[str, int, tuple[str, ...]]]:
    """The team's workflows with ``expose: true`` (run hook ``workflows_exposed``): (slug, when made in seconds,
    the inputs it declares), by slug."""
    rows = Workflow.objects.filter(team=team, spec__expose=True).order_by("slug").values_list("slug", "created_at",
                                                                                              "spec")
    return [(slug, int(created.timestamp()), tuple(str(name) for name in (spec or {}).get("inputs") or []))
            for slug, created, spec in rows[:MAX_CHOICES]]


def workflow_start_by_hand(*, team: Team, workflow: str, inputs: dict[str, Any], user=None,
                           trace: RunTrace | None = None) -> Run:
    """A person's start of the team's workflow ``workflow`` (its slug), from the monitor's start form or a door
    (run hook ``workflow_start``; ``trace``: the door's, see :class:`~mas_core.telemetry.RunTrace`): a ``manual``
    trigger, as ``POST /api/workflows/{slug}/runs``."""
    return workflow_run_start(team=team, workflow=workflow, inputs=inputs, user=user, trigger="manual", trace=trace)


def _agent_versions(team: Team, slugs: set[str]) -> dict[str, int]:
    """The step agents (and remote agents), pinned at their versions now: every attempt of every step runs those."""
    rows = Agent.objects.filter(team=team, slug__in=slugs).values_list("slug", "version")
    remote = RemoteAgent.objects.filter(team=team, slug__in=slugs).values_list("slug", "version")
    return {**{f"agent:{slug}": version for slug, version in rows},
            **{f"remote_agent:{slug}": version for slug, version in remote}}


def _backoff() -> float:
    return float(settings.MAS_RETRY_BACKOFF_S)


def _steps(flow: WorkflowRun) -> list[WorkflowStep]:
    return [WorkflowStep.model_validate(step) for step in flow.spec["steps"]]


def _engine(flow: WorkflowRun) -> Engine:
    loops = [WorkflowLoop.model_validate(loop) for loop in flow.spec.get("loops", [])]
    return Engine.from_dict(_steps(flow), flow.state, on_failure=flow.spec.get("on_failure", "stop"),
                            backoff=_backoff(), loops=loops)


# -- advancing ----------------------------------------------------------------------------


def _advance(run: Run, flow: WorkflowRun, engine: Engine) -> None:
    """Start the next round of a loop whose round ended, queue every ready step (the budget permitting)
    and save the scheduler's state."""
    _loop_events(run, engine, engine.advance_loops())
    reason = _over_budget(run)
    if reason and not engine.stopped and engine.ready():
        _stopped_events(run, engine, engine.stop(reason))
        _loop_events(run, engine, engine.advance_loops())  # a round cut short ends its loop
    for step_id in engine.ready(now=time.time()):
        _step_queue(run, flow, engine, step_id)
    flow.state = engine.to_dict()
    flow.save(update_fields=["state", "steps_meta", "spec", "adaptations"])


def _loop_events(run: Run, engine: Engine, events: list[LoopEvent]) -> None:
    for event in events:
        loop = engine.loops[event.loop]
        outputs = {sid: {name: value[:2000] for name, value in values.items()} for sid, values in event.outputs.items()}
        data: dict[str, Any] = {"loop": event.loop, "steps": list(event.steps), "until": loop.until,
                                "max_rounds": loop.max_rounds}
        if event.type == "loop_round":
            data |= {"round": event.round, "previous": outputs}
        else:
            data |= {"rounds": event.round, "status": event.status, "outputs": outputs}
        event_emit(run_id=run.id, type=event.type, agent="", data=data)


def _over_budget(run: Run) -> str:
    limit = (run.budget or {}).get("max_cost_usd")
    cost = Run.objects.filter(pk=run.pk).values_list("cost_usd", flat=True).first() or Decimal(0)
    if limit is not None and cost >= Decimal(str(limit)):
        return f"the run's budget of {money_display(limit)} is spent ({money_display(cost)})"
    return ""


def _step_queue(run: Run, flow: WorkflowRun, engine: Engine, step_id: str, *, rung: ActivationContext | None = None,
                delay_s: float = 0.0) -> Activation:
    step = engine.steps[step_id]
    prompt = engine.start(step_id)
    if len(step.outputs) > 1:
        prompt += ("\n\nWhen you are done, call set_output once for each of these outputs: "
                   + ", ".join(step.outputs) + ".")
    schemas = {name: step.output_schemas[name] for name in step.outputs if name in step.output_schemas}
    if schemas:
        prompt += "\n\nEach of these outputs must match its JSON Schema (a value that does not is refused):\n" + \
            "\n".join(f"- {name}: {json.dumps(schema, ensure_ascii=False)}" for name, schema in schemas.items())
    state = engine.states[step_id]
    loop = engine.loop_of.get(step_id)
    rung = rung or ActivationContext()  # a retry's escalation rung (rung, tier), or the one the last attempt ran on
    context = ActivationContext(
        step=step_id, attempt=state.attempts, round=state.round, dependencies=_dependency_results(flow, engine, step),
        rung=rung.rung, tier=rung.tier,
        gate=list(step.gate),  # the session waits for a person there (agents_app.approvals.gate)
        # The tool calls made inside the step (its children's too) that wait for a person, and the guardrails
        # that check its sessions.
        step_approval=list(step.approval), step_guardrails=list(step.guardrails))
    tier = context.tier
    if schemas:  # the session checks set_output values, and the final answer when it fills the only output
        context = context.replace(output_schemas=schemas,
                                  answer_output=step.outputs[0] if len(step.outputs) == 1 else None)
    activation = activation_create(run=run, agent=step.agent, input=prompt, kind=STEP, parent=None,
                                          context=context)
    if delay_s:
        activation.not_before = timezone.now() + timedelta(seconds=delay_s)
        activation.save(update_fields=["not_before"])
    meta = flow.steps_meta.get(step_id, {})
    flow.steps_meta = {**flow.steps_meta, step_id: {
        **meta, "agent": step.agent, "activation": str(activation.id), "tier": tier or meta.get("tier", ""),
        "started_at": timezone.now().isoformat(), "finished_at": None,
        "prompt_tokens": meta.get("prompt_tokens", 0), "completion_tokens": meta.get("completion_tokens", 0),
        "cost_usd": meta.get("cost_usd", "0"),
    }}
    event_emit(run_id=run.id, type="step_start", agent=step.agent, data={
        "step": step_id, "attempt": state.attempts, "round": state.round, "activation": str(activation.id),
        "partial": state.partial, "prompt": prompt[:2000], "delay_s": delay_s, **({"tier": tier} if tier else {}),
        **({"loop": loop} if loop is not None else {}),
    })
    return activation


def _dependency_results(flow: WorkflowRun, engine: Engine, step) -> dict[str, str]:
    """What each step this one depends on produced: its named outputs and its final answer (execution context)."""
    answers = dict(Activation.objects.filter(
        pk__in=[flow.steps_meta.get(dep, {}).get("activation") for dep in step.depends_on
                if flow.steps_meta.get(dep, {}).get("activation")]).values_list("id", "result"))
    results = {}
    for dep in step.depends_on:
        state = engine.states[dep]
        parts = [f"**{name}**:\n{value}" for name, value in state.outputs.items()]
        answer = answers.get(_uuid(flow.steps_meta.get(dep, {}).get("activation")), "")
        if answer and list(state.outputs.values()) != [answer]:
            parts.append(f"**final answer**:\n{answer}")
        if state.status != "succeeded":
            parts.insert(0, f"(this step {state.status}{': ' + state.error if state.error else ''})")
        results[dep] = "\n\n".join(parts) or "(no output)"
    loop = engine.loop_of.get(step.id)
    if loop is not None and engine.states[step.id].round > 1:
        # The loop's previous round, including this step's own: what the new round works from.
        for sid in engine.loops[loop].steps:
            last = engine.states[sid].rounds[-1] if sid not in step.depends_on and engine.states[sid].rounds else None
            if last is not None:
                results[f"{sid} (round {last['round']})"] = "\n\n".join(
                    f"**{name}**:\n{value}" for name, value in last["outputs"].items()) or f"(it {last['status']})"
    return results


def _uuid(value):
    import uuid

    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def workflow_activation_settled(*, run: Run, activation: Activation, tier: str, meta: dict[str, Any],
                                failure: dict[str, Any] | None, ladder: list[str],
                                escalation: Escalation | None = None) -> None:
    """A step's session ended (``run`` is locked): record it, retry or go on, queue what became ready."""
    if activation.kind == PLAN:
        return plan_settled(run=run, activation=activation, failure=failure)
    step_id = activation.ctx.step or None
    flow = WorkflowRun.objects.select_for_update().filter(run_id=run.id).first()
    if flow is None or step_id is None:
        return
    engine = _engine(flow)
    state = engine.states.get(step_id)
    if state is None or state.status != "running":
        return  # an attempt the scheduler no longer waits for (cancelled run, replaced plan)
    usage = _usage(meta)
    step_meta = flow.steps_meta.get(step_id, {})
    flow.steps_meta = {**flow.steps_meta, step_id: {
        **step_meta, "finished_at": timezone.now().isoformat(),
        "prompt_tokens": step_meta.get("prompt_tokens", 0) + usage["prompt_tokens"],
        "completion_tokens": step_meta.get("completion_tokens", 0) + usage["completion_tokens"],
        "cost_usd": money_str(Decimal(step_meta.get("cost_usd", "0")) + usage["cost_usd"]),
    }}
    tokens, cost = usage["prompt_tokens"] + usage["completion_tokens"], float(usage["cost_usd"])
    rungs = len(ladder)
    if activation.status == ActivationStatus.DONE:
        outputs = dict(activation.ctx.outputs or {})  # JSON values, checked and made text by the engine
        decision = engine.succeed(step_id, set_outputs=outputs, final_answer=activation.result, tokens=tokens,
                                  cost=cost, now=time.time(), escalation_tiers=rungs)
    elif activation.status == ActivationStatus.CANCELLED:
        return
    else:
        error = (f"{failure.get('kind')}: {failure.get('message')}" if failure
                 else f"the session ended {activation.status}")
        # A policy (the budget, a limit) refuses the same way every time: no retry.
        decision = engine.fail(step_id, error=error, tokens=tokens, cost=cost, now=time.time(),
                               escalation_tiers=rungs,
                               retry=not (failure and failure.get("kind") == "policy_denied"))
    _settled_events(run, flow, engine, step_id, activation, decision, tier=tier, escalation=escalation)
    if (decision is not None and not decision.retry and flow.mode == WorkflowMode.ORCHESTRATE
            and engine.states[step_id].status == "failed"):
        subtask_failed(run=run, flow=flow, engine=engine, step_id=step_id)
    _advance(run, flow, engine)


def _settled_events(run: Run, flow: WorkflowRun, engine: Engine, step_id: str, activation: Activation,
                    decision: Failure | None, *, tier: str, escalation: Escalation | None) -> None:
    state = engine.states[step_id]
    usage = flow.steps_meta[step_id]
    loop = {"loop": engine.loop_of[step_id]} if step_id in engine.loop_of else {}
    if decision is None:
        event_emit(run_id=run.id, type="step_complete", agent=activation.agent, data={
            "step": step_id, "attempt": state.attempts, "round": state.round,
            "outputs": {k: v[:2000] for k, v in state.outputs.items()},
            "partial": state.partial, "prompt_tokens": usage["prompt_tokens"],
            "completion_tokens": usage["completion_tokens"], "cost_usd": usage["cost_usd"], **loop,
        })
        return
    event_emit(run_id=run.id, type="step_failed", agent=activation.agent, data={
        "step": step_id, "attempt": decision.attempt, "round": state.round, "error": decision.error,
        "retry": decision.retry, "on_failure": engine.policy(step_id), **loop,
    })
    if decision.retry:
        # The kernel found the ladder's next rung (never a step down); the step's next attempt runs on it.
        if escalation:
            event_emit(run_id=run.id, type="escalation", agent=activation.agent,
                       data={"step": step_id, **escalation.data})
        event_emit(run_id=run.id, type="step_retry", agent=activation.agent, data={
            "step": step_id, "attempt": decision.attempt + 1, "round": state.round, "delay_s": decision.delay,
            "reason": decision.error, **({"tier": escalation.data["to"]} if escalation else {}), **loop,
        })
        rung = escalation.applied(ActivationContext()) if escalation else ActivationContext(
            rung=activation.ctx.rung, tier=activation.ctx.tier)
        _step_queue(run, flow, engine, step_id, rung=rung, delay_s=decision.delay)
    elif engine.stopped:
        _stopped_events(run, engine, [sid for sid in engine.order if engine.states[sid].status == "skipped"])


def _stopped_events(run: Run, engine: Engine, skipped: list[str]) -> None:
    event_emit(run_id=run.id, type="workflow_stopped", agent="", data={"reason": engine.stopped, "skipped": skipped})
    for sid in skipped:
        event_emit(run_id=run.id, type="step_skipped", agent=engine.steps[sid].agent,
                   data={"step": sid, "reason": engine.stopped})


def _usage(meta: dict[str, Any]) -> dict[str, Any]:
    return {"prompt_tokens": int(meta.get("prompt_tokens") or 0),
            "completion_tokens": int(meta.get("completion_tokens") or 0),
            "cost_usd": Decimal(str(meta.get("cost_usd") or "0"))}


# -- finishing -----------------------------------------------------------------------------


def workflow_finish(run: Run) -> bool:
    """Nothing is left to run (``run`` is locked): the run's outcome is the workflow's.

    Returns False for a run that is not a workflow's.
    """
    flow = WorkflowRun.objects.select_for_update().filter(run_id=run.id).first()
    if flow is None:
        return False
    engine = _engine(flow)
    if not engine.finished:  # steps the scheduler still counts on, with no activation left to run them
        waiting = [sid for sid in engine.order if engine.states[sid].status not in {"succeeded", "failed", "skipped"}]
        engine.stop(f"step(s) {', '.join(waiting)} could not run")
        for sid in waiting:
            engine.states[sid].status = "skipped"
        _loop_events(run, engine, engine.advance_loops())
        flow.state = engine.to_dict()
        flow.save(update_fields=["state"])
    outcome = "failed" if flow.spec.get("error") else engine.outcome()
    failed = [sid for sid in engine.order if engine.states[sid].status == "failed"]
    skipped = [sid for sid in engine.order if engine.states[sid].status == "skipped"]
    run.status = RunStatus.SUCCEEDED if outcome in {"succeeded", "partial"} else RunStatus.FAILED
    run.result = _result(engine)
    run.finished_at = timezone.now()
    if outcome == "partial" and not run.error:
        run.error = f"step(s) {', '.join(failed)} failed; the workflow went on without them (on_failure: continue)"
    elif outcome == "failed" and not run.error:
        run.error = engine.stopped or f"step(s) {', '.join(failed)} failed"
    run.save(update_fields=["status", "result", "finished_at", "error"])
    stats = engine.stats(now=time.time())
    duration = (run.finished_at - (run.started_at or run.created_at)).total_seconds()
    event_emit(run_id=run.id, type="workflow_complete", agent="", data={
        "status": outcome, "steps_total": stats.steps_total, "succeeded": stats.succeeded, "failed": stats.failed,
        "skipped": stats.skipped, "failed_steps": failed, "skipped_steps": skipped,
        "duration_s": round(duration, 3), "prompt_tokens": run.prompt_tokens,
        "completion_tokens": run.completion_tokens, "tokens": run.prompt_tokens + run.completion_tokens,
        "cost_usd": money_str(run.cost_usd), "reason": engine.stopped, "loops": list(stats.loops),
        "rounds": sum(loop["rounds"] for loop in stats.loops),
    })
    event_emit(run_id=run.id, type="run_complete", agent="", data={
        "status": run.status, "result": run.result[:2000], "error": run.error,
        "prompt_tokens": run.prompt_tokens, "completion_tokens": run.completion_tokens,
        "cost_usd": money_str(run.cost_usd), "duration_s": round(duration, 3),
    })
    return True


def _result(engine: Engine) -> str:
    """The outputs of the last steps (those nothing depends on), as the run's result."""
    needed = {dep for step in engine.steps.values() for dep in step.depends_on}
    finals = [sid for sid in engine.order if sid not in needed and engine.states[sid].status == "succeeded"]

    def text(sid: str) -> str:
        outputs = engine.states[sid].outputs
        if len(outputs) == 1:
            return next(iter(outputs.values()))
        return "\n\n".join(f"### {name}\n\n{value}" for name, value in outputs.items())

    if len(finals) == 1:
        return text(finals[0])
    return "\n\n".join(f"## {sid}\n\n{text(sid)}" for sid in finals)


def workflow_cancelled(run: Run) -> None:
    """The run was cancelled (``run`` is locked): steps still waiting are skipped."""
    flow = WorkflowRun.objects.select_for_update().filter(run_id=run.id).first()
    if flow is None:
        return
    engine = _engine(flow)
    skipped = engine.stop(run.error or "cancelled")
    for sid in skipped:
        event_emit(run_id=run.id, type="step_skipped", agent=engine.steps[sid].agent,
                   data={"step": sid, "reason": engine.stopped})
    flow.state = engine.to_dict()
    flow.save(update_fields=["state"])
    stats = engine.stats(now=time.time())
    event_emit(run_id=run.id, type="workflow_complete", agent="", data={
        "status": "cancelled", "steps_total": stats.steps_total, "succeeded": stats.succeeded,
        "failed": stats.failed, "skipped": len(skipped), "skipped_steps": skipped, "reason": run.error,
    })


# -- reading ---------------------------------------------------------------------------------


FLOW_ROW = Columns(WorkflowRun)
# Read at every read of a run's detail (agent runs too, which have none): hand-written, a hot path (see
# mas_core.rows).
_FLOW_SQL = f'SELECT {FLOW_ROW.select("w")} FROM "{WorkflowRun._meta.db_table}" AS w WHERE w.run_id = %s'


def workflow_steps(run: Run) -> list[dict[str, Any]] | None:
    """Per step of a workflow run: status, attempts, outputs, usage, times; None for agent runs."""
    with connection.cursor() as cursor:
        cursor.execute(_FLOW_SQL, [run.id])
        found = cursor.fetchone()
    if found is None:
        return None
    flow = FLOW_ROW.instance(found)
    engine = _engine(flow)
    steps = []
    for sid in engine.order:
        step, state, meta = engine.steps[sid], engine.states[sid], flow.steps_meta.get(sid, {})
        steps.append({
            "id": sid, "agent": step.agent, "depends_on": list(step.depends_on), "status": state.status,
            "attempts": state.attempts, "outputs": dict(state.outputs), "round": state.round,
            "rounds": [dict(entry) for entry in state.rounds], "partial": state.partial, "error": state.error, "tier": meta.get("tier", ""),
            "prompt_tokens": meta.get("prompt_tokens", 0), "completion_tokens": meta.get("completion_tokens", 0),
            "cost_usd": meta.get("cost_usd", "0"), "started_at": meta.get("started_at"),
            "finished_at": meta.get("finished_at"),
        })
    return steps


__all__ = ["WorkflowInputError", "workflow_activation_settled", "workflow_cancelled", "workflow_finish",
           "workflow_run_start", "workflow_steps"]


def workflow_graph(run: Run) -> dict | None:
    """The steps and dependencies the run executes (for its DAG), when it is a workflow's or a planner's.

    The run's own copy of its steps when it has one (a plan, or the workflow as it was when the run
    started), else the team's workflow of that slug.
    """
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
