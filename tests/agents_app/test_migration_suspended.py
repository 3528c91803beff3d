"""Migration 0020: activations and sessions that waited for children or people are "suspended" (a run keeps
"waiting"), rows written before renamed — and back again when it is reversed."""
import pytest
from django.db import connection
from django.utils import timezone
from django.db.migrations.executor import MigrationExecutor

from agents_app.models import Activation, Run, Session

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE, AFTER = ("agents_app", "0019_scheduler"), ("agents_app", "0020_suspended")


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([target])


def latest():
    """The app's last migration: where the test leaves the database (later migrations add columns the models read)."""
    executor = MigrationExecutor(connection)
    [leaf] = [node for node in executor.loader.graph.leaf_nodes() if node[0] == "agents_app"]
    return leaf


def statuses(run):
    # Only the status columns: the models have columns later migrations add, absent at 0019 and 0020.
    return (Run.objects.filter(pk=run.pk).values_list("status", flat=True).get(),
            sorted(Activation.objects.filter(run=run).values_list("status", flat=True)),
            sorted(Session.objects.filter(run=run).values_list("status", flat=True)))


def test_waiting_activations_and_sessions_become_suspended_and_back(team_a):
    run = Run.objects.create(team=team_a, agent="lead", input="x", status="waiting")
    for status in ("suspended", "running"):
        activation = Activation.objects.create(run=run, agent="lead", input="x", status=status)
        # Beating now: a running session without a heartbeat is a stale one, which any worker's reaper alive
        # in the database (another test's) would queue again while the migrations run.
        Session.objects.create(run=run, activation=activation, agent="lead", attempt=1, status=status,
                               heartbeat_at=timezone.now())
    try:
        migrate(BEFORE)  # reversed: named as before
        assert statuses(run) == ("waiting", ["running", "waiting"], ["running", "waiting"])
        migrate(AFTER)  # and forwards again
        assert statuses(run) == ("waiting", ["running", "suspended"], ["running", "suspended"])
    finally:
        migrate(latest())
