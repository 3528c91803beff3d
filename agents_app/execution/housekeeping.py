"""A team tidying its run list: archive a run (hidden from lists, kept whole) or delete it for good.

Deleting takes the run's events, workspace files, activations, sessions and
workflow state with it (their foreign keys cascade); memories it stored stay
with the team and forget the run. A run still queued or running is refused:
cancel it first, so no worker writes into rows that are going away.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from agents_app.execution.errors import RunError
from agents_app.models import Event, Run, WorkspaceFile
from agents_app.models.runs import FINISHED_RUN_STATUSES

logger = logging.getLogger(__name__)


class RunBusy(RunError):
    """The run has not finished: it cannot be deleted yet."""


@dataclass(frozen=True)
class RunDeleted:
    run_id: str
    events: int
    files: int


def run_archive(*, run: Run, archived: bool = True) -> Run:
    """Archive the run (or bring it back with ``archived=False``); archiving again keeps the first date."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk, team_id=run.team_id)
        if archived and run.archived_at is None:
            run.archived_at = timezone.now()
        elif not archived:
            run.archived_at = None
        run.save(update_fields=["archived_at"])
    return run


def run_delete(*, run: Run, user=None) -> RunDeleted:
    """Delete a finished run with everything it wrote; ``RunBusy`` while it is queued or running."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk, team_id=run.team_id)
        if run.status not in FINISHED_RUN_STATUSES:
            raise RunBusy(f"the run is still {run.status}: cancel it before deleting it")
        events = Event.objects.filter(run=run).count()
        files = WorkspaceFile.objects.filter(run=run).count()
        run_id = str(run.pk)
        run.delete()
    logger.info("run deleted", extra={"run_id": run_id, "team_id": run.team_id, "events": events, "files": files,
                                      "user": str(user) if user else ""})
    return RunDeleted(run_id=run_id, events=events, files=files)
