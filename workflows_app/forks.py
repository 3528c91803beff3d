"""Forks of workflow runs: the workflow's state as of an event of the parent, rebuilt in the fork.

agents_app.execution.forks starts every fork (checks, the fork's run and its
``run_start``, the workspace files) and hands a workflow run to
:func:`workflow_fork` through ``RUN_HOOKS.run_fork``. The scheduler's state is
saved only as it is now, so the state at the fork point is rebuilt by playing
the parent's step events up to it (``step_start``, ``step_complete``,
``step_failed``, ``workflow_stopped``) on a fresh :class:`Engine` with the
run's own copy of its steps, the way the engine took them:

- a step settled by then keeps its status, attempts, usage and outputs (taken
  again from its activation, as the engine took them, so not cut to the
  2,000 characters an event keeps); it is not run again;
- a step in progress then is restored as an agent run's agents are
  (agents_app.execution.forks.sessions_restore): its activation, with the
  agents under it, and its session from its checkpoints up to the fork point,
  which a worker resumes as the same attempt (afresh from its input when it
  had no checkpoint yet); the engine waits for it as for any step it started,
  so its settling goes on as a step's does. A ``tool_result`` edit is given
  to a tool call of one of these sessions;
- a loop is in the round it was in.

Then the steps ready are queued as a run start queues them. A run of a
planner's plan (orchestrate) is rebuilt the same way from the plans it
recorded (``plans`` in its spec, each with the event that took it): the
steps events are played on the first plan, and at each ``plan_adapting`` and
``plan_adapted`` the engine stops and takes the adapted plan as the run did
(workflows_app.orchestrate.plan_settled); forked before the plan was
written, it has no steps yet and its planner's session is restored (the plan
it writes then becomes the fork's), and forked while its planner was adapting
the plan, that planner's session is restored the same way. A planner's run
recorded before its plans were kept forks only when its plan was never
adapted.
"""

from __future__ import annotations

import time
from typing import Any

from agents_app.execution.forks import ForkError, positions_of, sessions_restore
from agents_app.execution.runs import activation_create
from mas_core.eventlog import event_append
from agents_app.models import Activation, ActivationContext, Event, Run, Session
from agents_app.models.runs import ActivationStatus
from workflows_app.engine.scheduler import Engine, WorkflowError
from workflows_app.models import WorkflowMode, WorkflowRun
from workflows_app.orchestrate import PLAN, PLANS, SYNTHESIS, plan_settled
from workflows_app.services import STEP, _advance, _backoff, _steps
from workflows_app.specs import WorkflowLoop, WorkflowStep

STEP_EVENTS = ("step_start", "step_complete", "step_failed", "workflow_stopped")
PLAN_EVENTS = ("plan_adapting", "plan_adapted", "plan_adaptation_failed")  # played too for a planner's run
MAX_STEP_EVENTS = 10_000  # step events played to rebuild one fork


def workflow_fork(*, parent: Run, fork: Run, seq: int, base: int, edit: tuple[Event, str] | None = None,
                  ) -> dict[str, int] | None:
    """Rebuild ``parent``'s workflow at event ``seq`` in ``fork``, resume its steps in progress then and queue
    its ready steps (``base`` and ``edit`` as :func:`sessions_restore` takes them).

    Returns the scripted provider's positions (per agent, the furthest its sessions had reached by then);
    None for an agent run, which agents_app forks itself.
    """
    flow = WorkflowRun.objects.filter(run_id=parent.id).select_related("workflow").first()
    if flow is None and not parent.workflow:
        return None
    if flow is None:
        raise ForkError(f"run {parent.id} of workflow {parent.workflow} has no workflow state to fork from")
    planning: set[str] = set()  # a planner's session in progress at the fork point: restored as a step's is
    ask: Activation | None = None  # forked before the planner was asked: the fork asks it, as the run's start did
    plans: dict[int, list[dict]] = {}  # a planner's run: each plan it took by then, by the event that took it
    if flow.mode == WorkflowMode.ORCHESTRATE:
        flow, planning, ask, plans = _plan_at(parent, flow, seq=seq)
    engine, activations = _state_at(parent, flow, seq=seq, plans=plans)
    if flow.mode == WorkflowMode.ORCHESTRATE and flow.spec.get("steps"):  # the plan in effect then, taken at the
        steps = plans[max(plans)] if plans else flow.spec["steps"]  # fork's start (none yet: the planner's is)
        flow.spec = {**flow.spec, "steps": steps, PLANS: [{"seq": base, "steps": steps}]}
    running = {activations[sid]: sid for sid, state in engine.states.items()
               if state.status == "running" and sid in activations}
    kept = {sid: activations[sid] for sid, state in engine.states.items()
            if state.status in ("succeeded", "failed") and sid in activations}
    rows = {str(a.id): a for a in Activation.objects.filter(run=parent, pk__in=list(kept.values()))}
    child = WorkflowRun.objects.create(run=fork, workflow=flow.workflow, mode=flow.mode, trigger=flow.trigger,
                                       planner=flow.planner, spec=flow.spec, state=engine.to_dict(), steps_meta={},
                                       adaptations=flow.adaptations)
    start = Event.objects.filter(run=parent, type="workflow_start").order_by("seq").first()
    event_append(run_id=fork.id, type="workflow_start", agent="", data={
        **(start.data if start else {}), "trigger": flow.trigger, "forked_from": str(parent.id), "fork_seq": seq,
        **({"adaptations": flow.adaptations} if flow.mode == WorkflowMode.ORCHESTRATE else {}),
        "kept": sorted(kept, key=engine.order.index)})
    steps_meta: dict[str, Any] = {}
    for sid in engine.order:
        old = rows.get(kept.get(sid, ""))
        if old is None:
            continue
        copy = Activation.objects.create(
            run=fork, agent=old.agent, input=old.input, kind=STEP, depth=old.depth, priority=old.priority,
            context=old.context, status=old.status, result=old.result, attempts=old.attempts)
        steps_meta[sid] = {**flow.steps_meta.get(sid, {}), "activation": str(copy.id)}
        state = engine.states[sid]
        # Its start too, naming the copy: a fork of this fork rebuilds the step from these two events.
        event_append(run_id=fork.id, type="step_start", agent=old.agent, data={
            "step": sid, "attempt": state.attempts, "round": state.round, "activation": str(copy.id),
            "restored": True})
        event_append(run_id=fork.id, type="step_complete" if state.status == "succeeded" else "step_failed",
                     agent=old.agent, data={
                         "step": sid, "attempt": state.attempts, "round": state.round, "restored": True,
                         **({"outputs": {k: v[:2000] for k, v in state.outputs.items()}}
                            if state.status == "succeeded" else {"error": state.error, "retry": False})})
    restored = sessions_restore(parent=parent, fork=fork, seq=seq, base=base, edit=edit,
                                roots=set(running) | planning)
    if ask is not None:
        activation_create(run=fork, agent=ask.agent, input=ask.input, kind=PLAN, parent=None, context=ActivationContext(plan=1))
    resumed = {item.activation.ctx.step or None: item for item in restored if item.activation.parent_id is None}
    for sid in engine.order:
        item, state = resumed.get(sid), engine.states[sid]
        if state.status != "running":
            continue
        if item is None:  # no activation to restore: the same attempt again, from its input
            state.status, state.attempts = "pending", state.attempts - 1
            continue
        # Its usage starts at zero: the resumed session's counters already hold what it had spent by the fork
        # point, and its settling adds them (the parent's totals for the step include spend after the point).
        steps_meta[sid] = {**flow.steps_meta.get(sid, {}), "activation": str(item.activation.id), "finished_at": None,
                           "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": "0"}
        event_append(run_id=fork.id, type="step_start", agent=item.activation.agent, data={
            "step": sid, "attempt": state.attempts, "round": state.round, "activation": str(item.activation.id),
            "partial": state.partial, "prompt": item.activation.input[:2000], "delay_s": 0, "restored": True,
            "checkpoints": len(item.entries)})
        if item.activation.status == ActivationStatus.DONE:  # its session had ended ok, the step not settled yet
            refused = engine.succeed(sid, set_outputs=dict(item.activation.ctx.outputs or {}),
                                     final_answer=item.activation.result)
            event_append(run_id=fork.id, type="step_complete" if refused is None else "step_failed",
                         agent=item.activation.agent, data={
                             "step": sid, "attempt": state.attempts, "round": state.round, "restored": True,
                             **({"outputs": {k: v[:2000] for k, v in state.outputs.items()}} if refused is None
                                else {"error": refused.error, "retry": refused.retry})})
    child.steps_meta = steps_meta
    _advance(fork, child, engine)
    for item in restored:  # a planner that had answered by the fork point, its plan not taken yet: taken now
        if item.activation.kind == PLAN and item.activation.status == ActivationStatus.DONE:
            plan_settled(run=fork, activation=item.activation, failure=None)
    positions = _positions(parent, seq=seq)
    for agent, position in positions_of(restored).items():
        positions[agent] = max(positions.get(agent, 0), position)
    return positions


def _plan_at(parent: Run, flow: WorkflowRun, *, seq: int
             ) -> tuple[WorkflowRun, set[str], Activation | None, dict[int, list[dict]]]:
    """A planner's run as of event ``seq``: the plans it had taken by then (by the seq of the event that took
    each), its adaptations so far, and the planner's activation to restore when one was at work then — writing
    the first plan or adapting it — (or, not queued by then, the one to ask again)."""
    recorded = flow.spec.get(PLANS)
    if recorded is None and Event.objects.filter(run=parent, type__in=["plan_adapting", "plan_adapted"]).exists():
        raise ForkError(f"run {parent.id} runs a planner's plan that was adapted after a subtask failed, and was "
                        "recorded before MAS kept each plan: only its last plan is known, so it cannot be forked")
    spec = {key: value for key, value in flow.spec.items() if key not in ("error", PLANS)}  # a refusal after it
    plans = {int(plan["seq"]): plan["steps"] for plan in recorded or [] if int(plan["seq"]) <= seq}
    taken = (bool(plans) if recorded is not None
             else Event.objects.filter(run=parent, seq__lte=seq, type="plan_created").exists())
    marks = list(Event.objects.filter(run=parent, seq__lte=seq, type__in=PLAN_EVENTS).order_by("seq")
                 .values_list("type", flat=True))
    adapting = bool(marks) and marks[-1] == "plan_adapting"  # the planner at work on an adapted plan then
    planning: set[str] = set()
    ask = None
    if not taken or adapting:
        if not taken:
            spec["steps"] = []
        queued = Event.objects.filter(run=parent, seq__lte=seq, type="activation_queued").values_list(
            "data__activation", flat=True)
        latest = (Activation.objects.filter(run=parent, kind=PLAN, pk__in=list(queued))
                  .order_by("-created_at").values_list("pk", flat=True).first())
        if latest is not None:
            planning = {str(latest)}
        elif not taken:
            ask = Activation.objects.filter(run=parent, kind=PLAN).order_by("created_at").first()
            if ask is None:
                raise ForkError(f"run {parent.id} runs a planner's plan but has no planner's activation to fork")
    # Its adaptations by then: a fork starts with its parent's (its workflow_start says how many).
    start = (Event.objects.filter(run=parent, type="workflow_start").order_by("seq").values_list("data", flat=True)
             .first() or {})
    copy = WorkflowRun(run=parent, workflow=flow.workflow, mode=flow.mode, trigger=flow.trigger,
                       planner=flow.planner, spec=spec, state=flow.state, steps_meta=flow.steps_meta,
                       adaptations=int(start.get("adaptations") or 0) + marks.count("plan_adapting"))
    return copy, planning, ask, plans


def _engine(flow: WorkflowRun) -> Engine:
    loops = [WorkflowLoop.model_validate(loop) for loop in flow.spec.get("loops", [])]
    inputs = (flow.state or {}).get("inputs", {})
    return Engine(_steps(flow), inputs=inputs, on_failure=flow.spec.get("on_failure", "stop"), backoff=_backoff(),
                  started_at=time.time(), loops=loops)


def _state_at(parent: Run, flow: WorkflowRun, *, seq: int, plans: dict[int, list[dict]] | None = None,
              ) -> tuple[Engine, dict[str, str]]:
    """The engine as the parent's step events up to ``seq`` left it, and each step's latest activation.

    ``plans`` (a planner's run: its plans by the event that took each) starts the engine on the first plan and
    plays the planner's adaptations too."""
    if plans:
        flow = WorkflowRun(spec={**flow.spec, "steps": plans[min(plans)]}, state=flow.state)
    engine = _engine(flow)
    activations: dict[str, str] = {}
    kinds = STEP_EVENTS + PLAN_EVENTS if plans else STEP_EVENTS
    marks = (Event.objects.filter(run=parent, seq__lte=seq, type__in=kinds).order_by("seq")
             .values_list("seq", "type", "data"))
    count = 0
    for event_seq, type_, data in marks.iterator(chunk_size=500):
        count += 1
        if count > MAX_STEP_EVENTS:
            raise ForkError(f"run {parent.id} had more than {MAX_STEP_EVENTS:,} step events by event {seq}: "
                            "too many to fork")
        try:
            if type_ in PLAN_EVENTS:
                engine = _replan(engine, plans or {}, type_=type_, seq=event_seq, data=data)
            else:
                _play(engine, activations, parent=parent, type_=type_, data=data)
        except (WorkflowError, KeyError) as error:
            raise ForkError(f"run {parent.id}: its workflow's state cannot be rebuilt at event {seq} (event "
                            f"{event_seq}, {type_}: {error})") from None
    return engine, activations


def _replan(engine: Engine, plans: dict[int, list[dict]], *, type_: str, seq: int, data: dict) -> Engine:
    """A planner's adaptation played as workflows_app.orchestrate did it: asked (the engine stops), answered
    (the adapted plan takes over, the subtasks done, running or failed keep their state), or unusable (the old
    plan goes on without its failed subtask)."""
    if type_ == "plan_adapting":
        engine.stop(f"adapting the plan after {data.get('failed_step')!r} failed")
        return engine
    if type_ == "plan_adaptation_failed":
        engine.stopped = ""
        for state in engine.states.values():
            if state.status == "skipped":
                state.status = "pending"
        return engine
    if seq not in plans:
        raise WorkflowError(f"the plan adapted at event {seq} is not recorded")
    kept = {sid: state for sid, state in engine.states.items()
            if sid != SYNTHESIS and state.status in ("succeeded", "running", "failed")}
    return Engine([WorkflowStep.model_validate(step) for step in plans[seq]], inputs={}, on_failure="continue",
                  backoff=_backoff(), states=kept, started_at=engine.started_at)


def _play(engine: Engine, activations: dict[str, str], *, parent: Run, type_: str, data: dict) -> None:
    if type_ == "workflow_stopped":
        engine.stop(data.get("reason") or "stopped")
        engine.advance_loops()
        return
    step_id = data["step"]
    if type_ == "step_start":
        engine.start(step_id)
        if data.get("restored"):  # a fork's kept or resumed step: the attempt it had reached, not a new one
            engine.states[step_id].attempts = int(data.get("attempt") or 1)
        activations[step_id] = data["activation"]
        return
    usage = {"tokens": int(data.get("prompt_tokens") or 0) + int(data.get("completion_tokens") or 0),
             "cost": float(data.get("cost_usd") or 0)}
    if type_ == "step_complete":
        row = Activation.objects.filter(run=parent, pk=activations[step_id]).first()
        if row is None:
            raise WorkflowError(f"the activation of step {step_id!r} is gone")
        refused = engine.succeed(step_id, set_outputs=dict(row.ctx.outputs or {}),
                                 final_answer=row.result)
        if refused is not None:
            raise WorkflowError(f"step {step_id!r}: {refused.error}")
        engine.states[step_id].tokens, engine.states[step_id].cost = usage["tokens"], usage["cost"]
    else:
        decision = engine.fail(step_id, error=data.get("error", ""), retry=bool(data.get("retry")))
        if decision.retry != bool(data.get("retry")):
            raise WorkflowError(f"step {step_id!r}: the engine decides otherwise on a retry")
    engine.advance_loops()


def _positions(parent: Run, *, seq: int) -> dict[str, int]:
    """The scripted provider's positions at the fork point: per agent, the furthest its sessions ended by then
    had reached (a step restarted plays its agent's turns from there)."""
    ended = Event.objects.filter(run=parent, seq__lte=seq, type="session_end").values_list("session_id", flat=True)
    positions: dict[str, int] = {}
    for agent, state in Session.objects.filter(run=parent, pk__in=ended).values_list("agent", "state"):
        position = ((state or {}).get("cursor") or {}).get(agent)
        if position is not None:
            positions[agent] = max(positions.get(agent, 0), int(position))
    return positions


__all__ = ["workflow_fork"]
