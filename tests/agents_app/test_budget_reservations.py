"""A model call reserves its worst cost against the run's budget before it is made — on a real worker.

Parallel sessions cannot each make the last allowed call; a compaction's summary is reserved at the
prices of the small model that writes it; a call that fails gives its reservation back.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from agents_app.execution.runs import run_start
from agents_app.kinds import PROVIDER
from agents_app.models import Run, Session
from tests.runs import agent, call, define, events, finish

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

# Output only is priced, so a call's worst cost is exactly its max_tokens at the output price.
MODELS = ("---\nname: Scripted\ntype: scripted\nmodels:\n"
          "- name: s-free\n  tier: medium\n"
          "- name: s-paid\n  tier: medium\n  output_price: 100\n"
          "- name: s-large\n  tier: large\n  output_price: 1000\n"
          "- name: s-small\n  tier: small\n  output_price: 1\n---\n")


def delegate(agent_slug: str, task: str) -> dict:
    return {"name": "delegate", "arguments": {"agent": agent_slug, "task": task}}


@pytest.mark.parametrize(("model", "budget", "refused_as"), [
    ("s-paid", {"max_cost_usd": "0.02"}, "the run's budget of $0.02 "),
    ("s-large", {"max_large_tier_uses": 2}, "the run may use the large tier 2 time(s)"),
])
def test_parallel_sessions_cannot_each_make_the_last_allowed_call(team_a, celery_worker_process, model, budget,
                                                                  refused_as):
    """Four helpers start at once. Each call may cost $0.01 (100 tokens at $100 per million) and does: a
    budget of $0.02 lets exactly two of them call, whatever the timing, and is never passed. The same for
    two uses of the large tier."""
    define(team_a, PROVIDER, MODELS)
    agent(team_a, "Lead", "model: scripted:s-free\n")
    agent(team_a, "Helper", f"model: scripted:{model}\nmax_tokens: 100\n")
    answer = {"text": "Helped.", "usage": {"prompt_tokens": 0, "completion_tokens": 100}, "latency_ms": 1_500}
    script = {"lead": [{"tool_calls": [delegate("helper", f"Help {n}") for n in range(4)]}, {"text": "Done."}],
              "helper": [answer] * 4}
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script, limits={"max_concurrency": 5},
                           budget=budget))

    assert (run.status, run.result) == ("succeeded", "Done.")
    assert (run.reserved_usd, run.reserved_large) == (0, 0)
    helpers = Session.objects.filter(run=run, agent="helper")
    assert sorted(s.status for s in helpers) == ["failed", "failed", "ok", "ok"]
    call_cost = Decimal("0.01") if model == "s-paid" else Decimal("0.1")
    assert run.cost_usd == 2 * call_cost
    assert run.large_tier_uses == (2 if model == "s-large" else 0)
    assert sorted(s.cost_usd for s in helpers) == [0, 0, call_cost, call_cost]
    refused = [s.failure for s in helpers if s.status == "failed"]
    assert [f["kind"] for f in refused] == ["policy_denied", "policy_denied"]
    assert all(f["message"].startswith(refused_as) for f in refused), refused
    assert len([e for e in events(run, "llm_request") if e.agent == "helper"]) == 2  # the refused asked nothing
    assert not Session.objects.filter(run=run).exclude(reserved_usd=0, reserved_large=0).exists()


def test_a_compaction_summary_is_reserved_at_the_small_models_prices_and_a_failed_call_gives_back(
        team_a, celery_worker_process):
    """The agent's large model: each call may cost $0.10 (100 tokens at $1000 per million) and costs $0.001.
    Its third call is too long for the window: its reservation is given back, the small model's summary
    (at most 1,024 tokens at $1 per million: $0.001024 — $1.024 at the large model's price, which the
    budget would refuse) is reserved and written, the call retried. The next call may cost $0.10 again,
    which the $0.15 budget cannot cover after $0.052 spent: refused before it is made."""
    define(team_a, PROVIDER, MODELS)
    agent(team_a, "Lead", "model: scripted:s-large\nmax_tokens: 100\ntools:\n- vfs_write\n")
    cheap = {"usage": {"prompt_tokens": 0, "completion_tokens": 1}}
    script = {"lead": [{**call("vfs_write", path="a.md", content="one"), **cheap},
                       {**call("vfs_write", path="b.md", content="two"), **cheap},
                       {"error": "context_length"},
                       {**call("vfs_write", path="c.md", content="three"),
                        "usage": {"prompt_tokens": 0, "completion_tokens": 50}},
                       {"text": "never"}],
              "compactor": [{"text": "Wrote a.md.", "usage": {"prompt_tokens": 0, "completion_tokens": 10}}]}
    run = finish(run_start(team=team_a, agent="lead", input="Write three files", script=script,
                           budget={"max_cost_usd": "0.15"}))

    assert run.status == "failed"
    [session] = Session.objects.filter(run=run)
    assert session.failure["kind"] == "policy_denied"
    assert session.failure["message"] == ("the run's budget of $0.15 cannot cover this call: $0.05201 spent, "
                                          "and the call may cost up to $0.10")
    summaries = [e.data for e in events(run, "llm_request") if e.data.get("purpose") == "compaction"]
    assert [(s["model"], s["tier"]) for s in summaries] == [("s-small", "small")]
    assert [e.data["how"] for e in events(run, "context_compacted")] == ["summary"]
    assert run.script_cursor == {"lead": 4, "compactor": 1}
    # 0.001 + 0.001 + the summary's 0.00001 + 0.05; the refused call cost nothing.
    assert (run.cost_usd, run.reserved_usd, session.reserved_usd) == (Decimal("0.05201"), 0, 0)
    assert (run.large_tier_uses, run.reserved_large) == (3, 0)  # the summary was no use of the large tier
    assert Run.objects.get(pk=run.pk).cost_usd <= Decimal("0.15")


def test_what_a_dead_workers_session_held_is_released_when_it_is_resumed_or_ends(team_a):
    """Its call never settled: the reservation goes back to the run when another worker claims the session."""
    from datetime import timedelta

    from django.utils import timezone

    from agents_app.execution.lifecycle import session_begin
    from agents_app.models import Activation

    agent(team_a, "Lead")
    run = Run.objects.create(team=team_a, agent="lead", status="running", budget={"max_cost_usd": "1"},
                             reserved_usd=Decimal("0.30000001"), reserved_large=2)
    activation = Activation.objects.create(run=run, agent="lead", status="running")
    dead = Session.objects.create(run=run, activation=activation, agent="lead", tier="large",
                                  reserved_usd=Decimal("0.2"), reserved_large=1,
                                  heartbeat_at=timezone.now() - timedelta(minutes=5))
    start = session_begin(activation_id=activation.id, worker="other:1")
    assert (start.resumed, start.session.id) == (True, dead.id)
    run = Run.objects.get(pk=run.pk)
    assert (run.reserved_usd, run.reserved_large) == (Decimal("0.10000001"), 1)  # another session's part stays
    assert Session.objects.filter(pk=dead.pk).values_list("reserved_usd", "reserved_large").get() == (0, 0)

    # Held again and never settled by a write: the session's end gives it back too.
    from agents_app.execution.lifecycle import session_settle

    Session.objects.filter(pk=dead.pk).update(reserved_usd=Decimal("0.05"))
    Run.objects.filter(pk=run.pk).update(reserved_usd=Decimal("0.15000001"))
    session_settle(run_id=run.id, session_id=dead.id, status="ok", result="Done.", meta={}, failure=None, ladder=[])
    assert Run.objects.get(pk=run.pk).reserved_usd == Decimal("0.10000001")
    assert Session.objects.get(pk=dead.pk).reserved_usd == 0
