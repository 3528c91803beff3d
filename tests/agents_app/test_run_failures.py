"""Each way a session can fail, retry, escalate or be stopped — on a real worker."""

import time

import pytest

from agents_app.kinds import PROVIDER
from agents_app.execution.runs import run_cancel, run_start
from agents_app.models import Event, Run, Session, WorkspaceFile
from tests.runs import agent, call, define, events, finish

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def test_a_provider_error_no_retry_can_fix_fails_the_run_with_a_report(team_a, celery_worker_process):
    agent(team_a, "Lead")
    run = finish(run_start(team=team_a, agent="lead", input="x", script={"lead": [{"error": "auth"}]}))
    assert run.status == "failed"
    assert run.error == "provider_error: auth: scripted authentication failure (agent lead, turn 0) (HTTP 401)"
    [session] = Session.objects.filter(run=run)
    assert session.status == "failed"
    assert session.failure == {
        "kind": "provider_error", "message": "auth: scripted authentication failure (agent lead, turn 0) (HTTP 401)",
        "last_tool_calls": [], "suggested_retry": False,
    }
    assert events(run, "retry") == []


def test_rate_limits_are_retried_with_backoff_inside_the_session(team_a, celery_worker_process):
    agent(team_a, "Lead")
    script = {"lead": [{"error": "rate_limit"}, {"error": "server"}, {"text": "made it"}]}
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script))
    assert (run.status, run.result) == ("succeeded", "made it")
    retries = [e.data for e in events(run, "retry")]
    assert [(r["what"], r["attempt"], r["delay_s"]) for r in retries] == [("model_call", 1, 0.05),
                                                                           ("model_call", 2, 0.1)]
    assert Session.objects.get(run=run).attempt == 1


def test_a_failed_session_is_retried_and_escalated_up_the_ladder(team_a, celery_worker_process):
    agent(team_a, "Lead", "tier: small\nescalation:\n- small\n- medium\n")
    # Four server errors use up the first session's model-call retries.
    script = {"lead": [{"error": "server"}] * 4 + [{"text": "second time lucky"}]}
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script))
    assert (run.status, run.result) == ("succeeded", "second time lucky")
    sessions = list(Session.objects.filter(run=run).order_by("attempt"))
    assert [(s.attempt, s.tier, s.status) for s in sessions] == [(1, "small", "failed"), (2, "medium", "ok")]
    assert sessions[0].failure["kind"] == "provider_error" and sessions[0].failure["suggested_retry"] is True
    # With no provider rows the script stands in for each tier's model: "scripted".
    assert [e.data for e in events(run, "escalation")] == [
        {"from": "small", "to": "medium", "from_model": "scripted:scripted", "to_model": "scripted:scripted"}]
    session_retries = [e.data for e in events(run, "retry") if e.data["what"] == "session"]
    assert session_retries == [{"what": "session", "attempt": 2, "delay_s": 0.2, "reason": "provider_error"}]


def test_the_budget_stops_the_run_as_policy_denied(team_a, celery_worker_process):
    # Output only is priced: a call's worst cost is its 50 tokens at most, $0.50, which the budget just covers.
    define(team_a, PROVIDER, "---\nname: Scripted\ntype: scripted\nmodels:\n- name: s-medium\n  tier: medium\n"
                             "  output_price: '10000.0000'\n---\n")
    agent(team_a, "Lead", "max_tokens: 50\n")
    script = {"lead": [{**call("vfs_list"), "usage": {"prompt_tokens": 100, "completion_tokens": 50}},
                       {"text": "never", "usage": {"prompt_tokens": 100, "completion_tokens": 1}}]}
    run = run_start(team=team_a, agent="lead", input="x", script=script,
                    budget={"max_cost_usd": "0.5", "warn_cost_usd": "0.2"})
    run = finish(run)
    assert run.status == "failed"
    assert (str(run.cost_usd), run.reserved_usd) == ("0.50000000", 0)
    [session] = Session.objects.filter(run=run)
    assert session.failure["kind"] == "policy_denied"
    assert session.failure["message"] == "the run's budget of $0.50 is spent ($0.50)"
    assert [e.data for e in events(run, "budget_warning")] == [{"cost_usd": "0.5", "warn_cost_usd": "0.2"}]
    assert len(events(run, "llm_request")) == 1


def test_repeating_the_same_call_is_stuck(team_a, celery_worker_process):
    agent(team_a, "Lead")
    script = {"lead": [call("vfs_list", prefix="a")] * 3}
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script))
    [session] = Session.objects.filter(run=run)
    assert session.failure["kind"] == "stuck"
    assert session.failure["message"] == "the same call vfs_list with the same arguments 3 times in a row"
    assert len(events(run, "tool_call")) == 2


def test_cancel_stops_a_session_waiting_for_its_model_within_seconds(team_a, celery_worker_process):
    agent(team_a, "Lead")
    run = run_start(team=team_a, agent="lead", input="x", script={"lead": [{"text": "slow", "latency_ms": 30000}]})
    deadline = time.monotonic() + 20
    while not Event.objects.filter(run=run, type="llm_request").exists():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    cancelled_at = time.monotonic()
    run_cancel(run=run)
    while Session.objects.filter(run=run, status="running").exists():
        assert time.monotonic() - cancelled_at < 5, "the session did not stop within 5 s"
        time.sleep(0.1)
    assert Session.objects.get(run=run).status == "cancelled"
    assert Run.objects.get(pk=run.pk).status == "cancelled"
    assert events(run, "llm_response") == []


def test_cancel_marks_waiting_children_cancelled_at_once_and_stops_the_running_one(team_a, celery_worker_process):
    from agents_app.models import Activation

    agent(team_a, "Lead")
    kid = "---\nname: Kid\n---\n\nYou help.\n"
    script = {
        "lead": [{"tool_calls": [
            {"name": "spawn_agent", "arguments": {"filename": f"kid{i}.md", "content": kid, "task": f"job {i}"}}
            for i in (1, 2, 3)]}, {"text": "spawned"}],
        **{f"kid{i}": [{"text": "slow", "latency_ms": 30000}] for i in (1, 2, 3)},
    }
    run = run_start(team=team_a, agent="lead", input="x", script=script, limits={"max_concurrency": 1})
    deadline = time.monotonic() + 20
    while not Event.objects.filter(run=run, type="llm_request", agent__startswith="kid").exists():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    [running] = Activation.objects.filter(run=run, kind="spawn", status="running")
    waiting = list(Activation.objects.filter(run=run, kind="spawn", status="queued"))
    assert len(waiting) == 2
    # As if its task were still in the broker, behind a busy worker.
    Activation.objects.filter(pk=waiting[0].pk).update(status="dispatched")

    run_cancel(run=run)
    statuses = dict(Activation.objects.filter(run=run, kind="spawn").values_list("agent", "status"))
    assert sorted(status for agent, status in statuses.items() if agent != running.agent) == ["cancelled", "cancelled"]
    cancelled_at = time.monotonic()
    while Activation.objects.filter(pk=running.pk, status="running").exists():
        assert time.monotonic() - cancelled_at < 5, "the running child did not stop within 5 s"
        time.sleep(0.1)
    assert Activation.objects.get(pk=running.pk).status == "cancelled"
    assert list(Session.objects.filter(run=run, agent__startswith="kid").values_list("agent", "status")) == [
        (running.agent, "cancelled")]


def test_depth_and_fanout_limits_refuse_with_a_clear_tool_error(team_a, celery_worker_process):
    agent(team_a, "Lead")
    child = "---\nname: Kid\n---\n\nYou help.\n"
    script = {
        "lead": [{"tool_calls": [
            {"name": "spawn_agent", "arguments": {"filename": "kid.md", "content": child, "task": "a"}},
            {"name": "spawn_agent", "arguments": {"filename": "kid2.md", "content": child, "task": "b"}},
        ]}, {"text": "spawned"}],
        "kid": [call("spawn_agent", filename="grandkid.md", content=child, task="c"), {"text": "kid done"}],
    }
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script,
                           limits={"max_depth": 1, "max_fanout": 1}))
    results = [(e.agent, e.data["ok"], e.data["error_kind"], e.data["content"]) for e in events(run, "tool_result")]
    assert ("lead", False, "policy_denied",
            "fan-out limit reached: lead already has 1 children that have not finished") in results
    assert ("kid", False, "policy_denied",
            "spawn depth limit reached: kid is at depth 1 and the run allows 1") in results
    assert [e.data["to"] for e in events(run, "spawn")] == ["kid"]
    assert run.status == "succeeded"


def test_paths_cannot_leave_the_workspace_and_a_root_cannot_signal(team_a, celery_worker_process):
    agent(team_a, "Lead")
    script = {"lead": [{"tool_calls": [
        {"name": "vfs_write", "arguments": {"path": "../../etc/passwd", "content": "x"}},
        {"name": "vfs_read", "arguments": {"path": "a/../../b"}},
        {"name": "signal_parent", "arguments": {"message": "hi"}},
    ]}, {"text": "ok"}]}
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script))
    results = [(e.data["ok"], e.data["content"]) for e in events(run, "tool_result")]
    assert results == [
        (False, "path '../../etc/passwd' leaves the workspace: '..' segments are not allowed"),
        (False, "path 'a/../../b' leaves the workspace: '..' segments are not allowed"),
        (False, "signal_parent: this agent is the root of the run and has no parent"),
    ]
    assert not WorkspaceFile.objects.filter(run=run).exists()
    assert events(run, "file_change") == []


def test_a_session_over_its_time_limit_fails_as_timeout(team_a, celery_worker_process):
    agent(team_a, "Lead", "limits:\n  timeout_s: 1\n")
    run = finish(run_start(team=team_a, agent="lead", input="x", limits={"max_retries": 0},
                           script={"lead": [{**call("vfs_list"), "latency_ms": 700},
                                            {"text": "too late", "latency_ms": 700}]}))
    [session] = Session.objects.filter(run=run)
    assert session.failure["kind"] == "timeout"
    assert session.failure["message"] == "the session ran longer than 1 s"
    assert session.failure["suggested_retry"] is True
    assert run.status == "failed"


def test_tool_calls_that_keep_failing_end_the_session_as_tool_error(team_a, celery_worker_process):
    agent(team_a, "Lead")
    script = {"lead": [call("vfs_read", path=f"missing-{i}.md") for i in range(6)]}
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script, limits={"max_retries": 0}))
    [session] = Session.objects.filter(run=run)
    assert session.failure["kind"] == "tool_error"
    assert session.failure["message"].startswith("5 tool calls in a row failed; last: vfs_read: File not found: "
                                                 "missing-4.md.")
    assert len(session.failure["last_tool_calls"]) == 5
    assert run.status == "failed"


def test_a_checkpoint_the_database_refuses_fails_the_session_cleanly(team_a, celery_worker_process):
    # Ten million output tokens at the highest price a model row may hold cost more than the run's
    # numeric(14, 6) total can store: the step's write is refused, whatever the retry.
    define(team_a, PROVIDER, "---\nname: Scripted\ntype: scripted\nmodels:\n- name: s-medium\n  tier: medium\n"
                             "  output_price: '99999999.9999'\n---\n")
    agent(team_a, "Lead")
    script = {"lead": [{**call("vfs_write", path="a.md", content="kept"), "usage": {"prompt_tokens": 1,
                                                                                    "completion_tokens": 1}},
                       {"text": "too dear", "usage": {"prompt_tokens": 0, "completion_tokens": 10_000_000}}]}
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script), timeout=30)
    assert run.status == "failed"
    [session] = Session.objects.filter(run=run)
    assert session.status == "failed"
    message = ("the database refused the session's checkpoint (NumericValueOutOfRange: numeric field overflow): "
               "its last step's usage is not counted")
    assert session.failure == {"kind": "unknown", "message": message, "suggested_retry": False,
                               "last_tool_calls": [{"id": "tc-1", "provider_id": "call_lead_0_0", "name": "vfs_write",
                                                    "arguments": {"path": "a.md", "content": "kept"}}]}
    assert run.error == f"unknown: {message}"
    # What was written before stays: the file, the first turn's usage; the refused turn's usage is not added.
    assert WorkspaceFile.objects.get(run=run, path="a.md").content == "kept"
    assert (run.prompt_tokens, run.completion_tokens, str(run.cost_usd)) == (1, 1, "100.00000000")
    types = [e.type for e in events(run)]
    assert types[-6:] == ["llm_request", "stream_chunk", "llm_response", "error", "session_end", "run_complete"]
    assert events(run, "llm_response")[-1].data["usage"] == {"prompt_tokens": 0, "completion_tokens": 10_000_000}
    assert events(run, "error")[-1].data == {"where": "checkpoint", "kind": "unknown", "message": message}
    assert [e.seq for e in events(run)] == list(range(1, len(types) + 1))
    assert events(run, "retry") == []


LAUGHS = "---\nname: X\na0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 9)) + "---\n\nYou laugh.\n"


def test_an_agent_file_past_the_yaml_limits_is_a_tool_error_and_the_session_goes_on(team_a, celery_worker_process):
    agent(team_a, "Lead")
    deep = "---\nname: Y\nk: " + "[" * 5000 + "\n---\n"
    script = {"lead": [
        call("vfs_write", path="agents/x.md", content=LAUGHS),
        call("spawn_agent", filename="y.md", content=deep, task="dig"),
        call("delegate", agent="x", task="laugh"),
        call("vfs_edit", path="agents/x.md", old="You laugh.", new="You giggle."),
        {"text": "carried on"},
    ]}
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script), timeout=60)

    nodes = ("agents/x.md:7: the alias *a3 repeats 7381 keys and values, making in all more than 10000 keys and "
             "values (limit MAS_YAML_MAX_NODES)")
    results = [(e.data["ok"], e.data["content"]) for e in events(run, "tool_result")]
    assert results == [
        (False, f"Wrote agents/x.md (version 1, {len(LAUGHS)} characters), but the agent was not registered: "
                f"agents/x.md is not a valid agent definition: {nodes}"),
        (False, "agents/y.md is not a valid agent definition: agents/y.md:3: lists and mappings are nested more "
                "than 32 deep (limit MAS_YAML_MAX_DEPTH)"),
        (False, f"agents/x.md is not a valid agent definition: {nodes}"),
        (False, "Edited agents/x.md (version 2), but the agent was not registered: agents/x.md is not a valid agent "
                f"definition: {nodes}"),
    ]
    assert (run.status, run.result) == ("succeeded", "carried on")
    assert events(run, "spawn") == [] and events(run, "delegate") == []
    assert Session.objects.filter(run=run).count() == 1
