"""Celery task of evals: one pass of an eval run's collection, coming back while cases still run."""

from __future__ import annotations

from celery import shared_task


@shared_task(ignore_result=True)
def eval_collect_task(eval_run_id: int, token: str = "") -> None:
    """Score what ended; come back in a moment while cases still run, or after a pass that failed.

    Idempotent: each case is scored once; a task of a chain that lost the collection stops (see
    ``evals_app.collection``).
    """
    from evals_app.collection import eval_collect_pass
    from evals_app.services import eval_collect_async

    come_back_in_s, token = eval_collect_pass(eval_run_id=eval_run_id, token=token)
    if come_back_in_s is not None:
        eval_collect_async(eval_run_id=eval_run_id, token=token, countdown=come_back_in_s)
