"""schemathesis against /api/openapi.json, authenticated: no server error, no response outside the schema.

A bounded run in the suite (``FUZZ_EXAMPLES`` per operation); ``bench/fuzz_api.py`` runs longer. Starting runs
is fuzzed too: their task messages are dropped (no worker here), so nothing runs after the test.
"""

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

FUZZ_EXAMPLES = int(os.environ.get("MAS_FUZZ_EXAMPLES", 8))

@pytest.fixture
def fuzz_token(team_a, make_member, make_token, monkeypatch):
    from agents_app.kinds import AGENT
    from agents_app.tasks import dispatch_run
    from mas_project.celery import app
    from tests.runs import define

    monkeypatch.setitem(app.conf, "task_default_queue", f"unserved-{os.getpid()}")  # no worker runs these
    monkeypatch.setattr(dispatch_run, "apply_async", lambda *args, **kwargs: None)
    define(team_a, AGENT, "---\nname: Lead\n---\n\nYou work.\n")
    return make_token(team_a, make_member(team_a, "admin"))


def test_no_server_errors_and_every_response_matches_the_schema(api_schema, fuzz_token):
    failures, operations = [], 0
    for result in api_schema.get_all_operations():
        operation = result.ok()
        operations += 1
        if operation.label == "GET /api/health":
            continue  # answers 503 by design while a part is down, and no worker runs here

        @given(case=operation.as_strategy())
        @settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
                  database=None)
        def fuzz(case):
            case.call_and_validate(headers={"Authorization": f"Bearer {fuzz_token}"},
                                   checks=[not_a_server_error, response_schema_conformance])

        try:
            fuzz()
        except Exception as error:  # collected: every operation is fuzzed, then all failures reported
            failures.append(f"{operation.label}: {str(error)[:1500]}")
    assert operations >= 60
    assert failures == []
