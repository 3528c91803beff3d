"""Starting workflow runs over REST: a workflow of the team's, or a plan a planner agent writes.

Both answer like ``POST /api/runs`` (201 with the run's detail, whose ``steps``
list the workflow's steps); refusals are 422s naming the field and start
nothing; another team's workflow is a 404.
"""

# No `from __future__ import annotations`: ninja reads the annotations at import time.

from typing import Any

from django.http import Http404, HttpRequest
from ninja import Router, Status
from ninja.errors import ValidationError as NinjaValidationError
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agents_app.api_runs import READ_ERRORS, START_ERRORS, run_detail_out
from agents_app.execution.errors import RunError, ScriptError
from agents_app.llm.scripted import validate_script
from agents_app.models import ModelProvider
from mas_core.permissions import Actor
from agents_app.schemas_runs import MAX_INPUT_CHARS, SLUG_PATTERN, RunBudgetIn, RunDetailOut, RunLimitsIn
from agents_app.selectors_runs import run_detail
from mas_core import ratelimit
from mas_core.api_auth import api_auth
from workflows_app.models import Workflow
from workflows_app.orchestrate import orchestrate_run_start
from workflows_app.services import WorkflowInputError, workflow_run_start

router = Router(tags=["workflows"])
operate = api_auth("run")


class RunSettingsIn(BaseModel):
    """What every run start takes besides its work: limits, budget, provider, script."""

    model_config = ConfigDict(extra="forbid")

    limits: RunLimitsIn | None = None
    budget: RunBudgetIn | None = None
    provider: str = Field(default="", pattern=r"^([-a-zA-Z0-9_]{1,100})?$",
                          description="Slug of one of the team's model providers to use instead of the default.")
    script: dict[str, Any] | None = Field(default=None, description="Turns for the scripted provider "
                                                                    "(agent slug → list of turns).")

    @field_validator("script")
    @classmethod
    def _script_shape(cls, value):
        if value is not None:
            validate_script(value)
        return value

    def settings(self, actor: Actor) -> dict[str, Any]:
        ratelimit.run_start_check(actor.team)
        if self.provider and not ModelProvider.objects.filter(team=actor.team, slug=self.provider).exists():
            # As POST /api/runs: another team's provider (or none) is a 422, not a run on the demo recording.
            raise _invalid("provider", f"no model provider {self.provider!r} in team {actor.team.slug}",
                           "unknown_provider")
        return {"limits": self.limits.model_dump(exclude_none=True) if self.limits else {},
                "budget": self.budget.model_dump(exclude_none=True, mode="json") if self.budget else {},
                "provider": self.provider, "script": self.script, "user": actor.user}


class WorkflowRunIn(RunSettingsIn):
    """Inputs of the workflow (every declared one, nothing else)."""

    inputs: dict[str, str] = Field(default_factory=dict, description="Value of each input the workflow declares.")

    @field_validator("inputs")
    @classmethod
    def _bounded(cls, value: dict[str, str]) -> dict[str, str]:
        if sum(len(key) + len(text) for key, text in value.items()) > MAX_INPUT_CHARS:
            raise ValueError(f"inputs may hold {MAX_INPUT_CHARS} characters in all")
        return value


class OrchestrateIn(RunSettingsIn):
    """A task for a planner agent: it returns subtasks as JSON, which run as a workflow, then a synthesis."""

    planner: str = Field(pattern=SLUG_PATTERN, description="Slug of the agent that writes the plan.")
    task: str = Field(min_length=1, max_length=MAX_INPUT_CHARS)
    synthesizer: str = Field(default="", pattern=r"^([-a-zA-Z0-9_]{1,100})?$",
                             description="Agent of the final synthesis step (default: the planner).")
    max_adaptations: int = Field(default=1, ge=0, le=5,
                                 description="How often the planner may be asked to adapt the plan after a "
                                             "subtask fails for good.")
    subtask_retries: int = Field(default=1, ge=0, le=5, description="Retries of each subtask.")


def _invalid(field: str, message: str, type_: str) -> NinjaValidationError:
    return NinjaValidationError([{"loc": ("body", field), "msg": message, "type": type_}])


def _started(actor: Actor, run) -> Status:
    return Status(201, run_detail_out(run_detail(team=actor.team, run_id=run.id)))


@router.post("/workflows/{slug}/runs", auth=operate, response={201: RunDetailOut, **START_ERRORS, **READ_ERRORS},
             operation_id="workflow_run_start", summary="Start a run of one of the team's workflows")
def start_workflow(request: HttpRequest, slug: str, payload: WorkflowRunIn):
    actor: Actor = request.auth
    workflow = Workflow.objects.filter(team=actor.team, slug=slug).first()
    if workflow is None:
        raise Http404("no such workflow")
    settings = payload.settings(actor)
    try:
        run = workflow_run_start(team=actor.team, workflow=workflow, inputs=payload.inputs, **settings)
    except WorkflowInputError as error:
        raise _invalid("inputs", str(error), "bad_inputs") from None
    except ScriptError as error:
        raise _invalid("script", str(error), "invalid_script") from None
    except RunError as error:
        raise _invalid("workflow", str(error), "run_refused") from None
    return _started(actor, run)


@router.post("/orchestrate", auth=operate, response={201: RunDetailOut, **START_ERRORS},
             operation_id="orchestrate_start", summary="Start a run whose plan a planner agent writes")
def orchestrate(request: HttpRequest, payload: OrchestrateIn):
    actor: Actor = request.auth
    settings = payload.settings(actor)
    try:
        run = orchestrate_run_start(
            team=actor.team, planner=payload.planner, task=payload.task, synthesizer=payload.synthesizer,
            max_adaptations=payload.max_adaptations, subtask_retries=payload.subtask_retries, **settings)
    except ScriptError as error:
        raise _invalid("script", str(error), "invalid_script") from None
    except RunError as error:
        field = "synthesizer" if str(error).startswith("synthesizer") else "planner"
        raise _invalid(field, str(error), "run_refused") from None
    return _started(actor, run)
