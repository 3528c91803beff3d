"""Escalation across models: the next attempt calls the next rung's model, and a ladder never steps down.

The provider is a local HTTP server speaking OpenAI's wire format (``tests.agents_app.llm.fake_servers``),
which records the model each request names; the worker is real.
"""

from __future__ import annotations

import pytest

from agents_app.kinds import PROVIDER
from agents_app.execution.escalation import Rung, ladder_position, next_rung, next_tier
from agents_app.execution.runs import run_start
from agents_app.models import Session
from tests.agents_app.llm.fake_servers import FakeServer, json_reply, openai_error, openai_stream, sse
from tests.runs import agent, define, events, finish

PROVIDER_TEXT = ("---\nname: Fake\ntype: openai\nbase_url: {url}/v1\nmodels:\n- name: m-small\n  tier: small\n"
                 "- name: m-medium\n  tier: medium\n- name: m-large\n  tier: large\n- name: m-other\n---\n")
# One session: the first call and its three model-call retries.
SESSION_DOWN = [json_reply(500, openai_error(500, "down"))] * 4


@pytest.fixture
def model_server():
    server = FakeServer().start()
    yield server
    server.stop()


def sessions(run) -> list[tuple]:
    return [(s.attempt, s.tier, s.model, s.status) for s in Session.objects.filter(run=run).order_by("attempt")]


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_ladder_of_models_sends_the_next_attempt_to_the_next_model(team_a, model_server, celery_worker_process):
    define(team_a, PROVIDER, PROVIDER_TEXT.format(url=model_server.url))
    agent(team_a, "Lead", "model: fake:m-small\nescalation:\n- fake:m-small\n- fake:m-other\n- fake:m-large\n")
    model_server.add(*SESSION_DOWN, *SESSION_DOWN, sse(openai_stream(text=["Solved."], usage=(10, 2))))
    run = finish(run_start(team=team_a, agent="lead", input="x"))

    assert (run.status, run.result) == ("succeeded", "Solved.")
    assert [r.body["model"] for r in model_server.requests] == ["m-small"] * 4 + ["m-other"] * 4 + ["m-large"]
    # m-other's row gives no tier: its session has the agent's own (medium, by default), and the rung is
    # named as the ladder writes it.
    assert sessions(run) == [(1, "small", "m-small", "failed"), (2, "medium", "m-other", "failed"),
                             (3, "large", "m-large", "ok")]
    assert [e.data for e in events(run, "escalation")] == [
        {"from": "small", "to": "fake:m-other", "from_model": "fake:m-small", "to_model": "fake:m-other"},
        {"from": "medium", "to": "large", "from_model": "fake:m-other", "to_model": "fake:m-large"}]


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_an_agent_naming_its_model_escalates_to_the_ladders_next_model_not_the_same_one(
        team_a, model_server, celery_worker_process):
    define(team_a, PROVIDER, PROVIDER_TEXT.format(url=model_server.url))
    # Its model's row says medium: the ladder goes on above medium.
    agent(team_a, "Lead", "model: fake:m-medium\nescalation:\n- small\n- medium\n- large\n")
    model_server.add(*SESSION_DOWN, sse(openai_stream(text=["Solved."], usage=(10, 2))))
    run = finish(run_start(team=team_a, agent="lead", input="x"))

    assert (run.status, run.result) == ("succeeded", "Solved.")
    assert [r.body["model"] for r in model_server.requests] == ["m-medium"] * 4 + ["m-large"]
    assert sessions(run) == [(1, "medium", "m-medium", "failed"), (2, "large", "m-large", "ok")]
    assert [e.data for e in events(run, "escalation")] == [
        {"from": "medium", "to": "large", "from_model": "fake:m-medium", "to_model": "fake:m-large"}]


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_ladder_below_the_model_called_is_never_climbed_down(team_a, model_server, celery_worker_process):
    define(team_a, PROVIDER, PROVIDER_TEXT.format(url=model_server.url))
    agent(team_a, "Lead", "model: fake:m-large\ntier: large\nescalation:\n- small\n- medium\n")
    model_server.add(*SESSION_DOWN, sse(openai_stream(text=["Solved."], usage=(10, 2))))
    run = finish(run_start(team=team_a, agent="lead", input="x"))

    assert (run.status, run.result) == ("succeeded", "Solved.")
    assert [r.body["model"] for r in model_server.requests] == ["m-large"] * 5
    assert sessions(run) == [(1, "large", "m-large", "failed"), (2, "large", "m-large", "ok")]
    assert events(run, "escalation") == []
    assert [e.data["attempt"] for e in events(run, "retry") if e.data["what"] == "session"] == [2]


def test_next_tier_climbs_and_never_steps_down():
    assert next_tier("small", ["small", "medium"]) == "medium"
    assert next_tier("small", ["small", "medium", "large"]) == "medium"
    assert next_tier("medium", ["small", "medium", "large"]) == "large"
    assert next_tier("medium", ["small", "large"]) == "large"  # off the ladder: the first rung above
    assert next_tier("large", ["small", "medium"]) is None  # was "small": a step down
    assert next_tier("large", ["small", "medium", "large"]) is None
    assert next_tier("medium", ["medium"]) is None
    assert next_tier("medium", []) is None


def test_next_rung_skips_the_same_model_and_lower_tiers_and_takes_untiered_models_as_they_come():
    small = Rung("small", "small", "a:s")
    medium = Rung("medium", "medium", "a:m")
    same = Rung("b:m", "medium", "a:m")  # another name for the model just called
    other = Rung("b:x", None, "b:x")
    large = Rung("a:l", "large", "a:l")
    current = Rung("", "medium", "a:m")
    assert next_rung(current, [small, medium, same, other, large], position=None) == other
    assert next_rung(current, [small, same, large], position=None) == large
    assert next_rung(current, [small], position=None) is None
    assert next_rung(current, [medium, other, large], position=1) == large
    # A rung no model serves is taken: its attempt fails saying what to configure.
    assert next_rung(current, [Rung("large", "large", None)], position=None) == Rung("large", "large", None)
    ladder = ["small", "a:m", "large"]
    assert ladder_position(ladder, rung="large", model="a:m", tier="small") == 2
    assert ladder_position(ladder, model="a:m", tier="small") == 1
    assert ladder_position(ladder, model="z:z", tier="small") == 0
    assert ladder_position(ladder, model="z:z", tier="medium") is None
