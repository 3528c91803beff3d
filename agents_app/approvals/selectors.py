"""Reading a team's requests for a person (the inbox), always through the team."""

from __future__ import annotations

import uuid
from typing import Any

from django.http import Http404

from agents_app.models import ApprovalRequest, Team


def approval_get(*, team: Team, request_id: Any) -> ApprovalRequest:
    """The request ``request_id`` of ``team``; 404 for a malformed id, a missing request or another team's."""
    try:
        key = uuid.UUID(str(request_id))
    except ValueError:
        raise Http404("no such approval request") from None
    request = (ApprovalRequest.objects.filter(team=team, pk=key).select_related("decided_by", "run").first())
    if request is None:
        raise Http404("no such approval request")
    return request


def approval_list(*, team: Team, status: str | None = None, run_id: Any = None, kind: str | None = None,
                  limit: int = 50, offset: int = 0) -> list[ApprovalRequest]:
    """The team's requests across its runs, newest first."""
    rows = ApprovalRequest.objects.filter(team=team).select_related("decided_by", "run")
    if status:
        rows = rows.filter(status=status)
    if kind:
        rows = rows.filter(kind=kind)
    if run_id is not None:
        rows = rows.filter(run_id=run_id)
    return list(rows.order_by("-created_at", "-id")[offset:offset + limit])
