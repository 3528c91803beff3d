"""Scheduling a workflow as plain Python: which steps are ready, prompts,
outputs (checked against their schemas), retries and escalation, stop vs
continue, bounded loops, and the final stats.

No ORM here. The engine holds the state of one workflow run in a
JSON-serialisable form (``to_dict`` / ``from_dict``) so that the service that
adapts it to Django can persist it after every transition; a worker that dies
mid-workflow therefore never re-runs a step already recorded as succeeded.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from mas_core.outputs import describe, value_errors
from workflows_app.engine.dag import PLACEHOLDER_RE, find_cycle
from workflows_app.engine.loops import Condition, ConditionError, LoopLike, parse_condition, validate_loops

Status = Literal["pending", "running", "succeeded", "failed", "skipped"]
TERMINAL = frozenset({"succeeded", "failed", "skipped"})
PARTIAL_MARK = "[partial: step {step!r} failed, output {output!r} missing]"
# What a step's prompt shows for a loop step's output before the loop's first round has produced it.
FIRST_ROUND_MARK = "[none yet: this is the first round]"


class StepDef(Protocol):
    id: str
    agent: str
    prompt: str
    depends_on: list[str]
    outputs: list[str]
    max_retries: int
    on_failure: str | None


class WorkflowError(Exception):
    """A workflow cannot be scheduled (cycle, unknown step, bad transition)."""


class MissingOutput(Exception):
    """A step finished without producing every output it declared, or one its schema refuses."""


@dataclass
class StepState:
    id: str
    status: Status = "pending"
    attempts: int = 0
    outputs: dict[str, str] = field(default_factory=dict)
    partial: bool = False  # ran although an upstream step had failed
    error: str = ""
    tier: int = 0  # index on the agent's escalation ladder used by the next attempt
    retry_at: float | None = None
    tokens: int = 0
    cost: float = 0.0
    round: int = 1  # the round of its loop it is in (1 for a step in no loop)
    rounds: list[dict] = field(default_factory=list)  # a loop step's finished rounds: round, status, outputs


@dataclass
class LoopState:
    round: int = 1
    status: str = "running"  # running | met (its condition held) | max_rounds | failed | stopped


@dataclass(frozen=True)
class LoopEvent:
    """What :meth:`Engine.advance_loops` decided for a loop whose round ended."""

    type: Literal["loop_round", "loop_complete"]  # a new round starts / the loop is done
    loop: int
    round: int  # the round that starts, or the last one run
    status: str
    steps: tuple[str, ...]
    outputs: dict  # the outputs of the round that ended, per step


@dataclass(frozen=True)
class Failure:
    """What the engine decided after a failed attempt."""

    retry: bool
    attempt: int  # the attempt that failed (1-based)
    delay: float  # seconds to wait before the next attempt
    tier: int  # escalation tier of the next attempt
    error: str


@dataclass(frozen=True)
class Stats:
    steps_total: int
    succeeded: int
    failed: int
    skipped: int
    duration: float
    tokens: int
    cost: float
    loops: tuple[dict, ...] = ()  # per loop: its steps, rounds run and how it ended


class Engine:
    """The state machine of one workflow run."""

    def __init__(
        self,
        steps: Sequence[StepDef],
        *,
        inputs: Mapping[str, str],
        on_failure: str = "stop",
        backoff: float = 0.0,
        states: Mapping[str, StepState] | None = None,
        started_at: float = 0.0,
        stopped: str = "",
        loops: Sequence[LoopLike] = (),
        loop_states: Sequence[LoopState] | None = None,
    ) -> None:
        ids = [step.id for step in steps]
        if len(set(ids)) != len(ids):
            raise WorkflowError("duplicate step ids")
        edges = {step.id: list(step.depends_on) for step in steps}
        for step in steps:
            for dep in step.depends_on:
                if dep not in edges:
                    raise WorkflowError(f"step {step.id!r} depends on unknown step {dep!r}")
        cycle = find_cycle(edges)
        if cycle:
            raise WorkflowError("cycle: " + " → ".join(cycle))
        if on_failure not in ("stop", "continue"):
            raise WorkflowError(f"on_failure must be 'stop' or 'continue', not {on_failure!r}")
        problems = validate_loops(steps, loops)
        if problems:
            raise WorkflowError(str(problems[0]))
        self.loops = list(loops)
        try:
            self.conditions: list[Condition | None] = [
                parse_condition(loop.until) if loop.until else None for loop in loops]
        except ConditionError as error:
            raise WorkflowError(str(error)) from None
        self.loop_of = {sid: index for index, loop in enumerate(loops) for sid in loop.steps}
        self.loop_states = list(loop_states) if loop_states else [LoopState() for _ in loops]
        if len(self.loop_states) != len(self.loops):
            raise WorkflowError(f"state for {len(self.loop_states)} loop(s), but the workflow has {len(self.loops)}")
        self.steps = {step.id: step for step in steps}
        self.order = ids
        self.inputs = dict(inputs)
        self.on_failure = on_failure
        self.backoff = backoff
        self.started_at = started_at
        self.stopped = stopped  # reason the run stopped early ("" while it may go on)
        self.states = {sid: StepState(id=sid) for sid in ids}
        if states:
            for sid, state in states.items():
                if sid not in self.states:
                    raise WorkflowError(f"state for unknown step {sid!r}")
                self.states[sid] = state

    # -- persistence -----------------------------------------------------

    def to_dict(self) -> dict:
        return {
            "inputs": self.inputs,
            "started_at": self.started_at,
            "stopped": self.stopped,
            "steps": {sid: asdict(state) for sid, state in self.states.items()},
            "loops": [asdict(state) for state in self.loop_states],
        }

    @classmethod
    def from_dict(cls, steps: Sequence[StepDef], data: Mapping, *, on_failure: str = "stop", backoff: float = 0.0,
                  loops: Sequence[LoopLike] = ()) -> Engine:
        states = {sid: StepState(**raw) for sid, raw in data.get("steps", {}).items()}
        return cls(
            steps,
            inputs=data.get("inputs", {}),
            on_failure=on_failure,
            backoff=backoff,
            states=states,
            started_at=data.get("started_at", 0.0),
            stopped=data.get("stopped", ""),
            loops=loops,
            loop_states=[LoopState(**raw) for raw in data.get("loops", [])] or None,
        )

    # -- scheduling ------------------------------------------------------

    def policy(self, step_id: str) -> str:
        return self.steps[step_id].on_failure or self.on_failure

    def ready(self, *, now: float | None = None) -> list[str]:
        """Pending steps that may start now, in definition order.

        A step is ready when every dependency succeeded, or failed under an
        ``on_failure: continue`` policy (the step then runs on partial
        results) — and, for a dependency in a loop the step is not in, when
        that loop is done. A step waiting for its retry delay is not ready
        before ``retry_at``.
        """
        if self.stopped:
            return []
        ready = []
        for sid in self.order:
            state = self.states[sid]
            if state.status != "pending":
                continue
            if state.retry_at is not None and now is not None and now < state.retry_at:
                continue
            if all(self._satisfied(dep, sid) for dep in self.steps[sid].depends_on):
                ready.append(sid)
        return ready

    def _satisfied(self, dep: str, step_id: str) -> bool:
        state = self.states[dep]
        if not (state.status == "succeeded" or (state.status == "failed" and self.policy(dep) == "continue")):
            return False
        loop = self.loop_of.get(dep)
        return loop is None or loop == self.loop_of.get(step_id) or self.loop_states[loop].status != "running"

    def start(self, step_id: str) -> str:
        """Mark a step running, count the attempt, and return its prompt."""
        state = self._state(step_id, expect=("pending",))
        state.status = "running"
        state.attempts += 1
        state.retry_at = None
        state.partial = any(self.states[dep].status == "failed" for dep in self.steps[step_id].depends_on)
        return self.render(step_id)

    def render(self, step_id: str) -> str:
        """Substitute ``{input}``, ``{input.name}`` and ``{step.output}`` (its latest round's value)."""
        loop = self.loop_of.get(step_id)

        def substitute(match) -> str:
            name, output = match.group(1), match.group(2)
            if output is None:
                return self.inputs.get(name, match.group(0))
            if name == "input" and output in self.inputs and name not in self.steps:
                return self.inputs[output]
            upstream = self.states.get(name)
            if upstream is None:
                return match.group(0)
            if output in upstream.outputs:
                return upstream.outputs[output]
            if loop is not None and self.loop_of.get(name) == loop:
                return FIRST_ROUND_MARK
            return PARTIAL_MARK.format(step=name, output=output)

        return PLACEHOLDER_RE.sub(substitute, self.steps[step_id].prompt)

    @staticmethod
    def collect_outputs(step: StepDef, *, set_outputs: Mapping[str, Any], final_answer: str | None) -> dict[str, str]:
        """The outputs of a finished attempt as text, or MissingOutput naming what lacks or what its
        schema refuses (``output_schemas``; a set_output value is any JSON value)."""
        outputs = {name: value for name, value in set_outputs.items() if name in step.outputs}
        if len(step.outputs) == 1 and step.outputs[0] not in outputs and final_answer:
            outputs[step.outputs[0]] = final_answer
        missing = [name for name in step.outputs if name not in outputs]
        if missing:
            raise MissingOutput(
                f"step {step.id!r} did not produce declared output(s) {', '.join(repr(m) for m in missing)}"
                " (call set_output, or declare a single output to use the final answer)"
            )
        schemas = getattr(step, "output_schemas", None) or {}
        refused = {name: value_errors(schemas[name], value) for name, value in outputs.items() if name in schemas}
        refused = {name: errors for name, errors in refused.items() if errors}
        if refused:
            raise MissingOutput(f"step {step.id!r} produced output(s) that do not match their schema: " + "; ".join(
                f"{name}:\n{describe(errors)}" for name, errors in refused.items()))
        return {name: _text(value) for name, value in outputs.items()}

    def succeed(
        self,
        step_id: str,
        *,
        set_outputs: Mapping[str, Any] | None = None,
        final_answer: str | None = None,
        tokens: int = 0,
        cost: float = 0.0,
        now: float | None = None,
        escalation_tiers: int = 0,
    ) -> Failure | None:
        """Record a finished attempt. A missing declared output turns it into
        a failure, returned as the engine's retry decision; None on success."""
        state = self._state(step_id, expect=("running",))
        state.tokens += tokens
        state.cost += cost
        try:
            state.outputs = self.collect_outputs(self.steps[step_id], set_outputs=set_outputs or {}, final_answer=final_answer)
        except MissingOutput as exc:
            return self._failed(state, str(exc), now=now, escalation_tiers=escalation_tiers)
        state.status = "succeeded"
        state.error = ""
        return None

    def fail(
        self, step_id: str, *, error: str, tokens: int = 0, cost: float = 0.0, now: float | None = None,
        escalation_tiers: int = 0, retry: bool = True,
    ) -> Failure:
        """Record a failed attempt; retry (with backoff, one tier up the
        agent's escalation ladder) while ``max_retries`` allows, unless ``retry`` is False."""
        state = self._state(step_id, expect=("running",))
        state.tokens += tokens
        state.cost += cost
        return self._failed(state, error, now=now, escalation_tiers=escalation_tiers, retry=retry)

    def _failed(self, state: StepState, error: str, *, now: float | None, escalation_tiers: int,
                retry: bool = True) -> Failure:
        attempt = state.attempts
        state.error = error
        if retry and attempt <= self.steps[state.id].max_retries and not self.stopped:
            base = getattr(self.steps[state.id], "backoff", None)
            delay = (self.backoff if base is None else base) * (2 ** (attempt - 1))
            state.status = "pending"
            state.tier = min(attempt, escalation_tiers)
            state.retry_at = (now + delay) if now is not None else None
            return Failure(retry=True, attempt=attempt, delay=delay, tier=state.tier, error=error)
        state.status = "failed"
        if self.policy(state.id) == "stop":
            self.stop(f"step {state.id!r} failed: {error}")
        return Failure(retry=False, attempt=attempt, delay=0.0, tier=state.tier, error=error)

    def stop(self, reason: str) -> list[str]:
        """Stop scheduling (a failed step under ``stop``, the budget): every
        pending step is skipped; running steps may still finish. Returns the
        skipped ids."""
        if not self.stopped:
            self.stopped = reason
        skipped = []
        for sid in self.order:
            if self.states[sid].status == "pending":
                self.states[sid].status = "skipped"
                self.states[sid].retry_at = None
                skipped.append(sid)
        return skipped

    # -- loops -----------------------------------------------------------

    def advance_loops(self) -> list[LoopEvent]:
        """Decide for every loop whose round has ended: another round, or done.

        A round ends when each of the loop's steps is terminal. Done when a
        step of the round failed (``failed``) or was skipped because the run
        stopped (``stopped``), when ``until`` holds on the round's outputs (``met``),
        or after ``max_rounds`` rounds. Otherwise the loop's steps are pending
        again in the next round, their latest outputs kept for its prompts.
        Every finished round of a step is kept in its ``rounds``.
        """
        events = []
        for index, loop in enumerate(self.loops):
            state = self.loop_states[index]
            members = [self.states[sid] for sid in loop.steps]
            if state.status != "running" or any(member.status not in TERMINAL for member in members):
                continue
            outputs = {member.id: dict(member.outputs) if member.status == "succeeded" else {}
                       for member in members}
            for member in members:
                member.rounds.append({"round": state.round, "status": member.status,
                                      "outputs": outputs[member.id]})
            condition = self.conditions[index]
            if any(member.status == "failed" for member in members):
                state.status = "failed"
            elif any(member.status != "succeeded" for member in members):
                state.status = "stopped"  # skipped: the run stopped
            elif condition is not None and condition.met(outputs[condition.step].get(condition.output, "")):
                state.status = "met"
            elif state.round >= loop.max_rounds:
                state.status = "max_rounds"
            elif self.stopped:
                state.status = "stopped"
            else:
                state.round += 1
                for member in members:
                    member.status, member.attempts, member.error, member.retry_at = "pending", 0, "", None
                    member.round, member.partial, member.tier = state.round, False, 0
                events.append(LoopEvent("loop_round", index, state.round, "running", tuple(loop.steps), outputs))
                continue
            events.append(LoopEvent("loop_complete", index, state.round, state.status, tuple(loop.steps), outputs))
        return events

    # -- outcome ---------------------------------------------------------

    @property
    def finished(self) -> bool:
        return (all(state.status in TERMINAL for state in self.states.values())
                and all(loop.status != "running" for loop in self.loop_states))

    @property
    def running(self) -> list[str]:
        return [sid for sid in self.order if self.states[sid].status == "running"]

    def outcome(self) -> str:
        """'running' until every step is terminal; then 'succeeded' when all
        steps succeeded, 'partial' when some failed under ``continue`` and the
        run was not stopped, else 'failed'."""
        if not self.finished:
            return "running"
        statuses = [state.status for state in self.states.values()]
        if all(status == "succeeded" for status in statuses):
            return "succeeded"
        if self.stopped or "skipped" in statuses:
            return "failed"
        return "partial"

    def results(self) -> dict[str, dict]:
        """Per-step outputs, with partial results marked."""
        return {
            sid: {"status": state.status, "outputs": dict(state.outputs), "partial": state.partial or state.status != "succeeded"}
            for sid, state in ((sid, self.states[sid]) for sid in self.order)
        }

    def stats(self, *, now: float) -> Stats:
        states = list(self.states.values())
        return Stats(
            steps_total=len(states),
            succeeded=sum(s.status == "succeeded" for s in states),
            failed=sum(s.status == "failed" for s in states),
            skipped=sum(s.status == "skipped" for s in states),
            duration=round(max(0.0, now - self.started_at), 3),
            tokens=sum(s.tokens for s in states),
            cost=round(sum(s.cost for s in states), 6),
            loops=tuple({"loop": index, "steps": list(loop.steps), "rounds": self.loop_states[index].round,
                         "status": self.loop_states[index].status} for index, loop in enumerate(self.loops)),
        )

    def _state(self, step_id: str, *, expect: Iterable[str]) -> StepState:
        if step_id not in self.states:
            raise WorkflowError(f"unknown step {step_id!r}")
        state = self.states[step_id]
        if state.status not in expect:
            raise WorkflowError(f"step {step_id!r} is {state.status}, expected {' or '.join(expect)}")
        return state


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


__all__ = ["FIRST_ROUND_MARK", "PARTIAL_MARK", "Engine", "Failure", "LoopEvent", "LoopState", "MissingOutput",
           "Stats", "StepState", "WorkflowError"]
