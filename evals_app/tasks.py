"""Celery task of evals: collect the results of an eval run's cases until it is closed."""

from __future__ import annotations

from celery import shared_task

from evals_app.models import EvalRun

COLLECT_EVERY_S = 0.5


@shared_task(ignore_result=True)
def eval_collect_task(eval_run_id: int) -> None:
    """Score what ended; come back in a moment while cases still run (idempotent: each case is scored once)."""
    from evals_app.services import eval_collect, eval_collect_async

    try:
        done = eval_collect(eval_run_id=eval_run_id)
    except EvalRun.DoesNotExist:
        return  # deleted meanwhile
    if not done:
        eval_collect_async(eval_run_id=eval_run_id, countdown=COLLECT_EVERY_S)
