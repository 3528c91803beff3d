#!/usr/bin/env python3
"""A longer schemathesis run than the suite's (tests/fuzz/test_api_schemathesis.py): every operation of
/api/openapi.json with an admin's token, ``--examples`` cases each, on the bench database.

Prints, per operation, the cases tried and any failure (a server error or a response outside the schema).
Started runs are created but not executed (no worker runs here).

    .venv/bin/python bench/fuzz_api.py [--examples 200]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=200)
    args = parser.parse_args()
    c.say(f"fuzz_api: {args.examples} cases per operation; machine {c.machine()}, {c.now_utc()}")
    c.django_setup()
    c.say(f"database {c.BENCH_DB}: created and migrated in {c.database_create():.1f} s")
    import schemathesis
    from django.core.wsgi import get_wsgi_application
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import response_schema_conformance

    from mas_core.teams import api_token_create, membership_set, user_create
    from agents_app.tasks import dispatch_run, execute_activation

    execute_activation.delay = lambda *a, **k: None  # nothing executes: no worker here
    dispatch_run.apply_async = lambda *a, **k: None
    team = c.team_with_agent(slug="fuzz", agent="lead")
    user = user_create(username="fuzz")
    membership_set(team=team, user=user, role="admin")
    token = api_token_create(user=user, team=team, role="admin").token
    schema = schemathesis.openapi.from_wsgi("/api/openapi.json", get_wsgi_application())
    total_failures = operations = 0
    started = time.monotonic()
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.label == "GET /api/health":
            continue
        operations += 1
        tried = [0]

        @given(case=operation.as_strategy())
        @settings(max_examples=args.examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def fuzz(case):
            tried[0] += 1
            case.call_and_validate(headers={"Authorization": f"Bearer {token}"},
                                   checks=[not_a_server_error, response_schema_conformance])

        try:
            fuzz()
            c.say(f"  ok    {operation.label} ({tried[0]} cases)")
        except Exception as error:
            total_failures += 1
            c.say(f"  FAIL  {operation.label} ({tried[0]} cases): {str(error)[:400]}")
    c.say(f"\n{operations} operations, {total_failures} with failures, in {time.monotonic() - started:.0f} s")
    c.database_drop()


if __name__ == "__main__":
    main()
