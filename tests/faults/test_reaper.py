"""Work nothing would pick up again: lost task messages, a refusing broker, a session whose worker keeps dying."""

from datetime import timedelta

import pytest
from django.utils import timezone
from kombu.exceptions import OperationalError

from agents_app.execution import services
from agents_app.execution.services import (
    run_start,
    runs_unstick,
    session_begin,
    sessions_reap,
)
from agents_app.models import Activation, Event, Run, Session
from agents_app.tasks import execute_activation
from tests.runs import agent, finish

pytestmark = [pytest.mark.django_db(transaction=True)]

SCRIPT = {"lead": [{"text": "done"}]}


def lead(team):
    agent(team, "Lead")


def age(run, seconds):
    """Pretend the run and its dispatches happened ``seconds`` ago."""
    past = timezone.now() - timedelta(seconds=seconds)
    Run.objects.filter(pk=run.pk).update(created_at=past)
    Activation.objects.filter(run=run).exclude(dispatched_at=None).update(dispatched_at=past)


@pytest.mark.worker
def test_a_lost_task_message_is_sent_again_by_the_sweep(team_a, fault_worker, runs_settled, monkeypatch):
    lead(team_a)
    monkeypatch.setattr(execute_activation, "delay", lambda *args: None)  # the broker loses the message
    run = run_start(team=team_a, agent="lead", input="x", script=SCRIPT)
    monkeypatch.undo()
    [root] = Activation.objects.filter(run=run)
    assert (root.status, Run.objects.get(pk=run.pk).status) == ("dispatched", "queued")
    assert runs_unstick() == []  # not yet stale: a worker may still be about to take it
    age(run, 40)  # older than this process's MAS_SESSION_STALE_S (the default 30 s)
    assert runs_unstick() == [str(run.id)]
    run = finish(run)
    assert (run.status, run.result) == ("succeeded", "done")
    [retry] = [e.data for e in Event.objects.filter(run=run, type="retry")]
    assert retry == {"what": "dispatch", "activation": str(root.id), "delay_s": 0,
                     "reason": "no worker took it within 30 s (its task message was lost)"}
    assert Session.objects.filter(run=run).count() == 1


@pytest.mark.worker
def test_a_refusing_broker_leaves_the_work_queued_for_the_sweep(team_a, fault_worker, runs_settled, monkeypatch):
    lead(team_a)

    def refuse(*args):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(execute_activation, "delay", refuse)
    run = run_start(team=team_a, agent="lead", input="x", script=SCRIPT)
    monkeypatch.undo()
    [root] = Activation.objects.filter(run=run)
    assert (root.status, root.dispatched_at) == ("queued", None)
    age(run, 40)
    assert runs_unstick() == [str(run.id)]
    assert (finish(run).status, Session.objects.filter(run=run).count()) == ("succeeded", 1)


def test_a_session_whose_worker_keeps_dying_is_resumed_then_failed_with_the_reason(team_a, monkeypatch):
    lead(team_a)
    monkeypatch.setattr(execute_activation, "delay", lambda *args: None)
    monkeypatch.setattr(services, "run_dispatch_async", lambda **kwargs: None)
    run = run_start(team=team_a, agent="lead", input="x", script=SCRIPT)
    [root] = Activation.objects.filter(run=run)
    for resume in (1, 2, 3):
        start = session_begin(activation_id=root.id, worker=f"host:{resume}")
        assert start is not None and start.session.attempt == 1 and start.resumed == (resume > 1)
        Session.objects.filter(pk=start.session.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=60))
        assert sessions_reap() == [str(root.id)]
        root.refresh_from_db()
        assert (root.status, root.context["resumes"]) == ("queued", resume)
        Activation.objects.filter(pk=root.pk).update(status="dispatched")
    start = session_begin(activation_id=root.id, worker="host:4")
    Session.objects.filter(pk=start.session.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=60))
    assert sessions_reap() == [str(root.id)]

    run = Run.objects.get(pk=run.pk)
    message = ("worker host:4 stopped answering; the session was resumed 3 time(s) and its worker died each "
               "time, so it is not resumed again")
    assert (run.status, run.error) == ("failed", f"unknown: {message}")
    [session] = Session.objects.filter(run=run)
    assert (session.status, session.failure["message"], session.failure["suggested_retry"]) == (
        "failed", message, False)
    resumes = [e.data for e in Event.objects.filter(run=run, type="retry").order_by("seq")]
    assert [(r["what"], r["resume"], r["reason"]) for r in resumes] == [
        ("session_resume", n, f"worker host:{n} stopped answering") for n in (1, 2, 3)]
    assert Event.objects.filter(run=run).order_by("-seq").first().type == "run_complete"
    assert sessions_reap() == []
