"""The dashboard's first block, "Needs you": what waits for a person in the team, each with what to do about it.

Tool calls and workflow gates waiting for approval, ``ask_human`` questions
waiting for an answer (both only while their run still waits for them), and
the runs that failed today. A person whose role allows it decides a request
in place: the buttons post to ``POST /api/approvals/<id>`` with the page's
session and CSRF token (``mas_admin/needs_you.js``), the endpoint, checks
and service (``approval_decide``) of the monitor and the API. A failed run
links to its live monitor. The counts are of everything waiting, the lists
show the newest ``NEEDS_ROWS`` of each.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Q

from agents_app.dashboard import Panel, failed_today, panel_register, runs_failed_today
from agents_app.models import ApprovalRequest, Run, Team
from agents_app.models.approvals import RequestKind, RequestStatus
from agents_app.models.runs import FINISHED_RUN_STATUSES

NEEDS_ROWS = 10
ARGUMENTS_CHARS = 300  # of a call's arguments shown in the block (the request's page shows them whole)
ERROR_CHARS = 200


@dataclass(frozen=True)
class NeedsCounts:
    approvals: int  # tool calls and gates
    questions: int
    failed_today: int

    @property
    def total(self) -> int:
        return self.approvals + self.questions + self.failed_today


def waiting_requests() -> Q:
    """Pending requests whose run still waits for them (a finished run's pending request is decided by no one)."""
    return Q(status=RequestStatus.PENDING) & ~Q(run__status__in=FINISHED_RUN_STATUSES)


def needs_counts(*, team: Team, now: datetime) -> NeedsCounts:
    requests = ApprovalRequest.objects.filter(waiting_requests(), team=team).order_by().aggregate(
        questions=Count("pk", filter=Q(kind=RequestKind.QUESTION)),
        approvals=Count("pk", filter=~Q(kind=RequestKind.QUESTION)))
    failed = Run.objects.filter(failed_today(now), team=team).order_by().count()
    return NeedsCounts(approvals=requests["approvals"], questions=requests["questions"], failed_today=failed)


def needs_requests(*, team: Team, limit: int = NEEDS_ROWS) -> list[ApprovalRequest]:
    """The team's waiting requests, oldest deadline first (what expires first is decided first)."""
    return list(ApprovalRequest.objects.filter(waiting_requests(), team=team)
                .only("id", "run_id", "agent", "kind", "tool", "arguments", "question", "choices", "reason",
                      "deadline", "default_outcome", "created_at", "team_id")
                .order_by("deadline", "created_at", "id")[:limit])


def _arguments(request: ApprovalRequest) -> str:
    text = json.dumps(request.arguments, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= ARGUMENTS_CHARS else text[:ARGUMENTS_CHARS - 1] + "…"


def _error(run: Run) -> str:
    text = " ".join((run.error or "").split())
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS - 1] + "…"


def _needs_you(*, team: Team, now: datetime) -> dict[str, Any]:
    counts = needs_counts(team=team, now=now)
    requests = needs_requests(team=team) if counts.approvals or counts.questions else []
    failed = runs_failed_today(team=team, now=now, limit=NEEDS_ROWS) if counts.failed_today else []
    return {
        "counts": counts,
        "requests": [{"request": request, "arguments": _arguments(request)} for request in requests],
        "failed": [{"run": run, "error": _error(run)} for run in failed],
        "more_requests": counts.approvals + counts.questions > len(requests),
        "more_failed": counts.failed_today > len(failed),
    }


NEEDS_YOU = panel_register(Panel("needs_you", "Needs you", "admin/mas/panels/needs_you.html", _needs_you, order=1))
