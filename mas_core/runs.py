"""A team's run, for the layers below agents_app (memory's run pages: a run's channels and blackboard).

Runs are agents_app's model, above the foundation: it is reached through the
app registry by its label, as the foundation's models name it
("agents_app.Run"), never by an import.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.apps import apps
from django.http import Http404

from mas_core.models import Team


def run_uuid(run_id: Any) -> uuid.UUID:
    """``run_id`` as a UUID; 404 when it is not one (no probing with malformed ids)."""
    if isinstance(run_id, uuid.UUID):
        return run_id
    try:
        return uuid.UUID(str(run_id))
    except ValueError:
        raise Http404("no such run") from None


def run_get(*, team: Team, run_id: Any, related: tuple[str, ...] = ()):
    """The run ``run_id`` of ``team``; 404 for a malformed id, a missing run or another team's."""
    run = (apps.get_model("agents_app", "Run").objects.filter(team=team, pk=run_uuid(run_id))
           .select_related(*related).first())
    if run is None:
        raise Http404("no such run")
    return run
