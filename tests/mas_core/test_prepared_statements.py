"""Django's connections prepare a statement once it repeats on them (``OPTIONS["prepare_threshold"]`` in
mas_project/settings.py): a session's start and end are some 30 statements, and PostgreSQL spent more CPU parsing
and planning them than running them. A statement run once or twice on a connection is not prepared."""

from __future__ import annotations

import pytest
from django.db import connection

from mas_core.models import Team

pytestmark = [pytest.mark.django_db]


def prepared() -> list[str]:
    """The statements this connection has prepared that look a team up by its slug in any case (``slug__iexact``:
    no other test does, so none was prepared on this connection before)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s",
                       [f'%FROM "{Team._meta.db_table}" WHERE UPPER(%'])
        return [row[0] for row in cursor.fetchall()]


def test_a_statement_is_prepared_on_its_third_run_on_a_connection(team_a):
    def team_id(slug: str):
        return Team.objects.filter(slug__iexact=slug).values_list("pk", flat=True).first()

    assert prepared() == []
    assert [team_id(team_a.slug.upper()), team_id("no-such-team")] == [team_a.pk, None]
    assert prepared() == []  # twice: parsed and planned each time, not kept
    assert team_id(team_a.slug) == team_a.pk  # the same statement, other values
    [statement] = prepared()
    assert "UPPER($1)" in statement and team_a.slug not in statement  # bound by the server: kept with its placeholder
