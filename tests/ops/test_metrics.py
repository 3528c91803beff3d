"""/metrics: Prometheus text with exact counts from the rows, and who may read it."""

import re

import pytest
from django.test import Client

from mas_core.eventlog import event_append
from agents_app.models import Run, Session

pytestmark = [pytest.mark.django_db]


def samples(text: str) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def test_metrics_count_runs_sessions_tokens_cost_tool_errors(team_a, team_b, settings):
    settings.MAS_METRICS_TOKEN = ""
    running = Run.objects.create(team=team_a, agent="a", status="running", prompt_tokens=100, completion_tokens=10,
                                 cost_usd="0.5")
    Run.objects.create(team=team_b, agent="b", status="failed", prompt_tokens=7, completion_tokens=3, cost_usd="0.25")
    Run.objects.create(team=team_b, agent="b", status="succeeded")
    from agents_app.models import Activation

    activation = Activation.objects.create(run=running, agent="a")
    Session.objects.create(run=running, activation=activation, agent="a", status="running")
    Session.objects.create(run=running, activation=activation, agent="a", attempt=2, status="ok", meta={"steps": 4})
    event_append(run_id=running.id, type="tool_result", agent="a", data={"ok": False, "name": "x"})
    event_append(run_id=running.id, type="tool_result", agent="a", data={"ok": True, "name": "x"})

    response = Client().get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain; version=0.0.4")
    text = response.content.decode()
    assert "# TYPE mas_runs gauge" in text and "# TYPE mas_tokens_total counter" in text
    values = samples(text)
    assert {k: v for k, v in values.items() if k.startswith("mas_runs")} == {
        'mas_runs{status="queued"}': 0, 'mas_runs{status="running"}': 1, 'mas_runs{status="succeeded"}': 1,
        'mas_runs{status="failed"}': 1, 'mas_runs{status="cancelled"}': 0, 'mas_runs{status="waiting"}': 0}
    assert values["mas_sessions_in_flight"] == 1
    assert values["mas_model_calls_total"] == 4
    assert (values['mas_tokens_total{kind="prompt"}'], values['mas_tokens_total{kind="completion"}']) == (107, 13)
    assert values["mas_cost_usd_total"] == 0.75
    assert values["mas_tool_errors_total"] == 1
    assert re.search(r'^mas_queue_depth\{queue="[^"]+"\} \d+$', text, re.M)
    assert 0 <= values["mas_event_lag_seconds"] < 60
    assert "alpha" not in text and "beta" not in text  # no team names, nothing of any run's content


def test_only_the_token_or_a_local_caller_reads_metrics(settings):
    settings.MAS_METRICS_TOKEN = ""
    assert Client().get("/metrics", REMOTE_ADDR="203.0.113.9").status_code == 401
    settings.MAS_METRICS_TOKEN = "scrape-me"
    assert Client().get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me", REMOTE_ADDR="203.0.113.9").status_code == 200
