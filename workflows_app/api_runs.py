"""Orchestrate mode over REST: a planner agent writes the plan, the run executes it, then synthesizes."""

# No `from __future__ import annotations`: ninja reads the annotations at import time.

from typing import Any

from django.http import HttpRequest
from ninja import Router, Status
from ninja.errors import ValidationError as NinjaValidationError
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agents_app.api_runs import START_ERRORS, run_out
from agents_app.execution.services import RunError
from agents_app.llm.scripted import validate_script
from agents_app.models import ModelProvider
from agents_app.permissions import Actor
from agents_app.schemas_runs import MAX_INPUT_CHARS, SLUG_PATTERN, RunBudgetIn, RunDetailOut, RunLimitsIn
from agents_app.selectors_runs import run_get
from mas_project.api_auth import api_auth
from workflows_app.orchestrate import orchestrate_run_start

router = Router(tags=["workflows"])


class OrchestrateIn(BaseModel):
    """A task for a planner agent: it returns subtasks as JSON, which run as a workflow, then a synthesis."""

    model_config = ConfigDict(extra="forbid")

    planner: str = Field(pattern=SLUG_PATTERN, description="Slug of the agent that writes the plan.")
    task: str = Field(min_length=1, max_length=MAX_INPUT_CHARS)
    synthesizer: str = Field(default="", pattern=r"^([-a-zA-Z0-9_]{1,100})?$",
                             description="Agent of the final synthesis step (default: the planner).")
    max_adaptations: int = Field(default=1, ge=0, le=5,
                                 description="How often the planner may be asked to adapt the plan after a "
                                             "subtask fails for good.")
    subtask_retries: int = Field(default=1, ge=0, le=5, description="Retries of each subtask.")
    limits: RunLimitsIn | None = None
    budget: RunBudgetIn | None = None
    provider: str = Field(default="", pattern=r"^([-a-zA-Z0-9_]{1,100})?$")
    script: dict[str, Any] | None = Field(default=None, description="Turns for the scripted provider.")

    @field_validator("script")
    @classmethod
    def _script_shape(cls, value):
        if value is not None:
            validate_script(value)
        return value


@router.post("/orchestrate", auth=api_auth("run"), response={201: RunDetailOut, **START_ERRORS},
             operation_id="orchestrate_start", summary="Start a run whose plan a planner agent writes")
def orchestrate(request: HttpRequest, payload: OrchestrateIn):
    actor: Actor = request.auth
    if payload.provider and not ModelProvider.objects.filter(team=actor.team, slug=payload.provider).exists():
        # As POST /api/runs: another team's provider (or none) is a 422, not a run on the demo recording.
        raise NinjaValidationError([{"loc": ("body", "provider"), "type": "unknown_provider",
                                     "msg": f"no model provider {payload.provider!r} in team {actor.team.slug}"}])
    budget = payload.budget.model_dump(exclude_none=True, mode="json") if payload.budget else {}
    try:
        run = orchestrate_run_start(
            team=actor.team, planner=payload.planner, task=payload.task, user=actor.user,
            synthesizer=payload.synthesizer, max_adaptations=payload.max_adaptations,
            subtask_retries=payload.subtask_retries,
            limits=payload.limits.model_dump(exclude_none=True) if payload.limits else {}, budget=budget,
            provider=payload.provider, script=payload.script,
        )
    except RunError as error:
        field = "synthesizer" if str(error).startswith("synthesizer") else "planner"
        raise NinjaValidationError([{"loc": ("body", field), "msg": str(error), "type": "run_refused"}]) from None
    return Status(201, run_out(run_get(team=actor.team, run_id=run.id), detail=True))
