"""Work nothing would pick up again: a claim by a worker that vanished, a session whose worker keeps dying.

Here the test is the sweeper: it holds the sweep's lock (``sweeps_held``),
so the periodic sweeps of the workers alive meanwhile cannot take the work
from under it.
"""

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.utils import timezone
from agents_app.execution.lifecycle import session_begin
from agents_app.execution.reaper import runs_unstick, sessions_reap
from agents_app.execution.runs import run_start
from agents_app.execution.recovery import SWEEP_LOCK, Sweep, recovery_sweep
from agents_app.models import Activation, Event, Run, Session, Worker
from agents_app.scheduler import dispatch_run
from agents_app.scheduler.workers import worker_beat, workers_dead, workers_reap
from tests.runs import agent, finish

# alone: the sweeps and the scheduler of a live worker on this database (another test's, in this process) can
# reach the rows these tests build by hand before the test's own calls do when the machine is busy.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.alone]

SCRIPT = {"lead": [{"text": "done"}]}


def lead(team):
    agent(team, "Lead")


def sweep_lock(take: bool) -> None:
    """Take (waiting for a sweep under way) or give back the lock every sweep takes, on the test's connection."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT pg_advisory_{'lock' if take else 'unlock'}(%s)", [SWEEP_LOCK])


@pytest.fixture
def sweeps_held(transactional_db):
    """No worker's sweep runs during the test: the test holds the sweep's lock."""
    sweep_lock(True)
    yield
    sweep_lock(False)


def my_advisory_locks() -> list[int]:
    """The keys of the advisory locks this test's connection holds."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT (classid::bigint << 32) | objid::bigint FROM pg_locks "
                       "WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()")
        return [key for (key,) in cursor.fetchall()]


def sweep_elsewhere() -> Sweep | None:
    """recovery_sweep() on a connection of its own, as another worker would run it."""
    result = {}

    def sweep():
        try:
            result["sweep"] = recovery_sweep()
        finally:
            connections.close_all()

    thread = threading.Thread(target=sweep)
    thread.start()
    thread.join(30)
    return result["sweep"]


def age(run, seconds):
    """Pretend the run and its claims happened ``seconds`` ago."""
    past = timezone.now() - timedelta(seconds=seconds)
    Run.objects.filter(pk=run.pk).update(created_at=past)
    Activation.objects.filter(run=run).exclude(dispatched_at=None).update(dispatched_at=past)


def claim_for(name: str, queue: str) -> list[str]:
    """A worker ``name`` (which then vanishes) claims the ready work of ``queue``."""
    from tests.agents_app.test_scheduler import claim_now

    return [c.activation_id for c in claim_now(worker=name, queue=queue, free=10, running=0)]


@pytest.mark.worker
def test_work_claimed_by_a_worker_that_is_gone_is_ready_again(team_a, fault_worker, runs_settled, sweeps_held,
                                                               unserved):
    lead(team_a)
    run = run_start(team=team_a, agent="lead", input="x", script=SCRIPT)
    [root] = Activation.objects.filter(run=run)
    assert (root.status, root.queue, Run.objects.get(pk=run.pk).status) == ("ready", unserved, "queued")
    assert claim_for("gone:1", unserved) == [str(root.id)]  # a worker with no row: it died before its first beat
    root.refresh_from_db()
    assert (root.status, root.worker) == ("dispatched", "gone:1")
    assert runs_unstick() == []  # not yet stale: it may still be about to begin it
    age(run, 40)  # older than this process's MAS_SESSION_STALE_S (the default 30 s)
    Activation.objects.filter(pk=root.pk).update(queue=fault_worker.queue)  # now a live worker may take it
    assert runs_unstick() == [str(run.id)]
    run = finish(run)
    assert (run.status, run.result) == ("succeeded", "done")
    [retry] = [e.data for e in Event.objects.filter(run=run, type="retry")]
    assert retry == {"what": "dispatch", "activation": str(root.id), "delay_s": 0,
                     "reason": "worker gone:1 took it and is gone"}
    assert Session.objects.filter(run=run).count() == 1


def test_a_session_whose_worker_keeps_dying_is_resumed_then_failed_with_the_reason(team_a, sweeps_held, unserved):
    lead(team_a)
    run = run_start(team=team_a, agent="lead", input="x", script=SCRIPT)
    [root] = Activation.objects.filter(run=run)
    for resume in (1, 2, 3):
        start = session_begin(activation_id=root.id, worker=f"host:{resume}")
        assert start is not None and start.session.attempt == 1 and start.resumed == (resume > 1)
        Session.objects.filter(pk=start.session.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=60))
        assert sessions_reap() == [str(root.id)]
        root.refresh_from_db()
        assert (root.status, root.context["resumes"]) == ("ready", resume)  # admitted again at once
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



def test_a_session_of_a_dead_worker_is_left_to_the_scheduler(team_a, sweeps_held, unserved, settings):
    """A worker that stopped beating is the scheduler's to declare dead (within MAS_WORKER_DEAD_S, with the
    reason that it died): the slower session sweep leaves its sessions alone. A session that went silent on a
    worker that still beats is the sweep's."""
    # host:1 is dead by this test's MAS_WORKER_DEAD_S, not yet by a live worker's (2.5 s), whose beat reaps the
    # dead of every pool, sweep lock or not: it could hand host:1's work over before the test's own call.
    settings.MAS_WORKER_DEAD_S = 0.5
    lead(team_a)
    run = run_start(team=team_a, agent="lead", input="x", script=SCRIPT)
    [root] = Activation.objects.filter(run=run)
    start = session_begin(activation_id=root.id, worker="host:1")
    Session.objects.filter(pk=start.session.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=60))
    worker_beat(name="host:1", queue=unserved, slots=10, running=1)
    Worker.objects.filter(name="host:1").update(heartbeat_at=timezone.now() - timedelta(seconds=1))
    assert sessions_reap() == []
    assert Activation.objects.get(pk=root.pk).status == "running"
    assert workers_reap(workers_dead()) == [str(root.id)]
    assert [(e.data["what"], e.data["reason"]) for e in Event.objects.filter(run=run, type="retry")] == [
        ("session_resume", "worker host:1 died")]
    assert Activation.objects.get(pk=root.pk).status == "ready"
    assert sessions_reap() == []


def test_a_silent_session_of_a_worker_that_still_beats_is_resumed_by_the_sweep(team_a, sweeps_held, unserved):
    lead(team_a)
    run = run_start(team=team_a, agent="lead", input="x", script=SCRIPT)
    [root] = Activation.objects.filter(run=run)
    start = session_begin(activation_id=root.id, worker="host:1")
    Session.objects.filter(pk=start.session.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=60))
    worker_beat(name="host:1", queue=unserved, slots=10, running=1)  # alive: its session lost its database
    assert workers_dead() == []
    assert sessions_reap() == [str(root.id)]
    assert [(e.data["what"], e.data["reason"]) for e in Event.objects.filter(run=run, type="retry")] == [
        ("session_resume", "worker host:1 stopped answering")]
    assert Activation.objects.get(pk=root.pk).status == "ready"


def test_work_queued_again_waits_for_a_worker_however_many_sweeps_pass(team_a, sweeps_held, unserved):
    """A reaped activation is not reaped again before a worker claims it (that would count deaths that did not
    happen); if its claimer vanishes, it is ready again; a session is never begun twice."""
    lead(team_a)
    run = run_start(team=team_a, agent="lead", input="x", script=SCRIPT)
    [root] = Activation.objects.filter(run=run)
    start = session_begin(activation_id=root.id, worker="host:1")
    Session.objects.filter(pk=start.session.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=60))
    assert sessions_reap() == [str(root.id)]
    root.refresh_from_db()
    assert root.status == "ready"  # admitted again; no worker has taken it yet
    assert claim_for("host:9", unserved) == [str(root.id)]
    assert dispatch_run(run_id=run.id) == []  # admitting again admits nothing twice

    for _ in range(3):  # sweep after sweep: still one resume
        assert sessions_reap() == []
    root.refresh_from_db()
    assert (root.status, root.context["resumes"]) == ("dispatched", 1)
    assert Event.objects.filter(run=run, type="retry").count() == 1
    assert runs_unstick() == []  # its claim is recent

    # Its claimer vanished: once the claim is older than the stale time, the sweep makes it ready again.
    Activation.objects.filter(pk=root.pk).update(dispatched_at=timezone.now() - timedelta(seconds=60))
    assert runs_unstick() == [str(run.id)]
    root.refresh_from_db()
    assert (root.status, root.context["resumes"]) == ("ready", 1)
    assert [e.data["what"] for e in Event.objects.filter(run=run, type="retry").order_by("seq")] == [
        "session_resume", "dispatch"]

    # A worker claims it and resumes the session; beginning it again is refused, even in the same process
    # (this would run the session twice at once).
    resumed = session_begin(activation_id=root.id, worker="host:2")
    assert (resumed.session.pk, resumed.resumed) == (start.session.pk, True)
    assert session_begin(activation_id=root.id, worker="host:2") is None
    assert session_begin(activation_id=root.id, worker="host:3") is None
    assert [e.data["resumed"] for e in Event.objects.filter(run=run, type="session_start").order_by("seq")] == [
        False, True]
    assert (sessions_reap(), runs_unstick()) == ([], [])


def test_one_sweep_at_a_time_across_processes(team_a, monkeypatch, unserved):
    """While one connection holds the sweep's lock, a sweep elsewhere skips; a sweep gives back what it took."""
    sweep_lock(True)  # first, so that no worker alive meanwhile sweeps the session made stale below
    try:
        one_sweep_at_a_time(team_a, monkeypatch)
    finally:
        sweep_lock(False)
    assert my_advisory_locks() == []  # the sweep on this connection kept no hold of its own


def one_sweep_at_a_time(team_a, monkeypatch):
    lead(team_a)
    run = run_start(team=team_a, agent="lead", input="x", script=SCRIPT)
    [root] = Activation.objects.filter(run=run)
    start = session_begin(activation_id=root.id, worker="host:1")
    Session.objects.filter(pk=start.session.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=60))
    assert my_advisory_locks() == [SWEEP_LOCK]

    assert sweep_elsewhere() is None  # another worker: the lock is taken, it sweeps nothing
    root.refresh_from_db()
    assert (root.status, Event.objects.filter(run=run, type="retry").count()) == ("running", 0)

    # This connection holds the lock, so its own sweep runs (advisory locks nest per connection) ...
    assert recovery_sweep() == Sweep(resumed=[str(root.id)], dispatched=[])
    root.refresh_from_db()
    assert (root.status, root.context["resumes"]) == ("ready", 1)
    # ... and gives back only its own hold: the lock is still this test's, other sweeps still skip.
    assert my_advisory_locks() == [SWEEP_LOCK]
    assert sweep_elsewhere() is None
    assert Event.objects.filter(run=run, type="retry").count() == 1
