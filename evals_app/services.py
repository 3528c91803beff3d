"""Eval runs: start every case of a dataset as a run, score the runs that ended, total and compare.

One code path for the ``eval`` command, the API and the admin. The cases run as ordinary runs
(``Run.is_eval``) on the workers, all at once; ``evals_app.collection`` — a chain of collect tasks,
restarted by the recovery sweep if it stops — scores each case once its run has ended
(``evals_app.scorers``) and closes the eval run with its totals when none is left.
"""

from __future__ import annotations

import logging
import math
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents_app.kinds import AGENT
from agents_app.execution.errors import RunError
from agents_app.execution.filehistory import file_version_keep
from agents_app.execution.runs import run_start
from agents_app.models import Agent, DefinitionVersion, Run, Team, WorkspaceFile
from agents_app.money import money_str
from agents_app.selectors_runs import run_duration_s
from evals_app.models import CaseStatus, EvalCaseResult, EvalDataset, EvalRun
from evals_app.scorers import Observation, ToolCallSeen
from evals_app.specs import CaseSpec, EvalSpec

logger = logging.getLogger(__name__)

# A case's run gets the dataset's timeout; the eval run then waits this much longer before cancelling it.
DEADLINE_SLACK_S = 30
MAX_TOOL_CALLS_READ = 5_000
MAX_FILES_READ = 500


class EvalError(ValueError):
    """An eval that cannot start (or a case that cannot be saved), with a message for the caller.

    ``field``: the request field it is about (the API answers 422 with it as the location); ``conflict``:
    the refusal is about the state of things — a duplicate, a run not finished yet — not the request (409).
    """

    def __init__(self, message: str, *, field: str = "", conflict: bool = False) -> None:
        super().__init__(message)
        self.field, self.conflict = field, conflict


def eval_dataset_get(*, team: Team, slug: str) -> EvalDataset:
    dataset = EvalDataset.objects.filter(team=team, slug=slug).first()
    if dataset is None:
        raise EvalError(f"no eval dataset {slug!r} in team {team.slug}")
    return dataset


def eval_spec(dataset: EvalDataset) -> EvalSpec:
    # Validated when saved; read again as the typed spec.
    return EvalSpec.model_validate(dataset.spec)


def _agent_version(*, team: Team, slug: str, version: int | None) -> int:
    row = Agent.objects.filter(team=team, slug=slug).values_list("version", flat=True).first()
    if row is None:
        raise EvalError(f"the agent under test {slug!r} does not exist in team {team.slug}")
    if version is None:
        return row
    kept = DefinitionVersion.objects.filter(team=team, kind=AGENT.name, slug=slug, number=version).exists()
    if not kept:
        numbers = sorted(DefinitionVersion.objects.filter(team=team, kind=AGENT.name, slug=slug)
                         .values_list("number", flat=True))
        raise EvalError(f"agent {slug!r} has no version {version} (kept versions: "
                        f"{', '.join(map(str, numbers)) or 'none'})", field="agent_version")
    return version


# -- starting ----------------------------------------------------------------------------------


def eval_run_start(*, team: Team, dataset: EvalDataset, agent_version: int | None = None, user=None,
                   baseline: EvalRun | None = None) -> EvalRun:
    """Start every case of ``dataset`` as an eval run of its agent (at ``agent_version``, else the current one).

    A case whose run the kernel refuses (its script, an unknown agent) is recorded as failed with the reason;
    the others start. Raises :class:`EvalError` when the eval cannot start at all.
    """
    spec = eval_spec(dataset)
    version = _agent_version(team=team, slug=spec.agent, version=agent_version) if spec.agent else None
    if spec.workflow and agent_version is not None:
        raise EvalError("--agent-version applies to a dataset of an agent; this one tests a workflow",
                        field="agent_version")
    versions = {f"agent:{spec.agent}": version} if spec.agent else {}
    if not spec.allow_real_models:
        _real_models_check(team=team, spec=spec)
    with transaction.atomic():
        eval_run = EvalRun.objects.create(
            team=team, dataset=dataset, dataset_slug=dataset.slug, dataset_version=dataset.version,
            agent=spec.agent or "", agent_version=version, workflow=spec.workflow or "", baseline=baseline,
            deadline=timezone.now() + timedelta(seconds=spec.timeout_s + DEADLINE_SLACK_S),
            created_by=user if getattr(user, "pk", None) else None,
        )
        for position, case in enumerate(spec.cases):
            result = EvalCaseResult(eval_run=eval_run, case_id=case.id, position=position)
            try:
                with transaction.atomic():
                    result.run = _case_start(team=team, spec=spec, case=case, versions=versions, user=user)
            except (RunError, ValueError) as error:
                result.status, result.error = CaseStatus.FAILED, str(error)[:2000]
                result.checks = [{"type": "start", "passed": False, "score": 0.0, "reason": result.error}]
            result.save()
        transaction.on_commit(lambda: eval_collect_async(eval_run_id=eval_run.id))
    logger.info("eval run started", extra={"team": team.slug, "dataset": dataset.slug, "eval_run": eval_run.id,
                                           "cases": len(spec.cases), "agent_version": version})
    return eval_run


def _case_start(*, team: Team, spec: EvalSpec, case: CaseSpec, versions: dict[str, int], user) -> Run:
    """The case's run, with its fixture files in the workspace before any worker sees it (same transaction)."""
    limits = {"max_retries": 0}  # a case is scored on what the agent did, not on a lucky retry
    if spec.agent:
        run = run_start(team=team, agent=spec.agent, input=case.task or "", user=user, limits=limits,
                        script=case.script, versions=versions, is_eval=True,
                        eval_real_models=spec.allow_real_models)
    else:
        from workflows_app.services import workflow_run_start

        run = workflow_run_start(team=team, workflow=spec.workflow, inputs=case.inputs or {}, user=user,
                                 trigger="manual", limits=limits, script=case.script, is_eval=True,
                                 eval_real_models=spec.allow_real_models)
    WorkspaceFile.objects.bulk_create(
        WorkspaceFile(run=run, path=path, content=content, author="eval") for path, content in case.files.items())
    file_version_keep(run_id=run.id, seq=0, files=dict(case.files))  # there before any event: a fork finds them
    return run


def _real_models_check(*, team: Team, spec: EvalSpec) -> None:
    """Refuse an eval whose cases leave an agent it starts unscripted while the team has real models.

    The agents it starts: the agent under test, or the workflow's step agents. Agents met later (a
    delegate, a spawned one) are refused at their model call (``model_choice``). With no real provider
    the bundled demo recording stands in, which is no real model: nothing is refused.
    """
    from agents_app.execution.modelchoice import real_models_refusal, usable_providers

    usable = usable_providers(team_id=team.pk)
    if not usable:
        return
    if spec.agent:
        starting = [spec.agent]
    else:
        from workflows_app.services import workflow_resolve, workflow_spec

        try:
            flow = workflow_spec(team=team, row=workflow_resolve(team=team, workflow=spec.workflow))
        except (RunError, ValueError) as error:
            raise EvalError(str(error)) from None
        starting = list(dict.fromkeys(step.agent for step in flow.steps))
    for case in spec.cases:
        script = case.script or {}
        for agent in starting:
            if agent not in script and "*" not in script:
                raise EvalError(real_models_refusal(agent=agent, providers=[p.slug for p in usable], case=case.id))


def eval_collect_async(*, eval_run_id: int, countdown: float = 0.5, token: str = "") -> None:
    """Send a pass of the eval run's collection (``token``: the chain's; empty: a pass that takes it over)."""
    from evals_app.tasks import eval_collect_task

    eval_collect_task.apply_async((eval_run_id, token), countdown=countdown or None)


# -- scoring -----------------------------------------------------------------------------------


def observation_of(*, run: Run, case: CaseSpec) -> Observation:
    """What ``run`` did, for the checks of ``case``: result, outputs, tool calls, files, usage."""
    from workflows_app.services import workflow_steps

    outputs: dict[str, Any] = {}
    steps = workflow_steps(run)
    if steps is not None:
        for step in steps:
            for name, value in step["outputs"].items():
                outputs[name] = value
                outputs[f"{step['id']}.{name}"] = value
    else:
        root = run.activations.filter(parent__isnull=True).order_by("created_at").first()
        outputs = dict((root.context or {}).get("outputs") or {}) if root else {}
    calls = [ToolCallSeen(name=str(data.get("name", "")), arguments=dict(data.get("arguments") or {}), agent=agent)
             for agent, data in run.events.filter(type="tool_call").order_by("seq")
             .values_list("agent", "data")[:MAX_TOOL_CALLS_READ]]
    files = dict(WorkspaceFile.objects.filter(run=run).order_by("path").values_list("path", "content")[:MAX_FILES_READ])
    fired = [str(slug) for slug in run.events.filter(type="guardrail_triggered").order_by("seq")
             .values_list("data__guardrail", flat=True)[:MAX_TOOL_CALLS_READ]]
    return Observation(
        status=run.status, result=run.result, task=case.task or run.input, outputs=outputs, tool_calls=calls,
        files=files, cost_usd=run.cost_usd, tokens=run.prompt_tokens + run.completion_tokens,
        duration_s=run_duration_s(run), reference=case.reference, guardrails=fired,
    )


# -- totals and comparison ------------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float | None:
    """The nearest-rank percentile of ``values`` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return round(ordered[rank - 1], 3)


def eval_totals(*, eval_run: EvalRun) -> dict[str, Any]:
    cases = list(eval_run.cases.all())
    passed = sum(1 for case in cases if case.status == CaseStatus.PASSED)
    failed = sum(1 for case in cases if case.status == CaseStatus.FAILED)
    durations = [case.duration_s for case in cases if case.duration_s is not None]
    judge = EvalRun.objects.filter(pk=eval_run.pk).values_list("judge_cost_usd", "judge_tokens", "totals").first()
    return {
        "cases": len(cases), "passed": passed, "failed": failed,
        "pending": len(cases) - passed - failed,
        "pass_rate": round(passed / len(cases), 4) if cases else 0.0,
        "cost_usd": money_str(sum((case.cost_usd for case in cases), Decimal(0))),
        "tokens": sum(case.tokens for case in cases),
        "duration_p50_s": percentile(durations, 0.5), "duration_p95_s": percentile(durations, 0.95),
        "judge_cost_usd": money_str(judge[0]) if judge else "0", "judge_tokens": judge[1] if judge else 0,
        "judge_calls": int((judge[2] or {}).get("judge_calls", 0)) if judge else 0,
    }


CHANGE_ORDER = {"regression": 0, "removed": 1, "still_failing": 2, "improvement": 3, "new": 4, "still_passing": 5}


def eval_compare(*, eval_run: EvalRun, baseline: EvalRun) -> list[dict[str, Any]]:
    """Case by case, ``baseline`` (the version before) against ``eval_run``: regressions first."""
    before = {case.case_id: case for case in baseline.cases.all()}
    after = {case.case_id: case for case in eval_run.cases.all()}
    rows = []
    for case_id in [*after, *(cid for cid in before if cid not in after)]:
        old, new = before.get(case_id), after.get(case_id)
        if old is None:
            change = "new"
        elif new is None:
            change = "removed"
        elif old.status == CaseStatus.PASSED and new.status != CaseStatus.PASSED:
            change = "regression"
        elif old.status != CaseStatus.PASSED and new.status == CaseStatus.PASSED:
            change = "improvement"
        else:
            change = "still_passing" if new.status == CaseStatus.PASSED else "still_failing"
        rows.append({
            "case_id": case_id, "change": change,
            "before": _case_side(old), "after": _case_side(new),
            "failed_checks": [check["reason"] for check in (new.checks if new else []) if check.get("passed") is False],
        })
    position = {case_id: index for index, case_id in enumerate(after)}
    rows.sort(key=lambda row: (CHANGE_ORDER[row["change"]],
                               -((row["before"] or {}).get("score", 0) - (row["after"] or {}).get("score", 0)),
                               position.get(row["case_id"], len(position))))
    return rows


def _case_side(case: EvalCaseResult | None) -> dict[str, Any] | None:
    if case is None:
        return None
    return {"status": case.status, "score": case.score, "run": str(case.run_id) if case.run_id else None,
            "cost_usd": money_str(case.cost_usd), "tokens": case.tokens, "duration_s": case.duration_s}


def eval_run_get(*, team: Team, slug: str, eval_run_id: Any) -> EvalRun:
    """The eval run ``eval_run_id`` of ``team``'s dataset ``slug``; EvalRun.DoesNotExist otherwise."""
    try:
        number = int(eval_run_id)
    except (TypeError, ValueError):
        raise EvalRun.DoesNotExist from None
    return EvalRun.objects.select_related("baseline").get(team=team, dataset_slug=slug, pk=number)
