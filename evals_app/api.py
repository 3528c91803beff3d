"""REST endpoints of evals: datasets (a definition kind, like the others), eval runs, save-as-case.

``/api/evals`` and ``/api/evals/{slug}`` … are the definition endpoints of the ``eval`` kind; starting an
eval run needs the ``run`` capability, reading results ``view``. Every lookup goes through the actor's
team: another team's dataset, eval run or run is a 404.
"""

# No `from __future__ import annotations`: ninja reads the annotations at import time.

from datetime import datetime
from typing import Any, Literal, NoReturn

from django.db import transaction
from django.http import Http404
from ninja import Router, Status
from ninja.errors import ValidationError as NinjaValidationError
from pydantic import BaseModel, ConfigDict, Field

from mas_core.api_definitions import add_definition_routes, definition_out
from mas_core.permissions import Actor
from mas_core.schemas import error_responses
from agents_app.money import money_str
from agents_app.selectors_runs import run_get
from evals_app.cases import eval_case_save
from evals_app.kinds import EVAL
from evals_app.models import EvalRun
from evals_app.services import EvalError, eval_compare, eval_dataset_get, eval_run_get, eval_run_start, eval_totals
from mas_core import ratelimit
from mas_core.api_auth import api_auth

router = Router()
schemas = add_definition_routes(router, kind=EVAL, plural="evals")
read, operate, write = api_auth("view"), api_auth("run"), api_auth("edit")
TAGS = ["evals"]


class EvalRunIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent_version: int | None = Field(default=None, ge=1, le=2**31 - 1, description=(
        "The version of the agent under test (default: its current one)."))
    compare_to: int | None = Field(default=None, ge=1, le=2**31 - 1, description=(
        "Also run the dataset on this version of the agent, and compare case by case."))


class CheckOut(BaseModel):
    type: str
    passed: bool | None = Field(description="null: skipped (the reason says why).")
    score: float
    reason: str


class CaseOut(BaseModel):
    case_id: str
    status: Literal["pending", "passed", "failed"]
    score: float
    run: str | None
    run_status: str
    cost_usd: str
    tokens: int
    duration_s: float | None
    error: str
    checks: list[CheckOut]


class SideOut(BaseModel):
    status: str
    score: float
    run: str | None
    cost_usd: str
    tokens: int
    duration_s: float | None


class ComparisonOut(BaseModel):
    case_id: str
    change: Literal["regression", "removed", "still_failing", "improvement", "new", "still_passing"]
    before: SideOut | None
    after: SideOut | None
    failed_checks: list[str]


class EvalRunOut(BaseModel):
    id: int
    dataset: str
    dataset_version: int
    agent: str
    agent_version: int | None
    workflow: str
    status: Literal["running", "finished", "cancelled"]
    baseline: int | None = Field(description="The eval run this one is compared with.")
    totals: dict[str, Any] = Field(description=(
        "cases, passed, failed, pending, pass_rate, cost_usd, tokens, duration_p50_s, duration_p95_s, "
        "judge_cost_usd, judge_tokens, judge_calls."))
    created_at: datetime
    finished_at: datetime | None


class EvalRunDetailOut(EvalRunOut):
    cases: list[CaseOut]
    comparison: list[ComparisonOut] | None = Field(description="Case by case against the baseline, regressions first.")


class SaveCaseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dataset: str = Field(min_length=1, max_length=100, description="The dataset (created when it does not exist).")
    case_id: str = Field(default="", max_length=64, description="Default: run-<first 8 characters of the run id>.")


def eval_run_out(eval_run: EvalRun, *, detail: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": eval_run.id, "dataset": eval_run.dataset_slug, "dataset_version": eval_run.dataset_version,
        "agent": eval_run.agent, "agent_version": eval_run.agent_version, "workflow": eval_run.workflow,
        "status": eval_run.status, "baseline": eval_run.baseline_id,
        # While it runs, the totals so far.
        "totals": eval_run.totals if eval_run.status != "running" else eval_totals(eval_run=eval_run),
        "created_at": eval_run.created_at, "finished_at": eval_run.finished_at,
    }
    if detail:
        data["cases"] = [{
            "case_id": case.case_id, "status": case.status, "score": case.score,
            "run": str(case.run_id) if case.run_id else None, "run_status": case.run_status,
            "cost_usd": money_str(case.cost_usd), "tokens": case.tokens, "duration_s": case.duration_s,
            "error": case.error, "checks": case.checks,
        } for case in eval_run.cases.all()]
        data["comparison"] = (eval_compare(eval_run=eval_run, baseline=eval_run.baseline)
                              if eval_run.baseline_id else None)
    return data


def eval_dataset_or_404(actor: Actor, slug: str):
    try:
        return eval_dataset_get(team=actor.team, slug=slug)
    except EvalError as error:
        raise Http404(str(error)) from None


def _invalid(error: EvalError, *, field: str = "") -> NoReturn:
    """A refusal of what the request asked: a 422 naming its field, as docs/reference/api.md says errors are."""
    loc = ["body", *([field or error.field] if (field or error.field) else [])]
    raise NinjaValidationError([{"loc": loc, "msg": str(error), "type": "eval_refused"}]) from None


@router.post("/evals/{slug}/runs", auth=operate, tags=TAGS, operation_id="eval_run_start",
             response={201: EvalRunDetailOut, **error_responses(400, 401, 403, 404, 415, 422)},
             description="422 when the dataset cannot run as asked (a version that is not kept, an agent's "
                         "version for a workflow's dataset, a case that would call real models the dataset does "
                         "not allow), naming the field.",
             summary="Run every case of a dataset as eval runs of its agent (optionally against another version)")
def start(request, slug: str, payload: EvalRunIn):
    actor: Actor = request.auth
    dataset = eval_dataset_or_404(actor, slug)
    ratelimit.run_start_check(actor.team)  # one start, however many cases (at most MAX_CASES, twice)
    with transaction.atomic():  # a refused eval run leaves no baseline started either
        baseline = None
        if payload.compare_to is not None:
            try:
                baseline = eval_run_start(team=actor.team, dataset=dataset, agent_version=payload.compare_to,
                                          user=actor.user)
            except EvalError as error:
                _invalid(error, field="compare_to" if error.field == "agent_version" else "")
        try:
            eval_run = eval_run_start(team=actor.team, dataset=dataset, agent_version=payload.agent_version,
                                      user=actor.user, baseline=baseline)
        except EvalError as error:
            _invalid(error)
    return Status(201, eval_run_out(eval_run, detail=True))


@router.get("/evals/{slug}/runs", auth=read, tags=TAGS, operation_id="eval_run_list",
            response={200: list[EvalRunOut], **error_responses(401, 403, 404)},
            summary="The eval runs of a dataset, newest first (at most 100)")
def list_runs(request, slug: str):
    actor: Actor = request.auth
    runs = list(EvalRun.objects.filter(team=actor.team, dataset_slug=slug).order_by("-created_at", "-pk")[:100])
    if not runs:
        eval_dataset_or_404(actor, slug)  # the runs of a deleted dataset stay listed
    return [eval_run_out(eval_run) for eval_run in runs]


@router.get("/evals/{slug}/runs/{eval_run_id}", auth=read, tags=TAGS, operation_id="eval_run_get",
            response={200: EvalRunDetailOut, **error_responses(401, 403, 404)},
            summary="An eval run: totals, a result per case and per check, the comparison with its baseline")
def get_run(request, slug: str, eval_run_id: str):
    actor: Actor = request.auth
    try:
        eval_run = eval_run_get(team=actor.team, slug=slug, eval_run_id=eval_run_id)
    except EvalRun.DoesNotExist:
        raise Http404("no such eval run") from None
    return eval_run_out(eval_run, detail=True)


@router.post("/runs/{run_id}/eval-case", auth=write, tags=TAGS, operation_id="run_save_as_eval_case",
             response={201: schemas.output, **error_responses(400, 401, 403, 404, 409, 415, 422)},
             summary="Save a finished run as a case of a dataset: its input, its result as reference, the "
                     "other agents' recorded turns as its script",
             description="409 while the run has not finished, or when the dataset already has that case id; "
                         "422 when the run cannot be a case of that dataset.")
def save_case(request, run_id: str, payload: SaveCaseIn):
    actor: Actor = request.auth
    run = run_get(team=actor.team, run_id=run_id)
    try:
        result = eval_case_save(team=actor.team, run=run, dataset=payload.dataset, case_id=payload.case_id,
                                user=actor.user)
    except EvalError as error:
        if error.conflict:
            return Status(409, {"detail": str(error)})
        _invalid(error)
    return Status(201, definition_out(kind=EVAL, team=actor.team, row=result.row, result=result))
