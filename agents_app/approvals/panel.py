"""The dashboard's "Waiting for a person" panel: the team's pending requests, newest first."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agents_app.approvals.selectors import approval_list
from agents_app.dashboard import Panel, panel_register
from agents_app.models import Team

PANEL_ROWS = 10


def _pending(*, team: Team, now: datetime) -> dict[str, Any] | None:
    rows = approval_list(team=team, status="pending", limit=PANEL_ROWS + 1)
    if not rows:
        return None
    return {"requests": rows[:PANEL_ROWS], "more": len(rows) > PANEL_ROWS}


PENDING_APPROVALS = panel_register(
    Panel("pending_approvals", "Waiting for a person", "admin/mas/panels/pending_approvals.html", _pending, order=5))
