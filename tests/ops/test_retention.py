"""Retention: exactly what of old finished runs is deleted, and what stays."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from mas_core.eventlog import event_append
from agents_app.models import Activation, Event, Run, Session, SessionEntry, WorkspaceFile, WorkspaceFileVersion

pytestmark = [pytest.mark.django_db]


def run_with_records(team, *, status, finished_days_ago):
    finished = timezone.now() - timedelta(days=finished_days_ago) if finished_days_ago is not None else None
    run = Run.objects.create(team=team, agent="a", status=status, finished_at=finished, result="kept",
                             prompt_tokens=5)
    activation = Activation.objects.create(run=run, agent="a")
    session = Session.objects.create(run=run, activation=activation, agent="a", status="ok",
                                     state={"messages": [{"role": "user", "content": "x"}]}, prompt_tokens=5)
    SessionEntry.objects.create(session=session, seq=1, kind="message", payload='{"role": "user", "content": "x"}')
    for index in range(3):
        event_append(run_id=run.id, type="note", agent="a", data={"n": index})
    WorkspaceFile.objects.create(run=run, path="out.md", content="big")
    WorkspaceFileVersion.objects.create(run=run, path="out.md", seq=3, content="big")  # what a fork reads
    return run


def test_old_finished_runs_lose_events_checkpoints_and_files_only(team_a, team_b):
    old = run_with_records(team_a, status="succeeded", finished_days_ago=40)
    old_b = run_with_records(team_b, status="failed", finished_days_ago=31)
    recent = run_with_records(team_a, status="succeeded", finished_days_ago=5)
    going = run_with_records(team_a, status="running", finished_days_ago=None)
    out = StringIO()
    call_command("prune_runs", "--older-than-days", "30", stdout=out)
    assert out.getvalue().strip() == ("Pruned 2 run(s) finished more than 30 day(s) ago: 6 event(s), "
                                      "2 checkpoint(s), 2 file(s) deleted.")
    for run in (old, old_b):
        assert not Event.objects.filter(run=run).exists() and not WorkspaceFile.objects.filter(run=run).exists()
        assert not WorkspaceFileVersion.objects.filter(run=run).exists()
        session = Session.objects.get(run=run)
        assert (session.state, session.status, session.prompt_tokens) == ({}, "ok", 5)
        assert not SessionEntry.objects.filter(session=session).exists()
        kept = Run.objects.get(pk=run.pk)
        assert (kept.result, kept.prompt_tokens) == ("kept", 5)
    for run in (recent, going):
        assert Event.objects.filter(run=run).count() == 3 and WorkspaceFile.objects.filter(run=run).count() == 1
        assert WorkspaceFileVersion.objects.filter(run=run).count() == 1
        assert Session.objects.get(run=run).state != {}
        assert SessionEntry.objects.filter(session__run=run).count() == 1
    call_command("prune_runs", "--older-than-days", "30", stdout=out)  # nothing left to prune
    assert out.getvalue().strip().endswith("0 event(s), 0 checkpoint(s), 0 file(s) deleted.")
    with pytest.raises(CommandError, match="more than 0"):
        call_command("prune_runs", "--older-than-days", "0")


def test_beat_prunes_daily_with_the_configured_age(settings):
    assert settings.CELERY_BEAT_SCHEDULE["prune-runs"] == {"task": "agents_app.tasks.prune_runs",
                                                           "schedule": 86400.0}
    assert settings.MAS_RETENTION_DAYS == 90
