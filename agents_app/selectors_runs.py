"""Reading runs: always through the team, so another team's run is a 404 like a missing one.

Shared by the runs API, the ``run_agent`` command and the admin.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import F, Func, IntegerField, Q, QuerySet
from django.http import Http404
from django.utils import timezone

from agents_app.execution.hooks import RUN_HOOKS
from agents_app.models import Activation, Event, Run, Session, Team, WorkspaceFile
from mas_core import runs
from mas_core.rows import Columns

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


FORKS_SHOWN = 100


@dataclass(frozen=True)
class RunDetail:
    """A run as its detail shows it (the API's, the run page's): the run with its creator, its activations oldest
    first each with its sessions by attempt, how many of its model requests the cache answered and missed, the
    runs forked from it (the team's, oldest first, the first ``FORKS_SHOWN``: id, fork point ``seq``, status,
    when) and its workflow's steps (None: not a workflow's run)."""

    run: Run
    tree: list[tuple[Activation, list[Session]]]
    cache_hits: int
    cache_misses: int
    forks: list[dict[str, Any]]
    steps: list[dict[str, Any]] | None

    @classmethod
    def new(cls, run: Run) -> RunDetail:
        """A run ``run_start`` has just created, shown without reading it back: the root activation it holds and
        no session, cache use, fork or step yet (an agent's run)."""
        return cls(run=run, tree=[(run.root, [])], cache_hits=0, cache_misses=0, forks=[], steps=None)


RUN_ROW, CREATOR_ROW = Columns(Run), Columns(get_user_model())
ACTIVATION_ROW, SESSION_ROW = Columns(Activation), Columns(Session, without=("state",))

# A run's detail in two statements, hand-written: a hot path (every GET /api/runs/{id}, every poll of a run's
# page), where the ORM compiled six statements over these wide rows at every read (see mas_core.rows). The first
# reads the team's run with its creator, its cache counts (the cache_hit and cache_miss events of memory_app's
# semantic cache) and its forks (as JSON: they are few); the second its activations with their sessions.
_DETAIL_SQL = f"""
SELECT {RUN_ROW.select("r")}, {CREATOR_ROW.select("u")},
  (SELECT count(*) FROM "{Event._meta.db_table}" WHERE run_id = r.id AND type = 'cache_hit'),
  (SELECT count(*) FROM "{Event._meta.db_table}" WHERE run_id = r.id AND type = 'cache_miss'),
  (SELECT json_agg(json_build_array(f.id, f.fork_seq, f.status, f.created_at) ORDER BY f.created_at) FROM (
     SELECT id, fork_seq, status, created_at FROM "{Run._meta.db_table}"
     WHERE forked_from_id = r.id AND team_id = r.team_id ORDER BY created_at LIMIT {FORKS_SHOWN}) AS f)
FROM "{Run._meta.db_table}" AS r
LEFT JOIN "{get_user_model()._meta.db_table}" AS u ON u.id = r.created_by_id
WHERE r.team_id = %(team)s AND r.id = %(run)s"""

_TREE_SQL = f"""
SELECT {ACTIVATION_ROW.select("a")}, {SESSION_ROW.select("s")}
FROM "{Activation._meta.db_table}" AS a
LEFT JOIN "{Session._meta.db_table}" AS s ON s.activation_id = a.id
WHERE a.run_id = %(run)s AND a.team_id = %(team)s
ORDER BY a.created_at, a.id, s.attempt"""


def run_detail(*, team: Team, run_id: Any) -> RunDetail:
    """The run ``run_id`` of ``team`` with all its detail shows (:class:`RunDetail`); 404 for a malformed id, a
    missing run or another team's."""
    params = {"team": team.pk, "run": runs.run_uuid(run_id)}
    with connection.cursor() as cursor:
        cursor.execute(_DETAIL_SQL, params)
        found = cursor.fetchone()
        if found is None:
            raise Http404("no such run")
        cursor.execute(_TREE_SQL, params)
        tree_rows = cursor.fetchall()
    run, creator = RUN_ROW.instance(found[:len(RUN_ROW)]), CREATOR_ROW.instance_or_none(found[len(RUN_ROW):-3])
    run.created_by = creator
    cache_hits, cache_misses, forks = found[-3:]
    return RunDetail(run=run, tree=_tree(tree_rows), cache_hits=cache_hits, cache_misses=cache_misses,
                     forks=[{"id": fork_id, "seq": seq, "status": status, "created_at": datetime.fromisoformat(at)}
                            for fork_id, seq, status, at in forks or []],
                     steps=RUN_HOOKS.run_steps(run))


def _tree(rows) -> list[tuple[Activation, list[Session]]]:
    """The activations of :data:`_TREE_SQL`'s rows, each with its sessions (an activation with none: one row
    of NULLs for them)."""
    tree: list[tuple[Activation, list[Session]]] = []
    split = len(ACTIVATION_ROW)
    for row in rows:
        if not tree or tree[-1][0].pk != row[0]:
            tree.append((ACTIVATION_ROW.instance(row[:split]), []))
        session = SESSION_ROW.instance_or_none(row[split:])
        if session is not None:
            tree[-1][1].append(session)
    return tree


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
