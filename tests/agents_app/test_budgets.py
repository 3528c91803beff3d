"""The run's budget counts the models actually called — on a real worker.

A use of the large tier is a call to a model whose provider row (or, in a script, the tier it stands
in for) says large, whatever tier the agent names; an answer from the semantic cache called nothing;
memory consolidation and custom tools' worker agents pass the same check and are counted on the run.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from agents_app.kinds import PROVIDER

from tools_app.kinds import TOOL
from agents_app.execution.runs import run_start
from agents_app.models import Activation, Session
from tests.runs import agent, call, define, events, finish

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

LARGE_ONCE = {"max_large_tier_uses": 1}
REFUSED = "the run may use the large tier 1 time(s)"


def test_an_agent_whose_model_is_the_large_tier_counts_without_naming_a_tier(team_a, celery_worker_process):
    agent(team_a, "Lead", "model: large\n")
    run = finish(run_start(team=team_a, agent="lead", input="x", budget=LARGE_ONCE,
                           script={"lead": [call("vfs_list"), {"text": "never"}]}))
    assert run.status == "failed"
    assert run.large_tier_uses == 1
    [session] = Session.objects.filter(run=run)
    assert (session.tier, session.failure["kind"], session.failure["message"]) == ("large", "policy_denied", REFUSED)
    assert len(events(run, "llm_request")) == 1
    assert run.error == f"policy_denied: {REFUSED}"


def test_a_model_whose_row_says_large_counts_whatever_tier_the_agent_names(team_a, celery_worker_process):
    define(team_a, PROVIDER, "---\nname: Scripted\ntype: scripted\nmodels:\n- name: s-big\n  tier: large\n"
                             "- name: s-small\n  tier: small\n---\n")
    agent(team_a, "Lead", "tier: small\nmodel: scripted:s-big\n")
    run = finish(run_start(team=team_a, agent="lead", input="x", budget=LARGE_ONCE,
                           script={"lead": [call("vfs_list"), {"text": "never"}]}))
    assert (run.status, run.large_tier_uses) == ("failed", 1)
    [session] = Session.objects.filter(run=run)
    assert (session.tier, session.model, session.failure["kind"]) == ("large", "s-big", "policy_denied")

    # The same agent on the small model is not counted at all.
    agent(team_a, "Lead", "tier: small\nmodel: scripted:s-small\n")
    run = finish(run_start(team=team_a, agent="lead", input="x", budget=LARGE_ONCE,
                           script={"lead": [call("vfs_list"), {"text": "done"}]}))
    assert (run.status, run.result, run.large_tier_uses) == ("succeeded", "done", 0)


def test_answers_from_the_cache_are_no_use_of_the_large_tier(team_a, celery_worker_process):
    agent(team_a, "Writer", "model: large\ntemperature: 0\nmemory:\n  cache:\n    enabled: true\n")
    script = {"writer": [call("vfs_write", path="a.md", content="x"), {"text": "Wrote it."}]}
    first = finish(run_start(team=team_a, agent="writer", input="Write a.md", script=script))
    assert (first.status, first.large_tier_uses) == ("succeeded", 2)

    # Two answers, both from the cache: had they counted, the second would have been refused.
    second = finish(run_start(team=team_a, agent="writer", input="Write a.md", script={"writer": []},
                              budget=LARGE_ONCE))
    assert (second.status, second.result, second.large_tier_uses) == ("succeeded", "Wrote it.", 0)
    assert [e.type for e in events(second) if e.type.startswith("cache_")] == ["cache_hit", "cache_hit"]
    assert [e.data.get("cached") for e in events(second, "llm_response")] == [True, True]
    assert [e.data.get("cached") for e in events(first, "llm_response")] == [None, None]


def test_memory_consolidation_is_refused_by_the_budget_like_any_model_call(team_a, celery_worker_process):
    agent(team_a, "Learner", "model: large\nmemory:\n  consolidate: true\n")
    # The second turn would be consolidation's, had the budget let it ask.
    script = {"learner": [{"text": "Learned."}, {"text": "[]"}]}
    run = finish(run_start(team=team_a, agent="learner", input="x", budget=LARGE_ONCE, script=script))
    assert (run.status, run.result, run.large_tier_uses) == ("succeeded", "Learned.", 1)
    assert [e.data for e in events(run, "error")] == [
        {"where": "consolidation", "kind": "policy_denied", "message": REFUSED}]
    assert len(events(run, "llm_request")) == 1
    assert run.script_cursor == {"learner": 1}

    # Within the budget, consolidation's calls are counted on the run.
    run = finish(run_start(team=team_a, agent="learner", input="x", budget={"max_large_tier_uses": 2},
                           script=script))
    assert (run.status, run.large_tier_uses) == ("succeeded", 2)
    assert [e.data.get("purpose") for e in events(run, "llm_request")] == [None, "consolidation"]
    assert events(run, "error") == []


SHOUT = ("---\nname: shout\ndescription: Shout a word.\nparameters:\n  word: {}\nprompt: 'Shout {{word}}'\n"
         "model: large\n---\n")


def test_a_custom_tools_worker_on_the_large_tier_is_counted_and_refused_past_the_budget(team_a,
                                                                                      celery_worker_process):
    define(team_a, TOOL, SHOUT)
    agent(team_a, "Lead", "tier: small\ntools:\n- shout\n")
    script = {"lead": [call("shout", word="hey"), call("shout", word="ho"), {"text": "Done."}],
              "shout": [{"text": "HEY"}, {"text": "HO"}]}
    run = finish(run_start(team=team_a, agent="lead", input="x", budget=LARGE_ONCE, script=script))
    assert (run.status, run.result, run.large_tier_uses) == ("succeeded", "Done.", 1)
    results = [(e.data["ok"], e.data["content"]) for e in events(run, "tool_result")]
    assert results == [(True, "HEY"), (False, f"shout: its worker agent failed (policy_denied: {REFUSED})")]
    workers = Session.objects.filter(run=run, agent="shout").order_by("started_at")
    assert [(s.tier, s.status) for s in workers] == [("large", "ok"), ("large", "failed")]
    assert list(Activation.objects.filter(run=run, kind="tool").values_list("attempts", flat=True)) == [1, 1]
    assert run.script_cursor["shout"] == 1  # the refused worker asked nothing


CHEAP = ("---\nname: Scripted\ntype: scripted\nmodels:\n- name: s-cheap\n  tier: medium\n  input_price: 0.01\n"
         "  output_price: 0.03\n---\n")


def test_costs_of_a_hundred_millionth_of_a_dollar_add_up_exactly_on_the_run_and_the_session(
        team_a, api_for, celery_worker_process):
    """Prices give costs to 1e-8 (one prompt token at $0.01 per million); the run's and the session's totals
    keep the same 8 places, so three calls of 1e-8, 1e-8 and 4e-8 add up to 6e-8, not to 0 rounded each time."""
    define(team_a, PROVIDER, CHEAP)
    agent(team_a, "Lead", "model: scripted:s-cheap\n")
    one_token = {"usage": {"prompt_tokens": 1, "completion_tokens": 0}}
    script = {"lead": [{**call("vfs_list"), **one_token}, {**call("vfs_list", prefix="a"), **one_token},
                       {"text": "Done.", "usage": {"prompt_tokens": 1, "completion_tokens": 1}}]}
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script))
    assert (run.status, run.cost_usd) == ("succeeded", Decimal("0.00000006"))
    [session] = Session.objects.filter(run=run)
    assert session.cost_usd == Decimal("0.00000006")
    assert [e.data["cost_usd"] for e in events(run, "llm_response")] == ["0.00000001", "0.00000001", "0.00000004"]
    read = api_for(team_a, "viewer").get(f"/api/runs/{run.id}").json()
    assert read["totals"]["cost_usd"] == "0.00000006"
