"""What starts a workflow besides a person: a cron schedule (celery beat) or a message on a channel.

- ``schedule``: beat calls :func:`schedules_fire` every 30 s; a workflow whose
  cron expression matches the current minute starts once for that minute
  (``Workflow.schedule_last_at`` is moved forward by a conditional update, so
  two beats, or a beat that runs twice in a minute, never start it twice).
  Each declared input is set to the minute it was due (ISO 8601).
- ``channel``: when any run of a team publishes on a channel, every workflow of
  that team with ``trigger: channel`` and that ``channel`` starts, the message
  as its first declared input (other inputs empty). A run of the workflow
  itself publishing on its own channel does not start it again.
"""

from __future__ import annotations

import logging
from datetime import datetime

from celery.schedules import crontab
from django.db import transaction
from django.db.models import Q

from agents_app.execution.errors import RunError
from agents_app.models import Run
from workflows_app.models import Workflow

logger = logging.getLogger(__name__)


def cron(expression: str) -> crontab:
    """``minute hour day-of-month month day-of-week``, as in crontab(5); ValueError names what is wrong."""
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError("must be a cron expression of five fields, e.g. '0 6 * * 1'")
    minute, hour, day_of_month, month, day_of_week = fields
    try:
        return crontab(minute=minute, hour=hour, day_of_month=day_of_month, month_of_year=month,
                       day_of_week=day_of_week)
    except Exception as error:  # celery raises ValueError, or a ParseException for a malformed field
        raise ValueError(f"not a valid cron expression: {error}") from None


def cron_matches(expression: str, at: datetime) -> bool:
    schedule = cron(expression)
    return (at.minute in schedule.minute and at.hour in schedule.hour and at.day in schedule.day_of_month
            and at.month in schedule.month_of_year and at.isoweekday() % 7 in schedule.day_of_week)


def schedules_fire(now: datetime) -> list[Run]:
    """Start every scheduled workflow due in the minute of ``now`` (UTC) that has not started in it yet."""
    from workflows_app.services import workflow_run_start

    minute = now.replace(second=0, microsecond=0)
    started: list[Run] = []
    for workflow in Workflow.objects.filter(trigger="schedule").select_related("team"):
        expression = (workflow.spec or {}).get("schedule") or ""
        try:
            if not cron_matches(expression, minute):
                continue
        except ValueError as error:
            logger.warning("workflow schedule unusable", extra={"workflow": workflow.slug, "error": str(error)})
            continue
        with transaction.atomic():
            claimed = Workflow.objects.filter(pk=workflow.pk).filter(
                Q(schedule_last_at__isnull=True) | Q(schedule_last_at__lt=minute)).update(schedule_last_at=minute)
            if not claimed:
                continue  # started for this minute already
            inputs = dict.fromkeys((workflow.spec or {}).get("inputs", []), minute.isoformat())
            try:
                started.append(workflow_run_start(team=workflow.team, workflow=workflow, inputs=inputs,
                                                   trigger="schedule"))
            except RunError as error:
                logger.warning("scheduled workflow not started", extra={"workflow": workflow.slug,
                                                                       "error": str(error)})
    return started


def channel_message_published(*, run_id, channel: str, content: str) -> list[Run]:
    """Start the team's workflows triggered by ``channel`` with the message (after the publish commits)."""
    from workflows_app.services import workflow_run_start

    publisher = Run.objects.filter(pk=run_id).select_related("team").first()
    if publisher is None:
        return []
    started: list[Run] = []
    for workflow in Workflow.objects.filter(team_id=publisher.team_id, trigger="channel", spec__channel=channel):
        if publisher.workflow == workflow.slug:
            continue  # its own message: no loop
        declared = list((workflow.spec or {}).get("inputs", []))
        inputs = {name: (content if index == 0 else "") for index, name in enumerate(declared)}
        try:
            started.append(workflow_run_start(team=publisher.team, workflow=workflow, inputs=inputs,
                                              trigger="channel"))
        except RunError as error:
            logger.warning("channel-triggered workflow not started",
                           extra={"workflow": workflow.slug, "channel": channel, "error": str(error)})
    return started
