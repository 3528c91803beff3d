"""REST endpoints of runs: start, list, inspect, follow events, cancel, archive, delete, read workspace files.

Reading needs the ``view`` capability; starting, cancelling, archiving and
deleting need ``run`` (operators and admins). Every lookup goes through the actor's team
(``selectors_runs``), so another team's run — or an id that is not a UUID —
is a 404. The work is done by ``agents_app.execution`` (``runs``, ``lifecycle``, …), as for the CLI and the
admin.
"""

# No `from __future__ import annotations`: ninja reads the annotations at import time.

from datetime import date
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Query, Router, Status
from ninja.errors import ValidationError as NinjaValidationError
from pydantic import BaseModel, Field

from mas_core.events import event_to_dict
from agents_app.execution.housekeeping import RunBusy, run_archive, run_delete
from agents_app.execution.replay import run_script_export
from agents_app.execution.errors import InputBlocked, RunError, ScriptError, UnknownGuardrails
from agents_app.execution.runs import run_cancel, run_start, start_rows
from agents_app.models import ModelProvider, RemoteAgent, Run
from agents_app.models.runs import FINISHED_RUN_STATUSES
from agents_app.money import money_str
from mas_core.permissions import Actor
from mas_core.schemas import error_responses
from agents_app.schemas_runs import (
    EventOut,
    FileContentOut,
    FileOut,
    RunDeletedOut,
    RunDetailOut,
    RunIn,
    RunOut,
    RunStatusName,
)
from agents_app.selectors_runs import (
    EVENTS_DEFAULT_LIMIT,
    EVENTS_MAX_LIMIT,
    RunDetail,
    file_size,
    run_detail,
    run_duration_s,
    run_events,
    run_file_get,
    run_files,
    run_filter,
    run_get,
)
from mas_core import ratelimit
from mas_core.api_auth import api_auth

router = Router(tags=["runs"])
read, operate = api_auth("view"), api_auth("run")

READ_ERRORS = error_responses(401, 403, 404)
LIST_ERRORS = error_responses(401, 403, 422)
START_ERRORS = error_responses(400, 401, 403, 413, 415, 422)
LIST_INPUT_CHARS = 500


# -- response bodies ---------------------------------------------------------------


def run_out(run: Run) -> dict[str, Any]:
    """The run as the API's lists show it (its input cut at ``LIST_INPUT_CHARS``)."""
    return _run_fields(run, input=run.input[:LIST_INPUT_CHARS])


def run_detail_out(detail: RunDetail) -> dict[str, Any]:
    """The run as the API's detail shows it (a read's :func:`run_detail`, or ``RunDetail.new`` for a run
    ``run_start`` has just created)."""
    run = detail.run
    data = _run_fields(run, input=run.input)
    data["totals"] |= {"cache_hits": detail.cache_hits, "cache_misses": detail.cache_misses,
                       "guardrail_cost_usd": money_str(run.guardrail_cost_usd)}
    return data | {
        "result": run.result,
        "provider": run.provider,
        "limits": run.limits,
        "budget": run.budget,
        "approvals": run.approvals,
        "guardrails": run.guardrails,
        "versions": run.versions,
        "uses_script": run.script is not None,
        "activations": [_activation_out(activation, sessions=sessions) for activation, sessions in detail.tree],
        "steps": detail.steps,
        "forked_from": str(run.forked_from_id) if run.forked_from_id else None,
        "fork_seq": run.fork_seq,
        "forks": detail.forks,
    }


def _run_fields(run: Run, *, input: str) -> dict[str, Any]:
    return {
        "id": str(run.id),
        "agent": run.agent,
        "workflow": run.workflow,
        "status": run.status,
        "input": input,
        "notice": run.notice,
        "error": run.error,
        "eval": run.is_eval,
        "totals": {
            "prompt_tokens": run.prompt_tokens,
            "completion_tokens": run.completion_tokens,
            "cost_usd": money_str(run.cost_usd),
            "duration_s": run_duration_s(run),
        },
        "created_by": run.created_by.get_username() if run.created_by_id else None,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "archived_at": run.archived_at,
    }


def _activation_out(activation, *, sessions) -> dict[str, Any]:
    return {
        "id": str(activation.id),
        "parent": str(activation.parent_id) if activation.parent_id else None,
        "agent": activation.agent,
        "kind": activation.kind,
        "depth": activation.depth,
        "priority": activation.priority,
        "status": activation.status,
        "attempts": activation.attempts,
        "input": activation.input,
        "result": activation.result,
        "created_at": activation.created_at,
        "sessions": [
            {
                "id": str(session.id),
                "agent": session.agent,
                "attempt": session.attempt,
                "tier": session.tier,
                "provider": session.provider,
                "model": session.model,
                "status": session.status,
                "prompt_tokens": session.prompt_tokens,
                "completion_tokens": session.completion_tokens,
                "cost_usd": money_str(session.cost_usd),
                "result": session.result,
                "failure": session.failure,
                "meta": session.meta,
                "started_at": session.started_at,
                "finished_at": session.finished_at,
            }
            for session in sessions
        ],
    }


def _file_out(file, *, content: bool = False) -> dict[str, Any]:
    data = {"path": file.path, "version": file.version, "author": file.author, "size": file_size(file),
            "updated_at": file.updated_at}
    if content:
        data["content"] = file.content
    return data


def _invalid(field: str, message: str, type_: str) -> NinjaValidationError:
    return NinjaValidationError([{"loc": ("body", field), "msg": message, "type": type_}])


# -- endpoints -----------------------------------------------------------------------


@router.post("/runs", auth=operate, response={201: RunDetailOut, **START_ERRORS}, operation_id="run_start",
             summary="Start a run of one of the team's agents (operators and admins)")
def start(request: HttpRequest, payload: RunIn):
    actor: Actor = request.auth
    ratelimit.run_start_check(actor.team)
    rows = start_rows(team=actor.team, agent=payload.agent, script=payload.script)  # run_start's read, done first
    if payload.agent not in rows and not RemoteAgent.objects.filter(team=actor.team, slug=payload.agent).exists():
        raise _invalid("agent", f"no agent {payload.agent!r} in team {actor.team.slug}", "unknown_agent")
    if payload.provider and not ModelProvider.objects.filter(team=actor.team, slug=payload.provider).exists():
        raise _invalid("provider", f"no model provider {payload.provider!r} in team {actor.team.slug}",
                       "unknown_provider")
    try:
        run = run_start(team=actor.team, agent=payload.agent, input=payload.input, user=actor.user,
                        limits=payload.limits_data(), budget=payload.budget_data(), provider=payload.provider,
                        script=payload.script, approvals=payload.approvals, guardrails=payload.guardrails, rows=rows)
    except ScriptError as error:
        raise _invalid("script", str(error), "invalid_script") from None
    except UnknownGuardrails as error:
        raise _invalid("guardrails", str(error), "unknown_guardrail") from None
    except InputBlocked as error:
        raise _invalid("input", str(error), "guardrail") from None
    except RunError as error:
        raise _invalid("agent", str(error), "run_refused") from None
    return Status(201, run_detail_out(RunDetail.new(run)))


class RunFilters(BaseModel):
    status: RunStatusName | None = None
    agent: str | None = Field(default=None, max_length=100)
    workflow: str | None = Field(default=None, max_length=100)
    q: str = Field(default="", max_length=200, description="Words to find in the task or the result (all of them).")
    created_from: date | None = Field(default=None, description="First day (YYYY-MM-DD), included.")
    created_to: date | None = Field(default=None, description="Last day (YYYY-MM-DD), included.")
    archived: Literal["exclude", "only", "include"] = Field(
        default="exclude", description="Archived runs are left out unless asked for.")
    trigger: Literal["manual", "schedule", "channel"] | None = Field(
        default=None, description="How the run started: by someone (every agent run), a schedule or a channel.")
    limit: int = Field(default=50, ge=1, le=500)
    offset: int = Field(default=0, ge=0, le=10_000_000)
    evals: Literal["exclude", "only", "include"] = Field(
        default="exclude", description="The runs of eval cases: left out (default), the only ones, or included.")


@router.get("/runs", auth=read, response={200: list[RunOut], **LIST_ERRORS}, operation_id="run_list",
            summary="The team's runs, newest first (archived ones only when asked for)")
def list_runs(request: HttpRequest, filters: Query[RunFilters]):
    actor: Actor = request.auth
    runs = run_filter(team=actor.team, status=filters.status, agent=filters.agent, workflow=filters.workflow,
                      search=filters.q, created_from=filters.created_from, created_to=filters.created_to,
                      archived=filters.archived, evals={"exclude": False, "only": True}.get(filters.evals),
                      trigger=filters.trigger)
    return [run_out(run) for run in runs[filters.offset:filters.offset + filters.limit]]


@router.get("/runs/{run_id}", auth=read, response={200: RunDetailOut, **READ_ERRORS}, operation_id="run_get",
            summary="A run: status, totals, result, settings and its activation/session tree")
def get_run(request: HttpRequest, run_id: str):
    actor: Actor = request.auth
    return run_detail_out(run_detail(team=actor.team, run_id=run_id))


class EventQuery(BaseModel):
    after: int = Field(default=0, ge=0, le=2**62, description="Return events with a sequence number above this.")
    limit: int = Field(default=EVENTS_DEFAULT_LIMIT, ge=1, le=EVENTS_MAX_LIMIT)


@router.get("/runs/{run_id}/events", auth=read, response={200: list[EventOut], **READ_ERRORS, **error_responses(422)},
            operation_id="run_events", summary="The run's events after a sequence number, in order")
def list_events(request: HttpRequest, run_id: str, query: Query[EventQuery]):
    actor: Actor = request.auth
    run = run_get(team=actor.team, run_id=run_id)
    return [event_to_dict(event) for event in run_events(run=run, after=query.after, limit=query.limit)]


@router.post("/runs/{run_id}/cancel", auth=operate, response={200: RunDetailOut, **READ_ERRORS},
             operation_id="run_cancel",
             summary="Cancel a run: its sessions stop at their next step (a finished run is returned as it is)")
def cancel(request: HttpRequest, run_id: str):
    actor: Actor = request.auth
    run = run_get(team=actor.team, run_id=run_id)
    run_cancel(run=run, user=actor.user)
    return run_detail_out(run_detail(team=actor.team, run_id=run_id))


@router.post("/runs/{run_id}/archive", auth=operate, response={200: RunOut, **READ_ERRORS},
             operation_id="run_archive", summary="Archive a run: it leaves the lists (GET /api/runs?archived=only)")
def archive(request: HttpRequest, run_id: str):
    actor: Actor = request.auth
    return run_out(run_archive(run=run_get(team=actor.team, run_id=run_id)))


@router.post("/runs/{run_id}/unarchive", auth=operate, response={200: RunOut, **READ_ERRORS},
             operation_id="run_unarchive", summary="Bring an archived run back into the lists")
def unarchive(request: HttpRequest, run_id: str):
    actor: Actor = request.auth
    return run_out(run_archive(run=run_get(team=actor.team, run_id=run_id), archived=False))


@router.delete("/runs/{run_id}", auth=operate, response={200: RunDeletedOut, **READ_ERRORS, **error_responses(409)},
               operation_id="run_delete",
               summary="Delete a finished run with its events and files (409 while it is queued or running)")
def delete(request: HttpRequest, run_id: str):
    actor: Actor = request.auth
    try:
        deleted = run_delete(run=run_get(team=actor.team, run_id=run_id), user=actor.user)
    except RunBusy as error:
        return Status(409, {"detail": str(error)})
    return {"id": deleted.run_id, "deleted": True, "events": deleted.events, "files": deleted.files}


@router.get("/runs/{run_id}/script", auth=read,
            response={200: dict[str, list[dict[str, Any]]], **READ_ERRORS, **error_responses(409)},
            operation_id="run_script",
            summary="A finished run as a script for the scripted provider (replay it with POST /api/runs)")
def export_script(request: HttpRequest, run_id: str):
    actor: Actor = request.auth
    run = run_get(team=actor.team, run_id=run_id)
    if run.status not in FINISHED_RUN_STATUSES:
        return Status(409, {"detail": f"the run is still {run.status}: export it once it has finished"})
    return run_script_export(run=run)


@router.get("/runs/{run_id}/files", auth=read, response={200: list[FileOut], **READ_ERRORS},
            operation_id="run_files", summary="The run's workspace files (without content)")
def list_files(request: HttpRequest, run_id: str):
    actor: Actor = request.auth
    run = run_get(team=actor.team, run_id=run_id)
    return [_file_out(file) for file in run_files(run=run)]


@router.get("/runs/{run_id}/files/{path:path}", auth=read, response={200: FileContentOut, **READ_ERRORS},
            operation_id="run_file", summary="One workspace file with its content (the path may hold slashes)")
def get_file(request: HttpRequest, run_id: str, path: str):
    actor: Actor = request.auth
    run = run_get(team=actor.team, run_id=run_id)
    return _file_out(run_file_get(run=run, path=path), content=True)
