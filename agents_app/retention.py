"""Retention: the bulky records of old finished runs go; the run, its outcome and its sessions stay.

A run finished more than ``MAS_RETENTION_DAYS`` days ago loses its events,
its sessions' checkpoints (``Session.state`` and their ``SessionEntry`` history) and its workspace files
(with their versions, which forks read); its row (status, result, error, totals, versions) and its
sessions' outcomes and usage remain, so lists, costs and audits still add up. Runs still going are
never touched. ``manage.py prune_runs`` and a daily beat task run it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from agents_app.models import Event, Run, Session, SessionEntry, WorkspaceFile, WorkspaceFileVersion
from agents_app.models.runs import FINISHED_RUN_STATUSES


@dataclass(frozen=True)
class Pruned:
    runs: int
    events: int
    checkpoints: int
    files: int


def runs_prune(*, older_than_days: float, batch: int = 500) -> Pruned:
    cutoff = timezone.now() - timedelta(days=older_than_days)
    old = Run.objects.filter(status__in=FINISHED_RUN_STATUSES, finished_at__lt=cutoff)
    runs = events = checkpoints = files = 0
    ids = list(old.values_list("id", flat=True))
    for start in range(0, len(ids), batch):
        chunk = ids[start:start + batch]
        with transaction.atomic():
            events += Event.objects.filter(run_id__in=chunk).delete()[0]
            checkpoints += Session.objects.filter(run_id__in=chunk).exclude(state={}).update(state={})
            SessionEntry.objects.filter(session__run_id__in=chunk).delete()
            files += WorkspaceFile.objects.filter(run_id__in=chunk).delete()[0]
            WorkspaceFileVersion.objects.filter(run_id__in=chunk).delete()
        runs += len(chunk)
    return Pruned(runs=runs, events=events, checkpoints=checkpoints, files=files)
