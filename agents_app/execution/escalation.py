"""Escalation on failure: the next rung of an agent's ladder, as a concrete model, never a step down.

An agent's ``escalation`` ladder lists tiers (``medium``) or models (``openai:gpt-4.1``). Each rung
resolves to one of the team's models as a session's own model does (a tier: its first model of that
tier). After a failed attempt the next one runs on the first rung past the current one — the rung the
attempt ran on, else the rung naming its model, else the rung naming its tier; with none of these on
the ladder, from the bottom — whose model is another one and whose tier is not below the tier of the
model just called. A rung whose model has no tier on its provider row is taken as it comes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents_app.execution.modelchoice import model_choice
from mas_core.llm_types import ProviderError
from agents_app.models import Activation, ActivationContext, Run, Session
from mas_core.specs import TIERS

TIER_RANK = {tier: rank for rank, tier in enumerate(TIERS)}


@dataclass(frozen=True)
class Rung:
    name: str  # as the ladder writes it: a tier or provider:model
    tier: str | None  # of the model it resolves to
    model: str | None  # provider:model it resolves to; None when no model of the team serves it


def ladder_position(ladder: list[str], *, rung: str | None = None, model: str | None = None,
                    tier: str | None = None) -> int | None:
    """Where an attempt stands on the ladder: its rung, else its model, else its tier (None: below it)."""
    for name in (rung, model, tier):
        if name and name in ladder:
            return ladder.index(name)
    return None


def next_rung(current: Rung, ladder: list[Rung], *, position: int | None) -> Rung | None:
    """The first rung past ``position`` that calls another model and is not a step down, or None."""
    floor = TIER_RANK.get(current.tier or "")
    for rung in ladder[position + 1 if position is not None else 0:]:
        if current.model is not None and (rung.model, rung.tier) == (current.model, current.tier):
            continue  # the same model again (a script's stand-in for another tier is another model)
        rank = TIER_RANK.get(rung.tier or "")
        if floor is not None and rank is not None and rank < floor:
            continue
        return rung
    return None


def next_tier(tier: str, ladder: list[str]) -> str | None:
    """:func:`next_rung` on a ladder of tiers alone."""
    rung = next_rung(Rung(tier, tier, None), [Rung(name, name if name in TIERS else None, None) for name in ladder],
                     position=ladder_position(ladder, tier=tier))
    return rung.name if rung else None


@dataclass(frozen=True)
class Escalation:
    rung: Rung
    data: dict[str, Any]  # the ``escalation`` event's: from/to (tiers), from_model/to_model

    def applied(self, context: ActivationContext) -> ActivationContext:
        """The next attempt's activation context: the rung it runs on and that rung's tier."""
        return context.replace(rung=self.rung.name, tier=self.rung.tier or "")


def rung_resolve(*, run: Run, name: str, tier: str) -> Rung:
    rung_tier = name if name in TIERS else None
    try:
        choice = model_choice(run=run, ref=name, tier=rung_tier or tier)
    except ProviderError:  # nothing serves it: the attempt on it fails saying what to configure
        return Rung(name, rung_tier, None)
    return Rung(name, choice.tier or rung_tier, choice.ref)


def escalation_next(*, run: Run, session: Session, activation: Activation, ladder: list[str]) -> Escalation | None:
    """Where the attempt after ``session`` (which failed) escalates to on ``ladder``, or None."""
    if not ladder:
        return None
    model = f"{session.provider}:{session.model}" if session.model else None
    current = Rung(activation.ctx.rung, session.tier or None, model)
    position = ladder_position(ladder, rung=current.name, model=model, tier=current.tier)
    above = ladder[position + 1 if position is not None else 0:]
    rungs = [rung_resolve(run=run, name=name, tier=session.tier) for name in above]
    found = next_rung(current, rungs, position=None)
    if found is None:
        return None
    return Escalation(found, {"from": current.tier or current.model, "to": found.tier or found.name,
                              "from_model": current.model, "to_model": found.model})
