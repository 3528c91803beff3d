"""Celery tasks: take ids, hand the work to the process's session loop.

Sessions are not Celery tasks: each worker process's scheduler loop claims
them from Postgres (``agents_app.scheduler``). What is here is the rest: a
retry's delayed dispatch, the beat's sweeps, webhooks.
"""

from celery import shared_task

from agents_app.execution.recovery import recovery_sweep
from agents_app.scheduler import dispatch_run as run_dispatch
from mas_core.runner import db, runner


@shared_task(ignore_result=True)
def dispatch_run(run_id: str) -> None:
    """A run's dispatch after a retry's backoff (``scheduler.dispatch_later``)."""
    # Database work of the worker goes through the loop's bounded thread pool.
    runner.run(db(run_dispatch)(run_id=run_id))


@shared_task(ignore_result=True)
def reap_sessions() -> None:
    """Beat: the recovery sweep every worker also runs by itself (see ``execution.recovery``)."""
    runner.run(db(recovery_sweep)())


@shared_task(ignore_result=True)
def prune_runs() -> None:
    """Beat (daily): the retention of ``agents_app.retention``, unless MAS_RETENTION_DAYS is 0."""
    from django.conf import settings

    from agents_app.retention import runs_prune

    if settings.MAS_RETENTION_DAYS > 0:
        runs_prune(older_than_days=settings.MAS_RETENTION_DAYS)


@shared_task(ignore_result=True)
def expire_approvals() -> None:
    """Beat: requests past their deadline get their default outcome (every worker's sweep does it too)."""
    from agents_app.approvals.services import approvals_expire

    runner.run(db(approvals_expire)())


@shared_task(bind=True, ignore_result=True, max_retries=5)
def deliver_webhook(self, team_id: int, body: str) -> None:
    """POST one notification to the team's webhook (its URL and secret as they are now); retried with backoff."""
    import logging

    from agents_app.approvals.webhooks import DeliveryFailed, webhook_deliver
    from agents_app.models import Team

    team = runner.run(db(lambda: Team.objects.filter(pk=team_id).exclude(webhook_url="")
                         .values_list("webhook_url", "webhook_secret").first())())
    if team is None:
        return
    url, secret = team
    try:
        runner.run(webhook_deliver(url=url, secret=secret, body=body.encode("utf-8")))
    except DeliveryFailed as error:
        logging.getLogger(__name__).warning("webhook delivery failed", extra={
            "team": team_id, "error": str(error), "attempt": self.request.retries + 1})
        if self.request.retries < self.max_retries:
            raise self.retry(countdown=min(300, 2 ** self.request.retries)) from None
