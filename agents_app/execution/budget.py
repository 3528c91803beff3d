"""A run's budget on the worker's hot path: a model call's worst case is reserved before it is made.

Reading the run's cost and then calling lets ``max_concurrency`` sessions
each make the last allowed call. Instead, before each call the session
reserves the call's worst case — its estimated prompt and at most
``max_tokens`` of answer, at the prices of the model actually called (for a
compaction, the small model that writes the summary), and one use of the
large tier when that model is large — in one statement that locks the run's
row, checks ``cost_usd + reserved_usd + worst_case`` against ``max_cost_usd``
(and the large uses against ``max_large_tier_uses``) and reserves only when
it fits. The
reservation is released by the store's write that adds the call's real cost
(``store.WRITE_SQL``), or by that write alone when the call failed; what a
session still holds when it is claimed again, suspended or settled is
released then (:func:`reservation_release`).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest

from agents_app.models import Run, Session
from agents_app.money import money_display, money_str
from mas_core.eventlog import event_append as event_emit

# One round trip: lock the run's row (``cur``, the latest version), decide (``ok``), reserve (``r``) and
# note the reservation on the session (``s``) when it fits. Two sessions reserving at once queue on the lock.
RESERVE_SQL = """
WITH cur AS (
  SELECT cost_usd, reserved_usd, large_tier_uses, budget_warned, reserved_large FROM agents_app_run
  WHERE id = %(run)s::uuid FOR UPDATE
), ok AS (
  SELECT (%(max)s::numeric IS NULL OR cost_usd + reserved_usd + %(worst)s::numeric <= %(max)s::numeric)
     AND (%(large_max)s::bigint IS NULL OR NOT %(large)s
          OR large_tier_uses + reserved_large < %(large_max)s::bigint) AS fits
  FROM cur
), r AS (
  UPDATE agents_app_run SET reserved_usd = reserved_usd + %(worst)s::numeric,
    reserved_large = reserved_large + %(large)s::int FROM ok
  WHERE id = %(run)s::uuid AND ok.fits RETURNING 1
), s AS (
  UPDATE agents_app_session SET reserved_usd = reserved_usd + %(worst)s::numeric,
    reserved_large = reserved_large + %(large)s::int FROM r
  WHERE id = %(session)s::uuid
)
SELECT cur.cost_usd, cur.reserved_usd, cur.large_tier_uses, cur.budget_warned, cur.reserved_large, ok.fits
FROM cur, ok
"""


@dataclass(frozen=True)
class Reservation:
    """What :data:`RESERVE_SQL` answered: the run's totals before it, and whether the call fits."""

    cost_usd: Decimal
    reserved_usd: Decimal
    large_tier_uses: int
    warned: bool
    reserved_large: int
    fits: bool


def reserve_params(*, run_id, session_id, budget: dict[str, Any], worst_usd: Decimal, large: bool) -> dict:
    limit, large_max = budget.get("max_cost_usd"), budget.get("max_large_tier_uses")
    return {"run": str(run_id), "session": str(session_id), "worst": str(worst_usd), "large": large,
            "max": None if limit is None else str(limit),
            "large_max": None if large_max is None else int(large_max)}


def refusal(*, budget: dict[str, Any], reservation: Reservation, worst_usd: Decimal) -> str | None:
    """Why a call that did not fit is refused (None when it fits)."""
    if reservation.fits:
        return None
    limit = budget.get("max_cost_usd")
    if limit is not None and reservation.cost_usd >= Decimal(str(limit)):
        return f"the run's budget of {money_display(limit)} is spent ({money_display(reservation.cost_usd)})"
    if limit is not None and reservation.cost_usd + reservation.reserved_usd + worst_usd > Decimal(str(limit)):
        held = (f", {money_display(reservation.reserved_usd)} held by calls in flight"
                if reservation.reserved_usd else "")
        return (f"the run's budget of {money_display(limit)} cannot cover this call: "
                f"{money_display(reservation.cost_usd)} spent{held}, and the call may cost up to "
                f"{money_display(worst_usd)}")
    held = f" ({reservation.reserved_large} of them by calls in flight)" if reservation.reserved_large else ""
    return f"the run may use the large tier {budget['max_large_tier_uses']} time(s){held}"


def warning_due(*, budget: dict[str, Any], reservation: Reservation) -> bool:
    warn = budget.get("warn_cost_usd")
    return warn is not None and not reservation.warned and reservation.cost_usd >= Decimal(str(warn))


def budget_warn(*, run_id, agent: str, session_id, warn_cost_usd: Any) -> None:
    """Emit ``budget_warning`` once, when the run's cost has reached ``warn_cost_usd``."""
    with transaction.atomic():
        run = Run.objects.select_for_update().only("cost_usd", "budget_warned").get(pk=run_id)
        if run.budget_warned or run.cost_usd < Decimal(str(warn_cost_usd)):
            return
        Run.objects.filter(pk=run_id).update(budget_warned=True)
        event_emit(run_id=run_id, type="budget_warning", agent=agent, session_id=session_id,
                   data={"cost_usd": money_str(run.cost_usd), "warn_cost_usd": money_str(warn_cost_usd)})


def reservation_release(session: Session) -> None:
    """Give back what ``session`` still holds of its run's reservations (a call that never settled: its worker
    died, or its write was lost). The caller holds the run's row lock, under which ``session`` was read."""
    if session.reserved_usd or session.reserved_large:
        Run.objects.filter(pk=session.run_id).update(
            reserved_usd=Greatest(F("reserved_usd") - session.reserved_usd, Value(Decimal(0))),
            reserved_large=Greatest(F("reserved_large") - session.reserved_large, Value(0)))
        Session.objects.filter(pk=session.pk).update(reserved_usd=0, reserved_large=0)
    session.reserved_usd, session.reserved_large = Decimal(0), 0
