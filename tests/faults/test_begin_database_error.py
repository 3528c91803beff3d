"""A session that could not begin because its database connection broke (as after a PostgreSQL restart).

The worker had claimed the activation: it stays dispatched to that worker, which is alive and not
running it, so no sweep would send it again. The worker hands it back and a claim takes it again.

The fault is real: a trigger makes PostgreSQL end the worker's own connection (pg_terminate_backend
of its backend) in the middle of the statement, the first time that statement runs.
"""

import pytest
from django.db import connection

from agents_app.execution.runs import run_start
from agents_app.models import Activation, Session
from tests.runs import agent, events, finish

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

SCRIPT = {"lead": [{"text": "done"}]}


def sql(statement: str):
    with connection.cursor() as cursor:
        cursor.execute(statement)
        return cursor.fetchall() if cursor.description else None


@pytest.fixture
def connection_killed_once():
    """``kill(name, table=, event=, when=)``: the first row ``event`` on ``table`` that meets ``when`` (a
    trigger's WHEN, on OLD and NEW) loses its connection; returns how many such rows were tried since, as a
    function."""
    made: list[tuple[str, str]] = []

    def kill(name: str, *, table: str, event: str, when: str):
        sql(f"CREATE SEQUENCE {name}")
        sql(f"""CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF nextval('{name}') = 1 THEN
                        PERFORM pg_terminate_backend(pg_backend_pid());
                        PERFORM pg_sleep(30);  -- ended at its first check for interrupts
                    END IF;
                    RETURN NEW;
                END $$""")
        sql(f"CREATE TRIGGER {name} BEFORE {event} ON {table} FOR EACH ROW WHEN ({when}) EXECUTE FUNCTION {name}()")
        made.append((name, table))
        return lambda: sql(f"SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {name}")[0][0]

    yield kill
    for name, table in made:
        sql(f"DROP TRIGGER {name} ON {table}")
        sql(f"DROP FUNCTION {name}()")
        sql(f"DROP SEQUENCE {name}")


def begins_killed_once(kill):
    """session_begin's insert of the new session loses its connection, the first time."""
    return kill("fault_begin", table="agents_app_session", event="INSERT", when="NEW.agent = 'lead'")


def assert_ran_once(run):
    run = finish(run, timeout=20)  # well within the stale time of a claim (MAS_SESSION_STALE_S)
    assert (run.status, run.result) == ("succeeded", "done")
    [session] = Session.objects.filter(run=run)  # the broken begin left no session behind
    [root] = Activation.objects.filter(run=run)
    assert (session.attempt, root.attempts, root.status) == (1, 1, "done")
    assert [e.type for e in events(run, "session_start")] == ["session_start"]
    assert events(run, "retry") == [] and events(run, "error") == []


def test_a_session_whose_begin_lost_its_connection_is_claimed_again_and_runs(
        team_a, fault_worker, runs_settled, connection_killed_once):
    agent(team_a, "Lead")
    begun = begins_killed_once(connection_killed_once)
    run = run_start(team=team_a, agent="lead", input="x", script=SCRIPT)
    assert_ran_once(run)
    assert begun() == 2  # the insert that lost its connection, then the one that ran


def test_it_is_handed_back_when_the_database_answers_again(
        team_a, fault_worker, runs_settled, connection_killed_once):
    """The hand-back loses its connection too: the worker tries again, and the activation is ready again."""
    agent(team_a, "Lead")
    begun = begins_killed_once(connection_killed_once)
    handed = connection_killed_once("fault_hand_back", table="agents_app_activation", event="UPDATE",
                                    when="OLD.status = 'dispatched' AND NEW.status = 'ready'")
    run = run_start(team=team_a, agent="lead", input="x", script=SCRIPT)
    assert_ran_once(run)
    assert (begun(), handed()) == (2, 2)
