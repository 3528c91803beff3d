"""Reading a team's guardrail definitions: which slugs exist, and which are the team's defaults.

A session's guardrails are the team's defaults, its agent's ``guardrails``, its workflow step's
(``ActivationContext.step_guardrails``) and its run's (``Run.guardrails``); each session reads their current
versions when it starts (``agents_app.execution.guardrails.guardrails_sql``): a run does not pin them.
"""

from __future__ import annotations

from agents_app.models import Guardrail, Team


def guardrail_slugs(*, team: Team) -> set[str]:
    """Every guardrail slug of ``team``."""
    return set(Guardrail.objects.filter(team=team).values_list("slug", flat=True))


def team_default_guardrails(*, team_id: int) -> list[str]:
    """The slugs of the team's default guardrails (``default: true``), in slug order."""
    return list(Guardrail.objects.filter(team_id=team_id, default=True).order_by("slug").values_list("slug", flat=True))
