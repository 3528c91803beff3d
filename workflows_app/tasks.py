"""Celery tasks of workflows: the beat that starts scheduled ones."""

from celery import shared_task
from django.utils import timezone


@shared_task(ignore_result=True)
def workflow_schedules_tick() -> int:
    """Beat (every 30 s): start the workflows whose cron schedule is due this minute."""
    from workflows_app.triggers import schedules_fire

    return len(schedules_fire(timezone.now()))
