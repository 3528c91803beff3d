"""A suspended session's activation waits for its children and for people; settled, it is queued again."""

from __future__ import annotations

from agents_app.models import Activation, ApprovalRequest, Session
from agents_app.models.runs import UNSETTLED_ACTIVATION_STATUSES, ActivationStatus, SessionStatus


def awaited(activation: Activation) -> list[str]:
    """What the activation's suspended session still waits for: its children, and requests pending for a
    person."""
    session_id = (Session.objects.filter(activation=activation,
                                         status__in=[SessionStatus.SUSPENDED, SessionStatus.RUNNING])
                  .order_by("-attempt").values_list("id", flat=True).first())
    if session_id is None:
        return []
    children = [str(pk) for pk in activation.children.filter(
        context__wait=True, context__tool_call__startswith=f"{session_id}:",
        status__in=UNSETTLED_ACTIVATION_STATUSES).values_list("id", flat=True)]
    requests = [str(pk) for pk in ApprovalRequest.objects.filter(session_id=session_id, status="pending")
                .values_list("id", flat=True)]
    return children + requests


def wake(activation: Activation) -> bool:
    """Queue the suspended activation again if nothing it waits for is left (its row locked by the caller,
    under its run's lock); the caller's :func:`~agents_app.scheduler.dispatch` then admits it. Returns
    whether it was queued."""
    if activation.status != ActivationStatus.SUSPENDED or awaited(activation):
        return False
    activation.status = ActivationStatus.QUEUED
    activation.save(update_fields=["status"])
    return True
