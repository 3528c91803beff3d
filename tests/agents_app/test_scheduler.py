"""The scheduler's order: per-team limits, weights, priority and age; claims from Postgres by real workers."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from django.db import connection, connections
from django.db.models import Count

from agents_app.execution.runs import run_start
from agents_app.models import Activation, Event, Session, Team, Worker
from agents_app.scheduler import team_queues
from agents_app.scheduler.claim import CLAIM_LOCK, claim
from agents_app.scheduler.workers import worker_beat
from tests.runs import agent, events, finish, wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]


def ready_runs(team, count: int, *, priority: int | None = None) -> list[Activation]:
    """``count`` runs of the team's lead, each with its root ready (in the test's own, unserved pool)."""
    roots = []
    for index in range(count):
        run = run_start(team=team, agent="lead", input=f"{team.slug} {index}", script={"lead": [{"text": "-"}]})
        root = run.activations.get()
        if priority is not None:
            Activation.objects.filter(pk=root.pk).update(priority=priority)
        roots.append(root)
    return roots


def claim_now(**kwargs):
    """claim(), again while a worker of the suite (claiming its own pool) holds the claims' lock."""
    for _ in range(500):
        claimed = claim(**kwargs)
        if claimed is not None:
            return claimed
        time.sleep(0.01)
    raise AssertionError("the claims' lock stayed taken for 5 s")


def claimed_teams(queue: str, free: int, *, worker: str = "w:1", running: int = 0) -> list[str]:
    """Claim ``free`` slots for ``worker``; the slugs of the claimed activations' teams, in claim order."""
    claimed = claim_now(worker=worker, queue=queue, free=free, running=running)
    slugs = dict(Team.objects.values_list("id", "slug"))
    return [slugs[item.team_id] for item in claimed]


@pytest.fixture
def leads(team_a, team_b, make_team):
    team_c = make_team("gamma")
    for team in (team_a, team_b, team_c):
        agent(team, "Lead")
    return team_a, team_b, team_c


def test_free_slots_go_to_the_team_using_the_least_of_its_weighted_share(leads, unserved):
    alpha, beta, gamma = leads
    Team.objects.filter(pk=alpha.pk).update(weight=2)
    for team in leads:
        ready_runs(team, 10)
    # Weight 2 against 1 and 1: alpha takes two slots for each one of the others.
    assert claimed_teams(unserved, 8) == ["alpha", "alpha", "beta", "gamma", "alpha", "alpha", "beta", "gamma"]
    # What runs counts: with alpha holding 4 and the others 2 each, the next slot of equal shares is alpha's
    # (4/2 = 2/1), then the others catch up before alpha's fifth.
    assert claimed_teams(unserved, 4) == ["alpha", "alpha", "beta", "gamma"]
    assert [(q.team, q.ready, q.running) for q in team_queues()] == [
        ("alpha", 4, 6), ("beta", 7, 3), ("gamma", 7, 3)]


def test_a_burst_takes_its_share_and_another_teams_first_run_the_next_slot(leads, unserved):
    alpha, beta, _ = leads
    ready_runs(alpha, 30)
    assert claimed_teams(unserved, 20) == ["alpha"] * 20
    [late] = ready_runs(beta, 1)
    # alpha's 10 older runs wait behind beta's one: beta holds no slot yet.
    assert claimed_teams(unserved, 1) == ["beta"]
    assert Activation.objects.get(pk=late.pk).status == "dispatched"


def test_a_team_never_runs_more_than_its_limit_and_its_admins_may_only_lower_it(leads, unserved):
    alpha, beta, gamma = leads
    Team.objects.filter(pk=alpha.pk).update(max_sessions=3)  # the operator's cap
    Team.objects.filter(pk=beta.pk).update(session_limit=1)  # the team's own, under the default cap
    for team in leads:
        ready_runs(team, 5)
    teams = claimed_teams(unserved, 50)
    assert (teams.count("alpha"), teams.count("beta"), teams.count("gamma")) == (3, 1, 5)
    assert claimed_teams(unserved, 50) == []  # nothing more while they hold their slots
    # A slot of alpha's frees (its session ended): alpha may take one more, no more.
    first = Activation.objects.filter(team=alpha, status="dispatched").order_by("created_at").first()
    Activation.objects.filter(pk=first.pk).update(status="done")
    assert claimed_teams(unserved, 50) == ["alpha"]
    assert {q.team: (q.limit, q.ready, q.running) for q in team_queues()} == {
        "alpha": (3, 1, 3), "beta": (1, 4, 1), "gamma": (500, 0, 5)}


def test_a_saturated_worker_takes_only_the_teams_it_runs_nothing_of(leads, unserved):
    alpha, beta, gamma = leads
    for team in leads:
        ready_runs(team, 3)
    slugs = dict(Team.objects.values_list("slug", "id"))
    claimed = claim_now(worker="w:1", queue=unserved, free=50, running=0,
                        skip_teams={slugs["alpha"], slugs["gamma"]})
    assert [item.team_id for item in claimed] == [beta.id] * 3
    assert dict(Activation.objects.filter(status="ready").values_list("team__slug").annotate(n=Count("id"))) == {
        "alpha": 3, "gamma": 3}


def test_within_a_team_priority_goes_first_then_age(leads, unserved):
    alpha, *_ = leads
    old = ready_runs(alpha, 2)
    urgent = ready_runs(alpha, 2, priority=10)
    claimed = claim_now(worker="w:1", queue=unserved, free=4, running=0)
    assert [item.activation_id for item in claimed] == [str(a.id) for a in (*urgent, *old)]
    assert all(item.waited_s >= 0 for item in claimed)


def test_the_pools_of_other_queues_are_not_claimed(leads, unserved):
    alpha, *_ = leads
    ready_runs(alpha, 2)
    assert claim_now(worker="w:1", queue="some-other-pool", free=4, running=0) == []
    assert Activation.objects.filter(status="ready").count() == 2


def test_work_is_spread_over_the_live_workers_of_a_pool(leads, unserved):
    alpha, *_ = leads
    ready_runs(alpha, 4)
    worker_beat(name="w:other", queue=unserved, slots=100, running=10)
    worker_beat(name="w:dead", queue=unserved, slots=100, running=0)
    Worker.objects.filter(name="w:dead").update(heartbeat_at="2000-01-01T00:00:00Z")  # not counted
    # Ten run elsewhere: this worker takes all four (its even part is seven).
    assert claimed_teams(unserved, 50, worker="w:1", running=0) == ["alpha"] * 4
    ready_runs(alpha, 4)
    # This worker carries 14 and the other 10: its part of 14 + 10 + 4 is 14, so it leaves them to the other.
    assert claimed_teams(unserved, 50, worker="w:1", running=14) == []
    assert claimed_teams(unserved, 50, worker="w:other", running=10) == ["alpha"] * 4


def test_a_claim_is_its_lock_the_counts_and_one_statement_per_team_that_also_counts_what_the_worker_runs(
        leads, unserved):
    from django.test.utils import CaptureQueriesContext

    alpha, beta, _ = leads
    ready_runs(alpha, 2)
    ready_runs(beta, 1)
    worker_beat(name="w:1", queue=unserved, slots=100, running=3)
    worker_beat(name="w:other", queue=unserved, slots=100, running=10)  # this worker's even part takes all three
    with CaptureQueriesContext(connection) as queries:
        claimed = claim_now(worker="w:1", queue=unserved, free=3, running=3)
    assert sorted(item.team_id for item in claimed) == sorted([alpha.id, alpha.id, beta.id])
    statements = [query["sql"].split(None, 1)[0] for query in queries]
    # The claims' lock; the teams' counts with the other workers'; each team's dispatch with the worker's count.
    assert statements[0] == "BEGIN" and statements[-1] == "COMMIT", statements
    assert [sql.split(None, 1)[0] for sql in statements[1:-1]] == ["SELECT", "SELECT", "WITH", "WITH"], statements
    # (The rows of this test's workers: the suite's own worker may have a row too, in its own pool.)
    assert dict(Worker.objects.filter(name__in=["w:1", "w:other"]).values_list("name", "running")) == {
        "w:1": 6, "w:other": 10}
    assert Activation.objects.filter(status="dispatched", worker="w:1").count() == 3


def test_ready_work_locked_elsewhere_is_skipped_and_leaves_the_workers_count_as_it_was(leads, unserved):
    alpha, *_ = leads
    ready_runs(alpha, 2)
    worker_beat(name="w:1", queue=unserved, slots=100, running=3)
    locked, release = threading.Event(), threading.Event()

    def elsewhere():
        from django.db import transaction

        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT id FROM agents_app_activation WHERE status = 'ready' FOR UPDATE")
                locked.set()
                release.wait(10)
        finally:
            connections.close_all()

    def version() -> str:  # the row's version: a write, even of the same value, makes a new one
        with connection.cursor() as cursor:
            cursor.execute("SELECT xmin::text FROM agents_app_worker WHERE name = 'w:1'")
            return cursor.fetchone()[0]

    before = version()
    thread = threading.Thread(target=elsewhere)
    thread.start()
    try:
        assert locked.wait(10)
        assert claim_now(worker="w:1", queue=unserved, free=2, running=3) == []
        assert (Worker.objects.get(name="w:1").running, version()) == (3, before)
    finally:
        release.set()
        thread.join(10)
    assert claimed_teams(unserved, 2, worker="w:1", running=3) == ["alpha", "alpha"]
    assert Worker.objects.get(name="w:1").running == 5


def test_a_claim_under_way_elsewhere_makes_another_wait_its_turn(leads, unserved):
    alpha, *_ = leads
    ready_runs(alpha, 1)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [CLAIM_LOCK])
    try:
        result = {}

        def elsewhere():
            try:
                result["claim"] = claim(worker="w:2", queue=unserved, free=1, running=0)
            finally:
                connections.close_all()

        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join(10)
        assert result == {"claim": None}
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [CLAIM_LOCK])
    assert len(claim_now(worker="w:2", queue=unserved, free=1, running=0)) == 1


# -- with real workers --------------------------------------------------------------------------------


@pytest.fixture
def small_worker(monkeypatch):
    """A worker process with two slots, serving a pool of its own (where this test's runs go)."""
    from mas_project.celery import app
    from tests.workers import start_worker, stop_worker

    queue = f"sched-{os.getpid()}"
    monkeypatch.setitem(app.conf, "task_default_queue", queue)
    worker = start_worker(queue, queue=queue, env={"MAS_WORKER_SLOTS": "2"}, concurrency=4)
    yield worker
    stop_worker(worker)


def started(run) -> float:
    return events(run, "session_start")[0].created_at.timestamp()


@pytest.mark.worker
def test_a_real_worker_gives_the_next_free_slot_to_the_team_that_has_none(leads, small_worker, runs_settled):
    alpha, beta, _ = leads
    # The first slot frees after 1.5 s, the second after 4 s.
    a_runs = [run_start(team=alpha, agent="lead", input=f"a{i}", script={"lead": [{"text": "slow", "latency_ms": ms}]})
              for i, ms in enumerate([1500, 4000, 500, 500])]
    wait_until(lambda: Session.objects.filter(run__team=alpha).count() == 2, 30, "alpha to fill both slots")
    b_run = run_start(team=beta, agent="lead", input="b", script={"lead": [{"text": "quick"}]})
    assert finish(b_run).status == "succeeded"
    a_runs = [finish(run) for run in a_runs]
    assert [run.status for run in a_runs] == ["succeeded"] * 4
    a_starts = sorted(started(run) for run in a_runs)
    # Two slots: alpha's first two start at once, beta's run takes the first slot freed, alpha's others after.
    assert a_starts[1] < started(b_run) < a_starts[2]


@pytest.mark.worker
def test_a_real_worker_holds_a_team_to_its_limit(leads, small_worker, runs_settled):
    alpha, *_ = leads
    Team.objects.filter(pk=alpha.pk).update(session_limit=1)
    script = {"lead": [{"text": "step", "latency_ms": 300}]}
    runs = [finish(run) for run in [run_start(team=alpha, agent="lead", input=f"a{i}", script=script)
                                     for i in range(3)]]
    assert [run.status for run in runs] == ["succeeded"] * 3
    spans = sorted((started(run), events(run, "session_end")[0].created_at.timestamp()) for run in runs)
    # One at a time, though the worker had two slots: each starts after the one before it ended.
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:]))


@pytest.mark.worker
def test_a_killed_workers_session_resumes_on_another_within_seconds(leads, monkeypatch, runs_settled):
    """Heartbeats, not a staleness window: the session resumes on the other worker well within 5 s, and its
    tool call (before the kill) is not made again."""
    from mas_project.celery import app
    from tests.runs import call
    from tests.workers import start_worker, stop_worker

    alpha, *_ = leads
    agent(alpha, "Lead", "tools: [vfs_write]\n")
    queue = f"failover-{os.getpid()}"
    monkeypatch.setitem(app.conf, "task_default_queue", queue)
    workers = [start_worker(f"{queue}-a", queue=queue), start_worker(f"{queue}-b", queue=queue)]
    try:
        script = {"lead": [call("vfs_write", path="note.md", content="once"),
                           {"text": "done", "latency_ms": 8000}]}
        run = run_start(team=alpha, agent="lead", input="x", script=script)
        wait_until(lambda: Event.objects.filter(run=run, type="tool_result").exists(), 30, "the tool call")
        holder = Session.objects.get(run=run).worker
        [victim] = [w for w in workers if holder.endswith(f":{w.process.pid}")]
        os.killpg(victim.process.pid, signal.SIGKILL)
        killed_at = time.time()
        resumed = wait_until(lambda: Event.objects.filter(run=run, type="session_start", data__resumed=True).first(),
                             15, "the session to resume on the other worker")
        assert resumed.created_at.timestamp() - killed_at < 5
        run = finish(run)
        assert (run.status, run.result) == ("succeeded", "done")
        assert [e.data["name"] for e in events(run, "tool_call")] == ["vfs_write"]  # made once
        [session] = Session.objects.filter(run=run)  # one session, resumed on the other worker
        assert session.worker != holder and session.worker.startswith(holder.split(":")[0])
        [retry] = [e.data for e in events(run, "retry")]
        assert (retry["what"], retry["reason"]) == ("session_resume", f"worker {holder} died")
    finally:
        for worker in workers:
            stop_worker(worker)


# -- what a team and the operator see and set -------------------------------------------------------


def test_each_teams_queue_shows_in_metrics_and_on_its_dashboard(leads, unserved, make_member, settings):
    from django.test import Client
    from django.urls import reverse

    from tests.agents_app.test_admin_definitions import client_for
    from tests.ops.test_metrics import samples

    alpha, beta, _ = leads
    settings.MAS_METRICS_TOKEN = ""
    Team.objects.filter(pk=beta.pk).update(max_sessions=7)
    ready_runs(alpha, 3)
    ready_runs(beta, 1)
    claim_now(worker="w:1", queue=unserved, free=2, running=0)  # alpha's first, then beta's
    values = samples(Client().get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode())
    assert {k: v for k, v in values.items() if k.startswith(("mas_scheduler_ready", "mas_scheduler_running",
                                                             "mas_scheduler_limit"))} == {
        'mas_scheduler_ready{team="alpha"}': 2, 'mas_scheduler_ready{team="beta"}': 0,
        'mas_scheduler_running{team="alpha"}': 1, 'mas_scheduler_running{team="beta"}': 1,
        'mas_scheduler_limit{team="alpha"}': 500, 'mas_scheduler_limit{team="beta"}': 7}
    waits = {k for k in values if k.startswith("mas_scheduler_wait_seconds")}
    assert waits == {f'mas_scheduler_wait_seconds{{team="{t}",quantile="{q}"}}' for t in ("alpha", "beta")
                     for q in ("0.5", "0.95")}
    assert set(k for k in values if k.startswith("mas_scheduler_oldest")) == {
        'mas_scheduler_oldest_ready_seconds{team="alpha"}'}

    page = client_for(make_member(alpha, "viewer")).get(reverse("admin:index")).content.decode()
    assert '<span class="mas-number">2</span> waiting for a worker' in page
    assert '<span class="mas-number">1</span> of 500 sessions running' in page
    assert "over the 1 session started in the last 5 minutes" in page


def test_a_team_admin_may_lower_the_teams_session_limit_but_not_raise_it(leads, api_for):
    alpha, *_ = leads
    Team.objects.filter(pk=alpha.pk).update(max_sessions=20)
    admin = api_for(alpha, "admin")
    shown = admin.get("/api/team").json()
    assert (shown["max_sessions"], shown["session_limit"], shown["weight"]) == (20, None, 1)
    refused = admin.patch("/api/team", {"session_limit": 21})
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["msg"] == (
        "session_limit: at most 20, the operator's cap for this team (a team's admins may only lower it)")
    assert Team.objects.get(pk=alpha.pk).session_limit is None
    assert admin.patch("/api/team", {"session_limit": 5}).json()["session_limit"] == 5
    assert [q.limit for q in team_queues(team_ids=[alpha.pk])] == [5]
    assert admin.patch("/api/team", {"session_limit": None}).json()["session_limit"] is None
    assert api_for(alpha, "editor").patch("/api/team", {"session_limit": 1}).status_code == 403
    assert Team.objects.get(pk=alpha.pk).session_limit is None
