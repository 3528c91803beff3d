"""Collecting an eval run: score each case once its run has ended, close the eval run when none is left.

A chain of ``eval_collect_task`` messages does it, each pass coming back a moment later while cases still
run. The chain is durable:

- **One chain at a time.** Each task carries the eval run's ``collect_token``; a pass first claims the eval
  run (short transaction): it must hold the current token (or bring none: then it takes over with a new
  one, and the old chain stops at its next pass) and find no other pass under way (``collecting_until``,
  a lease renewed per case and per judge call).
- **An error ends one pass, not the chain.** A pass that fails is logged and its task comes back after
  ``RETRY_AFTER_S``; a case whose scoring fails is left pending for the next pass (and failed, with the
  error, once the eval run is past its deadline, so a scorer that always fails cannot hold it forever).
- **A lost message is found by the sweep.** Every worker's recovery sweep (agents_app's, through
  ``sweep_hook_register``) restarts the collection of an eval run still running whose last pass ended
  longer ago than ``MAS_SESSION_STALE_S`` with no pass under way.
- **No model call inside a transaction.** A case is scored — its observation read, its checks run, the
  judge's model called — with no transaction open and no row locked; then one short transaction locks
  the case's row, checks it is still pending and its eval run still running, and writes the result.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from agents_app.execution.lifecycle import session_stale_after_s
from agents_app.execution.runs import run_cancel
from agents_app.models import DefinitionVersion, Run
from agents_app.models.runs import FINISHED_RUN_STATUSES
from agents_app.selectors_runs import run_duration_s
from evals_app.models import CaseStatus, EvalCaseResult, EvalRun, EvalRunStatus
from evals_app.scorers import Judge, JudgeUnavailable, JudgeVerdict, judge_reply, score_case
from evals_app.services import EvalError, eval_collect_async, eval_spec, eval_totals, observation_of
from evals_app.specs import CaseSpec, EvalSpec

logger = logging.getLogger(__name__)

COLLECT_EVERY_S = 0.5  # between the passes of a chain while cases still run
RETRY_AFTER_S = 2.0  # after a pass that failed
LEASE_S = 300  # a pass under way holds the eval run this long past its last case or judge call


# -- the chain -----------------------------------------------------------------------------------


def eval_collect_pass(*, eval_run_id: int, token: str = "") -> tuple[float | None, str]:
    """One pass of the chain holding ``token`` (empty: take the collection over).

    Returns ``(come_back_in_s, token)``: when the next pass of the chain should run (None: no next pass)
    and with which token. A pass that could not claim the eval run (closed, another chain's, or another
    pass under way) has no next; the sweep restarts a collection that nothing carries any more.
    """
    claimed = _claim(eval_run_id=eval_run_id, token=token)
    if claimed is None:
        return None, token
    try:
        done = eval_collect(eval_run_id=eval_run_id, token=claimed)
    except EvalRun.DoesNotExist:
        return None, claimed  # deleted meanwhile
    except Exception:
        logger.exception("eval collection pass failed", extra={"eval_run": eval_run_id})
        _release(eval_run_id=eval_run_id, token=claimed)
        return RETRY_AFTER_S, claimed
    _release(eval_run_id=eval_run_id, token=claimed)
    return (None if done else COLLECT_EVERY_S), claimed


def _claim(*, eval_run_id: int, token: str) -> str | None:
    now = timezone.now()
    mine = token or uuid.uuid4().hex
    rows = EvalRun.objects.filter(pk=eval_run_id, status=EvalRunStatus.RUNNING).filter(
        Q(collecting_until__isnull=True) | Q(collecting_until__lt=now))
    if token:
        rows = rows.filter(collect_token=token)
    claimed = rows.update(collect_token=mine, collecting_until=now + timedelta(seconds=LEASE_S))
    return mine if claimed else None


def _renew(*, eval_run_id: int, token: str) -> None:
    EvalRun.objects.filter(pk=eval_run_id, collect_token=token).update(
        collecting_until=timezone.now() + timedelta(seconds=LEASE_S))


def _release(*, eval_run_id: int, token: str) -> None:
    EvalRun.objects.filter(pk=eval_run_id, collect_token=token).update(collecting_until=None,
                                                                       collected_at=timezone.now())


def eval_runs_sweep() -> list[str]:
    """Restart the collection of running eval runs that nothing collects any more; returns their ids.

    Called by every worker's recovery sweep. An eval run counts as abandoned when no pass is under way
    (or its lease ran out) and its last pass ended — or, with none yet, it started — longer ago than
    ``MAS_SESSION_STALE_S``. The task sent brings no token, so it takes the collection over.
    """
    now = timezone.now()
    cutoff = now - timedelta(seconds=session_stale_after_s())
    stale = (EvalRun.objects.filter(status=EvalRunStatus.RUNNING)
             .filter(Q(collecting_until__isnull=True) | Q(collecting_until__lt=now))
             .annotate(last=Coalesce("collected_at", "created_at")).filter(last__lt=cutoff)
             .values_list("pk", flat=True)[:1000])
    restarted = [str(pk) for pk in stale]
    for pk in restarted:
        eval_collect_async(eval_run_id=int(pk), countdown=0)
    if restarted:
        logger.warning("eval collections restarted", extra={"eval_runs": restarted})
    return restarted


# -- one pass ------------------------------------------------------------------------------------


def eval_collect(*, eval_run_id: int, token: str = "") -> bool:
    """Score the cases whose runs have ended; close the eval run when none is left. True once it is closed.

    Past the eval run's deadline, the runs still going are cancelled (and scored as such next time).
    """
    eval_run = EvalRun.objects.select_related("team", "dataset").get(pk=eval_run_id)
    if eval_run.status != EvalRunStatus.RUNNING:
        return True
    spec = _spec_at(eval_run)
    judge = judge_for(eval_run=eval_run, spec=spec, token=token)
    overdue = timezone.now() > eval_run.deadline
    for result in list(eval_run.cases.filter(status=CaseStatus.PENDING).select_related("run")):
        run = result.run
        if run is None:  # its run was deleted meanwhile
            EvalCaseResult.objects.filter(pk=result.pk, status=CaseStatus.PENDING).update(
                status=CaseStatus.FAILED, checks=[{"type": "run", "passed": False, "score": 0.0,
                                                   "reason": "the case's run was deleted"}])
            continue
        if run.status not in FINISHED_RUN_STATUSES:
            if overdue:
                run_cancel(run=run)
            continue
        if token:
            _renew(eval_run_id=eval_run_id, token=token)
        try:
            _score(result=result, run=run, case=spec.case(result.case_id), judge=judge)
        except Exception as error:
            # Left pending for the next pass; past the deadline, failed with the error (never held forever).
            logger.exception("eval case scoring failed", extra={"eval_run": eval_run_id, "case": result.case_id})
            if overdue:
                _write(result=result, run=run, passed=False, score=0.0, checks=[
                    {"type": "scoring", "passed": False, "score": 0.0, "reason": f"scoring failed: {error}"[:2000]}])
    with transaction.atomic():
        eval_run = EvalRun.objects.select_for_update().get(pk=eval_run_id)
        if eval_run.status != EvalRunStatus.RUNNING or eval_run.cases.filter(status=CaseStatus.PENDING).exists():
            return eval_run.status != EvalRunStatus.RUNNING
        eval_run.totals = eval_totals(eval_run=eval_run)
        eval_run.status, eval_run.finished_at = EvalRunStatus.FINISHED, timezone.now()
        closed = ["totals", "status", "finished_at"]
        if token and eval_run.collect_token == token:  # the closing pass lets its lease go with the close
            eval_run.collecting_until, eval_run.collected_at = None, eval_run.finished_at
            closed += ["collecting_until", "collected_at"]
        eval_run.save(update_fields=closed)
    logger.info("eval run finished", extra={"eval_run": eval_run.id, "pass_rate": eval_run.totals["pass_rate"]})
    return True


def _spec_at(eval_run: EvalRun) -> EvalSpec:
    """The dataset as it was when the eval run started (its kept version), whatever was saved since."""
    from agents_app.execution.versions import _parse
    from evals_app.kinds import EVAL

    text = (DefinitionVersion.objects.filter(team=eval_run.team, kind=EVAL.name, slug=eval_run.dataset_slug,
                                             number=eval_run.dataset_version)
            .values_list("content", flat=True).first())
    if text is None:
        if eval_run.dataset is None:
            raise EvalError(f"version {eval_run.dataset_version} of dataset {eval_run.dataset_slug} is not kept")
        return eval_spec(eval_run.dataset)
    data, _, _ = _parse(EVAL, text, path=f"evals/{eval_run.dataset_slug}.md")
    return EvalSpec.model_validate(data)


def _score(*, result: EvalCaseResult, run: Run, case: CaseSpec | None, judge: Judge | None) -> None:
    """Score one case with no transaction open (the judge calls a model), then write it in a short one."""
    if case is None:
        passed, score, checks = False, 0.0, [{"type": "case", "passed": False, "score": 0.0,
                                              "reason": "the case is not in the dataset's version"}]
    else:
        seen = observation_of(run=run, case=case)
        passed, score, results = score_case([c.model_dump(exclude_none=True) for c in case.checks], seen,
                                            judge=judge)
        checks = [item.as_dict() for item in results]
    _write(result=result, run=run, passed=passed, score=score, checks=checks)


def _write(*, result: EvalCaseResult, run: Run, passed: bool, score: float, checks: list) -> None:
    with transaction.atomic():
        locked = (EvalCaseResult.objects.select_for_update()
                  .filter(pk=result.pk, status=CaseStatus.PENDING, eval_run__status=EvalRunStatus.RUNNING).first())
        if locked is None:
            return  # scored meanwhile (a pass whose lease had run out), or the eval run was closed
        locked.status = CaseStatus.PASSED if passed else CaseStatus.FAILED
        locked.score, locked.checks, locked.run_status = score, checks, run.status
        locked.cost_usd, locked.tokens = run.cost_usd, run.prompt_tokens + run.completion_tokens
        locked.duration_s = run_duration_s(run)
        locked.save(update_fields=["status", "score", "checks", "run_status", "cost_usd", "tokens", "duration_s"])


# -- the judge -----------------------------------------------------------------------------------


def judge_for(*, eval_run: EvalRun, spec: EvalSpec, token: str = "") -> Judge | None:
    """The dataset's judge as a function of a prompt, billed to the eval run; None when none is configured.

    Each call takes its turn and checks the budget in one short transaction, calls the model with none
    open, then adds the cost with an atomic update.
    """
    if spec.judge is None:
        return None
    from agents_app.llm.pricing import usage_cost
    from agents_app.llm.registry import provider_for
    from agents_app.llm.scripted import MemoryCursor
    from agents_app.models import ModelProvider
    from mas_core.llm_types import Message, ModelRequest, ProviderError

    config = spec.judge
    providers = list(ModelProvider.objects.filter(team=eval_run.team).prefetch_related("models"))
    # The judge's script plays its turns in order across the eval run: the cursor is the number of
    # judge calls made so far, kept on the row.
    script = {"judge": config.script} if config.script is not None else None

    def judge(prompt: str) -> JudgeVerdict:
        with transaction.atomic():
            row = EvalRun.objects.select_for_update().get(pk=eval_run.pk)
            # Stopped once its spend reaches the budget (a free model — local, scripted — never does).
            if row.judge_cost_usd > 0 and row.judge_cost_usd >= Decimal(str(config.max_cost_usd)):
                raise JudgeUnavailable(f"the judge's budget of ${config.max_cost_usd:g} is spent")
            calls = int(row.totals.get("judge_calls", 0))
            row.totals = {**row.totals, "judge_calls": calls + 1}
            if token:
                row.collecting_until = timezone.now() + timedelta(seconds=LEASE_S)
            row.save(update_fields=["totals", "collecting_until"])
        try:
            resolved = provider_for(config.model, providers=providers, team=eval_run.team.slug, script=script,
                                    cursor=MemoryCursor({"judge": calls}))
            request = ModelRequest(model=resolved.model, agent="judge", temperature=0, messages=[
                Message(role="system", content=_judge_system()), Message(role="user", content=prompt)])
            response = asyncio.run(resolved.provider.complete(request))
        except ProviderError as error:
            raise JudgeUnavailable(f"the judge could not be called: {error}") from None
        cost = usage_cost(response.usage, resolved.prices)
        EvalRun.objects.filter(pk=eval_run.pk).update(
            judge_cost_usd=F("judge_cost_usd") + cost,
            judge_tokens=F("judge_tokens") + response.usage.prompt_tokens + response.usage.completion_tokens)
        return judge_reply(response.text)

    return judge


def _judge_system() -> str:
    from evals_app.scorers import JUDGE_INSTRUCTIONS

    return JUDGE_INSTRUCTIONS
