"""A model provider that times out, answers 429/500 or sends malformed tool calls — through a real run.

The provider is a local HTTP server speaking OpenAI's wire format (``tests.agents_app.llm.fake_servers``);
the worker is real and waits at most 1 s for a model call (``MAS_MODEL_TIMEOUT_S``).
"""

import pytest

from agents_app.kinds import AGENT, PROVIDER
from mas_core.definitions.services import definition_parse, definition_save
from agents_app.execution.runs import run_start
from agents_app.models import Session, WorkspaceFile
from tests.agents_app.llm.fake_servers import (
    FakeServer,
    hang,
    json_reply,
    openai_error,
    openai_stream,
    sse,
)
from tests.runs import events, finish

# alone: the worker gives a model call 1 s, which a busy machine's fake provider can miss.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker, pytest.mark.alone]


@pytest.fixture
def model_server():
    server = FakeServer().start()
    yield server
    server.stop()


def setup_team(team, server, *, escalation="- medium\n- large\n"):
    provider = (f"---\nname: Fake\ntype: openai\nbase_url: {server.url}/v1\nmodels:\n"
                "- name: m-medium\n  tier: medium\n- name: m-large\n  tier: large\n---\n")
    definition_save(kind=PROVIDER, team=team, parsed=definition_parse(kind=PROVIDER, team=team, text=provider))
    agent = f"---\nname: Lead\ntier: medium\nescalation:\n{escalation}---\n\nYou work.\n"
    definition_save(kind=AGENT, team=team, parsed=definition_parse(kind=AGENT, team=team, text=agent))


def data_of(run, type):
    return [event.data for event in events(run, type)]


def test_429_500_and_a_hung_call_are_retried_and_a_malformed_tool_call_is_corrected(
        team_a, model_server, fault_worker, runs_settled):
    setup_team(team_a, model_server)
    model_server.add(
        json_reply(429, openai_error(429, "slow down"), {"retry-after": "0"}),
        json_reply(500, openai_error(500, "upstream broke")),
        hang(5),  # longer than the worker's 1 s model timeout
        sse(openai_stream(tool_calls=[("call_1", "vfs_write", ['{"path": "a.md", "content": '])])),
        sse(openai_stream(tool_calls=[("call_2", "vfs_write", ['{"path": "a.md", "content": "fixed"}'])])),
        sse(openai_stream(text=["All ", "written."], usage=(30, 4))),
    )
    run = finish(run_start(team=team_a, agent="lead", input="Write a.md"))

    assert (run.status, run.result, run.error) == ("succeeded", "All written.", "")
    retries = data_of(run, "retry")
    assert [(r["what"], r["attempt"]) for r in retries] == [("model_call", 1), ("model_call", 2), ("model_call", 3)]
    assert "rate_limit" in retries[0]["error"] and "slow down" in retries[0]["error"]
    assert "upstream broke" in retries[1]["error"]
    assert retries[2]["error"] == "timeout: no answer within 1 s"
    results = data_of(run, "tool_result")
    assert [(r["name"], r["ok"]) for r in results] == [("vfs_write", False), ("vfs_write", True)]
    assert results[0]["content"] == 'Invalid arguments for vfs_write: not a JSON object: {"path": "a.md", "content": '
    assert dict(WorkspaceFile.objects.filter(run=run).values_list("path", "content")) == {"a.md": "fixed"}
    [session] = Session.objects.filter(run=run)
    assert (session.attempt, session.status, session.model) == (1, "ok", "m-medium")
    # Six requests reached the provider, all for the session's model.
    assert [r.body["model"] for r in model_server.requests] == ["m-medium"] * 6


def test_a_provider_that_keeps_failing_escalates_then_fails_with_a_report(team_a, model_server, fault_worker,
                                                                          runs_settled):
    setup_team(team_a, model_server)
    model_server.add(*[json_reply(500, openai_error(500, "down")) for _ in range(8)])
    run = finish(run_start(team=team_a, agent="lead", input="x", limits={"max_retries": 1}))

    assert run.status == "failed"
    sessions = list(Session.objects.filter(run=run).order_by("attempt"))
    assert [(s.attempt, s.tier, s.model, s.status) for s in sessions] == [
        (1, "medium", "m-medium", "failed"), (2, "large", "m-large", "failed")]
    failure = sessions[-1].failure
    assert (failure["kind"], failure["suggested_retry"]) == ("provider_error", True)
    assert "down" in failure["message"] and "HTTP 500" in failure["message"]
    assert run.error == f"provider_error: {failure['message']}"
    assert data_of(run, "escalation") == [{"from": "medium", "to": "large", "from_model": "fake:m-medium",
                                           "to_model": "fake:m-large"}]
    # 1 + 3 retries per session, two sessions: nothing more was asked of the provider.
    assert [r.body["model"] for r in model_server.requests] == ["m-medium"] * 4 + ["m-large"] * 4
