"""Parents and children: spawn, delegate and signal (what the tools ask), and a child's outcome reaching
its parent when it settles.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction
from django.db.models import F, Func, Q
from django.utils import timezone

from agents_app.execution.agents import agent_resolve
from agents_app.execution.errors import LimitExceeded, RunError
from agents_app.execution.runs import DEFAULT_LIMITS, DEFAULT_PRIORITY, activation_create
from agents_app.scheduler import dispatch_later, wake
from agents_app.models import Activation, ActivationContext, Run, Session, WorkspaceFile
from agents_app.models.runs import (
    UNSETTLED_ACTIVATION_STATUSES,
    ActivationStatus,
    SessionStatus,
)
from mas_core.eventlog import event_append as event_emit

CHILD_KINDS = frozenset({"spawn", "delegate"})

SETTLED_ACTIVATION_STATUSES = (ActivationStatus.DONE, ActivationStatus.FAILED, ActivationStatus.CANCELLED)


OUTCOME_KEYS = ("agent", "status", "result", "outputs", "files", "failure")


def child_outcome_of(run: Run, activation: Activation) -> dict[str, Any]:
    """What a settled child hands back: status, result, named outputs, files it wrote, failure report."""
    failure = (Session.objects.filter(activation=activation).order_by("-attempt")
               .values_list("failure", flat=True).first())
    files = (WorkspaceFile.objects.filter(run=run, session__activation=activation).order_by("path")
             .annotate(size=Func(F("content"), function="octet_length")).values_list("path", "size"))
    status = {ActivationStatus.DONE: "ok", ActivationStatus.FAILED: "failed"}.get(activation.status, "cancelled")
    return {"agent": activation.agent, "status": status, "result": activation.result,
            "outputs": activation.ctx.outputs or {},
            "files": [{"path": path, "bytes": size} for path, size in files],
            "failure": failure if status == "failed" else None}


def child_settled(run: Run, child: Activation) -> None:
    """A spawned or delegated child has its outcome: wake the parent waiting for it, or send it as a signal.

    The caller holds the run's lock, so a parent suspending at the same
    moment either sees this child settled or is woken here — never neither.
    """
    outcome = child_outcome_of(run, child)
    child.ctx = child.ctx.replace(outcome=outcome)
    Activation.objects.filter(pk=child.pk).update(context=child.context)
    parent = Activation.objects.select_for_update().get(pk=child.parent_id)
    if child.ctx.wait:
        wake(parent)
    elif child.ctx.notify and parent.status not in {ActivationStatus.CANCELLED}:
        signal = activation_create(
            run=run, agent=parent.agent, kind="signal", parent=parent, priority=parent.priority,
            input=(f"The {child.kind} to {child.agent} you started (activation {child.id}) has ended:\n\n"
                   f"{json.dumps(outcome, ensure_ascii=False)}\n\n(Your original task: {parent.input})"),
        )
        sender = Session.objects.filter(activation=child).order_by("-attempt").values_list("id", flat=True).first()
        event_emit(run_id=run.id, type="signal", agent=child.agent, session_id=sender, data={
            "from": child.agent, "to": parent.agent, "activation": str(signal.id),
            "message": f"{child.kind} ended: {outcome['status']}"})


def children_cancel(run: Run, parent: Activation, *, session_id, reason: str) -> list[str]:
    """Cancel the children the parent's session ``session_id`` started and waits for (it failed, or is to be
    retried) — its custom tools' workers too — with everything they started in turn; returns their ids.

    A suspended child's session ends here, keeping its partial result; a running one is stopped by its
    worker's monitor (which looks every second) and records its own end. The caller holds the run's lock.
    """
    from agents_app.models import ApprovalRequest

    level = list(parent.children.filter(Q(kind__in=CHILD_KINDS, context__wait=True) | Q(kind="tool"),
                                        context__tool_call__startswith=f"{session_id}:",
                                        status__in=UNSETTLED_ACTIVATION_STATUSES).values_list("id", flat=True))
    cancelled: list = []
    while level and len(cancelled) < 10_000:  # a tree is bounded by the run's depth and fan-out limits
        cancelled += level
        level = list(Activation.objects.filter(parent_id__in=level, status__in=UNSETTLED_ACTIVATION_STATUSES)
                     .values_list("id", flat=True))
    if not cancelled:
        return []
    Activation.objects.filter(pk__in=cancelled, status__in=UNSETTLED_ACTIVATION_STATUSES).update(
        status=ActivationStatus.CANCELLED)
    suspended = list(Session.objects.filter(activation_id__in=cancelled, status=SessionStatus.SUSPENDED))
    ApprovalRequest.objects.filter(session__in=suspended, status="pending").update(status="cancelled")
    for session in suspended:
        session.status, session.finished_at = SessionStatus.CANCELLED, timezone.now()
        session.save(update_fields=["status", "finished_at"])
        event_emit(run_id=run.id, type="session_end", agent=session.agent, session_id=session.id,
                   data={"status": "cancelled", "result": session.result[:2000], "meta": session.meta,
                         "failure": None})
    ids = [str(pk) for pk in cancelled]
    event_emit(run_id=run.id, type="children_cancelled", agent=parent.agent, session_id=session_id,
               data={"activations": ids, "reason": reason[:500]})
    return ids


def child_for_call(*, activation_id, call_key: str) -> Activation | None:
    """The child that tool call ``call_key`` of ``activation_id`` started, if it did (a resumed call)."""
    return Activation.objects.filter(parent_id=activation_id, context__tool_call=call_key).first()


def child_spawn(*, activation_id, agent: str, task: str, kind: str, priority: int = DEFAULT_PRIORITY,
                context: ActivationContext | None = None, call_key: str = "", wait: bool = False) -> Activation:
    """A child activation of ``activation_id`` (spawn or delegate), within depth and fan-out limits.

    ``call_key`` identifies the tool call that asks for it: asked again (the
    session resumed), the same child is returned and nothing new starts.
    With ``wait`` the parent's session waits for its outcome (the tool's
    result); without, the outcome reaches the parent's agent as a signal.
    """
    with transaction.atomic():
        parent = Activation.objects.select_related("run").get(pk=activation_id)
        run = Run.objects.select_for_update().get(pk=parent.run_id)
        if call_key:
            existing = child_for_call(activation_id=activation_id, call_key=call_key)
            if existing is not None:
                return existing
        max_depth = int(run.limits.get("max_depth", DEFAULT_LIMITS["max_depth"]))
        max_fanout = int(run.limits.get("max_fanout", DEFAULT_LIMITS["max_fanout"]))
        if parent.depth + 1 > max_depth:
            raise LimitExceeded(f"spawn depth limit reached: {parent.agent} is at depth {parent.depth} "
                                f"and the run allows {max_depth}")
        # Children that have not finished: a failed or retried parent's are cancelled, and count no more.
        unfinished = parent.children.filter(kind__in=CHILD_KINDS, status__in=UNSETTLED_ACTIVATION_STATUSES)
        if unfinished.count() >= max_fanout:
            raise LimitExceeded(f"fan-out limit reached: {parent.agent} already has {max_fanout} children that "
                                f"have not finished")
        agent_resolve(run=run, slug=agent)  # exists?
        context = context or ActivationContext()
        if call_key:
            context = context.replace(tool_call=call_key, wait=wait, notify=not wait)
        # A workflow step's approval policy and guardrails cover the calls made inside the step, its children's too.
        if parent.ctx.step_approval:
            context = context.replace(step_approval=parent.ctx.step_approval)
        if parent.ctx.step_guardrails:
            context = context.replace(step_guardrails=parent.ctx.step_guardrails)
        child = activation_create(run=run, agent=agent, input=task, kind=kind, parent=parent, priority=priority,
                                  context=context)
        event_emit(run_id=run.id, type=kind, agent=parent.agent, data={
            "from": parent.agent, "to": agent, "activation": str(child.id), "task": task[:2000],
            "priority": priority, "wait": wait,
        })
    transaction.on_commit(lambda: dispatch_later(run_id=run.id))
    return child


def parent_signal(*, activation_id, message: str) -> Activation:
    """Re-activate the parent's agent with ``message`` (an error for a root agent)."""
    with transaction.atomic():
        activation = Activation.objects.select_related("run", "parent").get(pk=activation_id)
        parent = activation.parent
        if parent is None:
            raise RunError("signal_parent: this agent is the root of the run and has no parent")
        run = Run.objects.select_for_update().get(pk=activation.run_id)
        signal = activation_create(
            run=run, agent=parent.agent, kind="signal", parent=parent,
            input=f"Message from {activation.agent}:\n\n{message}\n\n(Your original task: {parent.input})",
            priority=parent.priority,
        )
        event_emit(run_id=run.id, type="signal", agent=activation.agent, data={
            "from": activation.agent, "to": parent.agent, "activation": str(signal.id), "message": message[:2000],
        })
    transaction.on_commit(lambda: dispatch_later(run_id=run.id))
    return signal
