"""REST endpoint of forks: start a new run from an event of any run (agents_app.execution.forks).

Forking needs ``run`` (operators and admins), like starting a run; the run is
looked up through the actor's team, so another team's run is a 404. A run
still going forks from its committed history; a point that cannot be forked
from is a 422 naming why.
"""

# No `from __future__ import annotations`: ninja reads the annotations at import time.

from django.http import HttpRequest
from ninja import Router, Status
from ninja.errors import ValidationError as NinjaValidationError
from pydantic import BaseModel, ConfigDict, Field

from agents_app.api_runs import run_detail_out
from agents_app.execution.errors import RunError
from agents_app.execution.forks import MAX_PINS, TOOL_RESULT_MAX_CHARS, ForkError, run_fork
from mas_core.permissions import Actor
from mas_core.schemas import error_responses
from agents_app.schemas_runs import RunDetailOut
from agents_app.selectors_runs import run_detail, run_get
from mas_core import ratelimit
from mas_core.api_auth import api_auth

router = Router(tags=["runs"])
operate = api_auth("run")


class ForkIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seq: int = Field(ge=1, le=2**62, description="The event to fork from (its ``seq`` in the run's event log).")
    versions: dict[str, int] = Field(
        default_factory=dict, max_length=MAX_PINS,
        description='Other definition versions for the fork, e.g. {"agent:writer": 2} (as a run start pins them).')
    tool_result: str | None = Field(
        default=None, max_length=TOOL_RESULT_MAX_CHARS,
        description="For a tool_call or tool_result event: the result that tool call gets in the fork instead.")


@router.post("/runs/{run_id}/fork", auth=operate,
             response={201: RunDetailOut, **error_responses(400, 401, 403, 404, 413, 415, 422)},
             operation_id="run_fork",
             summary="Start a new run from an event of a run (operators and admins)",
             description="The fork restores every agent's checkpoints and the workspace files as they were once "
                         "event ``seq`` was written, optionally with other definition versions and, at a tool "
                         "event, another result for that tool call; then it runs on the workers. A run still "
                         "queued, running or waiting forks from its history committed by then and goes on "
                         "untouched; 422 for a point it cannot start from.")
def fork(request: HttpRequest, run_id: str, payload: ForkIn):
    actor: Actor = request.auth
    run = run_get(team=actor.team, run_id=run_id)
    ratelimit.run_start_check(actor.team)
    try:
        forked = run_fork(run=run, seq=payload.seq, user=actor.user, versions=payload.versions,
                          tool_result=payload.tool_result)
    except ForkError as error:
        raise NinjaValidationError([{"loc": ("body", error.field), "msg": str(error), "type": "fork_refused"}]) \
            from None
    except RunError as error:  # the agent is gone, or a version it pins is no longer kept
        raise NinjaValidationError([{"loc": ("body", "versions"), "msg": str(error), "type": "fork_refused"}]) \
            from None
    return Status(201, run_detail_out(run_detail(team=actor.team, run_id=forked.id)))
