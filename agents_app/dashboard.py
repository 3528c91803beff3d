"""The team dashboard on the admin index: what runs, what failed, what it cost, what waits for someone.

The page is a list of panels, one registry for all of them. Each panel has a
template and a function that builds its context for one team, or returns
``None`` when it has nothing to show (the panel is then left out). A later
feature adds its panel from its ``AppConfig.ready`` with
:func:`panel_register` — pending approvals, for one — without touching this
module or the template.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Callable

from django.db.models import Count, Q, Sum
from django.utils import timezone

from agents_app.models import Run, Session, Team
from agents_app.models.runs import RunStatus
from agents_app.money import money_display
from agents_app.selectors_runs import run_filter

RECENT_RUNS = 10
COST_ROWS = 20  # agents per cost table; the rest are summed in one "other agents" row
MAX_TEAMS = 20  # teams on one page (a superuser sees every team)


# -- the registry -------------------------------------------------------------------------


@dataclass(frozen=True)
class Panel:
    """One box of the dashboard: ``context(team=…, now=…)`` returns its template's context, or None to hide it."""

    name: str
    title: str
    template: str
    context: Callable[..., dict[str, Any] | None]
    order: int = 100


_PANELS: dict[str, Panel] = {}


def panel_register(panel: Panel) -> Panel:
    """Add ``panel`` to every team's dashboard; names are unique (a second registration is a bug)."""
    if not panel.name or not panel.template:
        raise ValueError("a dashboard panel needs a name and a template")
    if panel.name in _PANELS and _PANELS[panel.name] != panel:
        raise ValueError(f"a dashboard panel named {panel.name!r} is already registered")
    _PANELS[panel.name] = panel
    return panel


def panels() -> list[Panel]:
    return sorted(_PANELS.values(), key=lambda panel: (panel.order, panel.name))


@dataclass
class RenderedPanel:
    panel: Panel
    context: dict[str, Any]


@dataclass
class TeamDashboard:
    team: Team
    panels: list[RenderedPanel]
    can_run: bool = False  # the reader may decide requests and start runs in this team (the role's ``run``)


def dashboard_for(*, teams: list[Team], now: datetime | None = None,
                  run_team_ids: set[int] | None = frozenset()) -> list[TeamDashboard]:
    """The dashboard of each of ``teams`` (at most ``MAX_TEAMS``), with the panels that have something to show.

    ``run_team_ids``: the teams in which the reader's role allows running and deciding (``None``: every team,
    a superuser); the panels offer their buttons there only.
    """
    now = now or timezone.now()
    boards = []
    for team in teams[:MAX_TEAMS]:
        rendered = []
        for panel in panels():
            context = panel.context(team=team, now=now)
            if context is not None:
                rendered.append(RenderedPanel(panel=panel, context=context))
        can_run = run_team_ids is None or team.pk in run_team_ids
        boards.append(TeamDashboard(team=team, panels=rendered, can_run=can_run))
    return boards


# -- the figures --------------------------------------------------------------------------


def day_start(now: datetime) -> datetime:
    """Midnight of ``now``'s day in the server's time zone (``TIME_ZONE``)."""
    local = timezone.localtime(now)
    return local.replace(hour=0, minute=0, second=0, microsecond=0)


def month_start(now: datetime) -> datetime:
    return day_start(now).replace(day=1)


@dataclass(frozen=True)
class RunCounts:
    running: int
    waiting: int
    queued: int
    failed_today: int


def failed_today(now: datetime) -> Q:
    """Runs that failed since midnight, as the runs page lists runs: not archived (someone dealt with it), not
    the case of an eval (the eval's page reports those)."""
    today = day_start(now)
    return Q(status=RunStatus.FAILED, is_eval=False, archived_at__isnull=True) & (
        Q(finished_at__gte=today) | Q(finished_at__isnull=True, created_at__gte=today))


def run_counts(*, team: Team, now: datetime) -> RunCounts:
    """Runs working now, runs waiting for a person's decision, runs queued for a worker, and runs that failed
    since midnight (:func:`failed_today`)."""
    runs = Run.objects.filter(team=team)
    counts = runs.order_by().aggregate(
        running=_count(Q(status=RunStatus.RUNNING)),
        waiting=_count(Q(status=RunStatus.WAITING)),
        queued=_count(Q(status=RunStatus.QUEUED)),
        failed_today=_count(failed_today(now)),
    )
    return RunCounts(**counts)


def runs_failed_today(*, team: Team, now: datetime, limit: int) -> list[Run]:
    """The newest ``limit`` runs of :func:`failed_today`, through the runs page's selector."""
    runs = run_filter(team=team, status=RunStatus.FAILED, archived="exclude").filter(failed_today(now))
    return list(runs.select_related(None).only("id", "agent", "workflow", "status", "error", "created_at",
                                               "finished_at", "team_id")[:limit])


def _count(condition: Q) -> Count:
    return Count("pk", filter=condition)


@dataclass(frozen=True)
class CostRow:
    agent: str
    cost: Decimal

    @property
    def display(self) -> str:
        return money_display(self.cost)


@dataclass(frozen=True)
class CostTable:
    rows: list[CostRow]
    total: Decimal

    @property
    def total_display(self) -> str:
        return money_display(self.total)


def cost_by_agent(*, team: Team, since: datetime) -> CostTable:
    """What each agent's sessions started since ``since`` cost, most expensive first."""
    sums = (
        Session.objects.filter(run__team=team, started_at__gte=since)
        .order_by()
        .values("agent")
        .annotate(cost=Sum("cost_usd"))
        .order_by("-cost", "agent")
    )
    rows = [CostRow(agent=row["agent"], cost=row["cost"] or Decimal(0)) for row in sums]
    total = sum((row.cost for row in rows), Decimal(0))
    if len(rows) > COST_ROWS:
        rest = sum((row.cost for row in rows[COST_ROWS - 1:]), Decimal(0))
        rows = [*rows[: COST_ROWS - 1], CostRow(agent=f"{len(rows) - COST_ROWS + 1} other agents", cost=rest)]
    return CostTable(rows=rows, total=total)


def recent_runs(*, team: Team, limit: int = RECENT_RUNS) -> list[Run]:
    """The team's newest runs as the runs page lists them (``run_filter``): no archived run, no eval case."""
    return list(
        run_filter(team=team, archived="exclude").select_related(None)
        .only("id", "agent", "workflow", "status", "cost_usd", "created_at", "team_id")[:limit]
    )


# -- the built-in panels ------------------------------------------------------------------------


def _activity(*, team: Team, now: datetime) -> dict[str, Any]:
    return {"counts": run_counts(team=team, now=now)}


def _costs(*, team: Team, now: datetime) -> dict[str, Any]:
    return {"today": cost_by_agent(team=team, since=day_start(now)),
            "month": cost_by_agent(team=team, since=month_start(now))}


def _recent(*, team: Team, now: datetime) -> dict[str, Any]:
    return {"runs": [{"run": run, "cost": money_display(run.cost_usd)} for run in recent_runs(team=team)]}


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def _queue(*, team: Team, now: datetime) -> dict[str, Any] | None:
    """The team's queue in the scheduler: depth, sessions running against its limit, recent waits (hidden
    while the team has had nothing to run for a while)."""
    from agents_app.scheduler import WAIT_WINDOW_S, team_queues

    [queue] = team_queues(team_ids=[team.pk])
    if not (queue.ready or queue.running or queue.claimed):
        return None
    return {"queue": queue, "wait_p50": _seconds(queue.wait_p50_s), "wait_p95": _seconds(queue.wait_p95_s),
            "oldest": _seconds(queue.oldest_ready_s if queue.ready else None), "claimed": queue.claimed,
            "window_min": WAIT_WINDOW_S // 60}


GUARDRAIL_ROWS = 20  # guardrail and action pairs in the panel


def guardrails_fired(*, team: Team, since: datetime) -> list[dict[str, Any]]:
    """How often each of the team's guardrails fired since ``since``, by action (``guardrail_triggered`` events of
    the team's runs started since then), most first."""
    from django.db.models import Count

    from agents_app.models import Event

    return list(Event.objects.filter(run__team=team, run__created_at__gte=since, type="guardrail_triggered")
                .values("data__guardrail", "data__action").annotate(count=Count("id"))
                .order_by("-count", "data__guardrail", "data__action")[:GUARDRAIL_ROWS])


def _guardrails(*, team: Team, now: datetime) -> dict[str, Any] | None:
    """Today's guardrail firings (hidden on a day with none)."""
    rows = guardrails_fired(team=team, since=day_start(now))
    if not rows:
        return None
    return {"rows": [{"guardrail": row["data__guardrail"], "action": row["data__action"], "count": row["count"]}
                     for row in rows]}


panel_register(Panel("activity", "Runs", "admin/mas/panels/activity.html", _activity, order=10))
panel_register(Panel("guardrails", "Guardrails today", "admin/mas/panels/guardrails.html", _guardrails, order=25))
panel_register(Panel("queue", "Queue", "admin/mas/panels/queue.html", _queue, order=15))
panel_register(Panel("costs", "Cost by agent", "admin/mas/panels/costs.html", _costs, order=20))
panel_register(Panel("recent_runs", "Recent runs", "admin/mas/panels/recent_runs.html", _recent, order=30))
