"""Reading runs: always through the team, so another team's run is a 404 like a missing one.

Shared by the runs API, the ``run_agent`` command and the admin.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any

from django.db.models import F, Func, IntegerField, Prefetch, Q, QuerySet
from django.http import Http404
from django.utils import timezone

from agents_app.models import Activation, Event, Run, Session, Team, WorkspaceFile
from mas_core import runs

EVENTS_DEFAULT_LIMIT = 500
EVENTS_MAX_LIMIT = 5000


def run_get(*, team: Team, run_id: Any) -> Run:
    """The run ``run_id`` of ``team`` with its creator; 404 for a malformed id, a missing run or another team's."""
    return runs.run_get(team=team, run_id=run_id, related=("created_by",))


ARCHIVED_CHOICES = ("exclude", "only", "include")
TRIGGERS = ("manual", "schedule", "channel")  # how a run started: by someone, by a schedule, by a channel message
SEARCH_MAX_CHARS = 200


def run_filter(*, team: Team, status: str | None = None, agent: str | None = None, workflow: str | None = None,
               search: str = "", created_from: date | None = None, created_to: date | None = None,
               archived: str = "include", evals: bool | None = False, trigger: str | None = None) -> QuerySet[Run]:
    """The team's runs, newest first, filtered.

    ``agent`` and ``workflow`` match the root agent's or the workflow's slug; ``search`` finds
    words in the task or the result (case-insensitive, every word); ``created_from`` and
    ``created_to`` are days, both included (the server's time zone); ``archived`` is
    ``exclude`` (the default of lists), ``only`` or ``include``. The cases of evals are left out
    (``evals=False``), the only ones (``True``), or both (``None``). ``trigger`` is how the run started
    (``TRIGGERS``): runs of agents are all ``manual``, runs of workflows carry their trigger.
    """
    if archived not in ARCHIVED_CHOICES:
        raise ValueError(f"archived must be one of {', '.join(ARCHIVED_CHOICES)}")
    if trigger is not None and trigger not in TRIGGERS:
        raise ValueError(f"trigger must be one of {', '.join(TRIGGERS)}")
    runs: QuerySet[Run] = Run.objects.filter(team=team).select_related("created_by")
    if evals is not None:
        runs = runs.filter(is_eval=evals)
    if status:
        runs = runs.filter(status=status)
    if agent:
        runs = runs.filter(agent=agent)
    if workflow:
        runs = runs.filter(workflow=workflow)
    if trigger == "manual":
        runs = runs.filter(Q(workflow_run__isnull=True) | Q(workflow_run__trigger="manual"))
    elif trigger:
        runs = runs.filter(workflow_run__trigger=trigger)
    for word in search[:SEARCH_MAX_CHARS].split()[:10]:
        runs = runs.filter(Q(input__icontains=word) | Q(result__icontains=word))
    tz = timezone.get_current_timezone()
    if created_from:
        runs = runs.filter(created_at__gte=datetime.combine(created_from, time.min, tzinfo=tz))
    if created_to:
        runs = runs.filter(created_at__lt=datetime.combine(created_to + timedelta(days=1), time.min, tzinfo=tz))
    if archived == "exclude":
        runs = runs.filter(archived_at__isnull=True)
    elif archived == "only":
        runs = runs.filter(archived_at__isnull=False)
    return runs.order_by("-created_at", "-pk")


def run_list(*, team: Team, status: str | None = None, agent: str | None = None, workflow: str | None = None,
             limit: int = 50, offset: int = 0, **filters: Any) -> list[Run]:
    """A page of ``run_filter``: the team's runs, newest first (every run unless ``archived`` says otherwise)."""
    runs = run_filter(team=team, status=status, agent=agent, workflow=workflow, **filters)
    return list(runs[offset:offset + limit])


def run_duration_s(run: Run) -> float | None:
    """Seconds from start to finish, or to now while it runs; None before it starts."""
    start = run.started_at
    if start is None:
        return None
    end = run.finished_at or timezone.now()
    return round(max(0.0, (end - start).total_seconds()), 3)


def run_tree(*, run: Run) -> list[Activation]:
    """The run's activations, oldest first, each with its sessions (``.sessions.all()`` is prefetched)."""
    sessions = Prefetch("sessions", queryset=Session.objects.order_by("attempt").defer("state"))
    return list(run.activations.order_by("created_at", "pk").prefetch_related(sessions))


def run_events(*, run: Run, after: int = 0, limit: int = EVENTS_DEFAULT_LIMIT) -> list[Event]:
    """Events of ``run`` with ``seq > after``, in order, at most ``limit`` (capped at 5000)."""
    limit = max(1, min(limit, EVENTS_MAX_LIMIT))
    return list(Event.objects.filter(run=run, seq__gt=after).order_by("seq")[:limit])


def run_files(*, run: Run) -> QuerySet[WorkspaceFile]:
    """The run's workspace files by path, with ``size`` in bytes and without their content."""
    size = Func(F("content"), function="octet_length", output_field=IntegerField())
    return WorkspaceFile.objects.filter(run=run).order_by("path").defer("content").annotate(size=size)


def run_file_get(*, run: Run, path: str) -> WorkspaceFile:
    file = WorkspaceFile.objects.filter(run=run, path=path).first()
    if file is None:
        raise Http404(f"no file {path!r} in this run")
    return file


def file_size(file: WorkspaceFile) -> int:
    size = getattr(file, "size", None)
    return size if size is not None else len(file.content.encode("utf-8"))


FORKS_SHOWN = 100


def run_forks(*, run: Run) -> list[dict[str, Any]]:
    """The runs forked from ``run`` (its team's), oldest first: id, fork point, status, when."""
    forks = (Run.objects.filter(team_id=run.team_id, forked_from=run).order_by("created_at")
             .values("id", "fork_seq", "status", "created_at")[:FORKS_SHOWN])
    return [{"id": str(fork["id"]), "seq": fork["fork_seq"], "status": fork["status"],
             "created_at": fork["created_at"]} for fork in forks]
