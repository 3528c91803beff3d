"""Tool call ids are the kernel's: a provider that sends none, or the same one every turn, decides nothing.

A local server speaking the OpenAI chat-completions wire format plays the
model on a real worker. Approvals, children and events are keyed by the id the
kernel gave the call (``tc-1``, ``tc-2``, … in each session); the provider's
own id only goes back to the provider.
"""

from __future__ import annotations

import json

import pytest

from agents_app.execution.compaction import result_path
from agents_app.execution.runs import run_start
from agents_app.execution.session import _run_reads
from agents_app.kinds import AGENT, PROVIDER
from agents_app.models import Activation, ApprovalRequest, Session, WorkspaceFile
from tests.agents_app.llm.fake_servers import FakeServer, openai_stream, sse
from tests.runs import define, events, finish, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

# None: the server sends no id at all; "call_0": the same id in every turn.
PROVIDER_IDS = [None, "call_0"]


def fake_provider(team, server: FakeServer) -> None:
    define(team, PROVIDER, f"---\nname: Fake\ntype: openai\nbase_url: {server.url}/v1\nmodels:\n"
                           "- name: m-medium\n  tier: medium\n---\n")


def tool_turn(provider_id, name: str, arguments: dict) -> list[str]:
    return openai_stream(tool_calls=[(provider_id, name, [json.dumps(arguments)])])


def pending(run, count: int) -> ApprovalRequest:
    """The run's pending request, once its session has suspended for the ``count``-th time."""
    wait_until(lambda: len(events(run, "session_suspended")) == count
               and Session.objects.filter(run=run, status="suspended").exists(), 60,
               f"suspension {count} for a person")
    return ApprovalRequest.objects.get(run=run, status="pending")


@pytest.mark.parametrize("provider_id", PROVIDER_IDS)
def test_a_later_gated_call_asks_again_with_its_own_arguments(team_a, celery_worker_process, api_for, provider_id):
    server = FakeServer().start()
    try:
        fake_provider(team_a, server)
        define(team_a, AGENT, "---\nname: Writer\ntier: medium\ntools:\n- vfs_write\napproval:\n- vfs_write\n"
                              "---\n\nYou write.\n")
        server.add(sse(tool_turn(provider_id, "vfs_write", {"path": "a.md", "content": "one"})),
                   sse(tool_turn(provider_id, "vfs_write", {"path": "b.md", "content": "two"})),
                   sse(openai_stream(text=["Both written."])))
        run = run_start(team=team_a, agent="writer", input="Write a.md and b.md")
        operator = api_for(team_a, "operator")
        first = pending(run, 1)
        edited = {"path": "a.md", "content": "edited"}
        assert operator.post(f"/api/approvals/{first.id}",
                             {"decision": "approve", "arguments": edited}).status_code == 200
        # The second call is asked about in its own right: the first decision does not cover it.
        second = pending(run, 2)
        assert operator.post(f"/api/approvals/{second.id}", {"decision": "approve"}).status_code == 200
        run = finish(run)
    finally:
        server.stop()

    assert (run.status, run.result) == ("succeeded", "Both written.")
    asked = [(r.call_id, r.arguments, r.status) for r in ApprovalRequest.objects.filter(run=run).order_by("created_at")]
    assert asked == [("tc-1", {"path": "a.md", "content": "one"}, "approved"),
                     ("tc-2", {"path": "b.md", "content": "two"}, "approved")]
    assert dict(WorkspaceFile.objects.filter(run=run).values_list("path", "content")) == {
        "a.md": "edited", "b.md": "two"}
    assert [(e.data["id"], e.data["ok"]) for e in events(run, "tool_result")] == [("tc-1", True), ("tc-2", True)]
    assert [e.data["call"]["id"] for e in events(run, "approval_requested")] == ["tc-1", "tc-2"]
    # The provider reads its own id back (the kernel's when it sent none), in the call and in its result.
    wire = [m for m in server.requests[-1].body["messages"] if m["role"] in {"assistant", "tool"}]
    sent = [provider_id or "tc-1", provider_id or "tc-2"]
    assert [(m["role"], m.get("tool_call_id") or m["tool_calls"][0]["id"]) for m in wire] == [
        ("assistant", sent[0]), ("tool", sent[0]), ("assistant", sent[1]), ("tool", sent[1])]


@pytest.mark.parametrize("provider_id", PROVIDER_IDS)
def test_two_delegations_under_one_provider_id_start_two_children(team_a, celery_worker_process, provider_id):
    server = FakeServer().start()
    try:
        fake_provider(team_a, server)
        define(team_a, AGENT, "---\nname: Lead\ntier: medium\ntools:\n- delegate\n---\n\nYou lead.\n")
        define(team_a, AGENT, "---\nname: Helper\ntier: medium\n---\n\nYou help.\n")
        # One session talks to the server at a time: the lead waits for each child before its next turn.
        server.add(sse(tool_turn(provider_id, "delegate", {"agent": "helper", "task": "task one"})),
                   sse(openai_stream(text=["one done"])),
                   sse(tool_turn(provider_id, "delegate", {"agent": "helper", "task": "task two"})),
                   sse(openai_stream(text=["two done"])),
                   sse(openai_stream(text=["Both done."])))
        run = finish(run_start(team=team_a, agent="lead", input="Do two things"))
    finally:
        server.stop()

    assert (run.status, run.result) == ("succeeded", "Both done.")
    children = Activation.objects.filter(run=run, kind="delegate").order_by("created_at")
    lead = Session.objects.get(run=run, agent="lead")
    assert [(c.input, c.result, c.context["tool_call"]) for c in children] == [
        ("task one", "one done", f"{lead.id}:tc-1"), ("task two", "two done", f"{lead.id}:tc-2")]
    outcomes = [json.loads(e.data["content"])["result"] for e in events(run, "tool_result") if e.agent == "lead"]
    assert outcomes == ["one done", "two done"]
    assert len(server.requests) == 5


def test_stored_results_of_the_agents_sessions_in_a_run_have_their_own_names(team_a, unserved):
    """Call ids repeat from one session to the next (tc-1, …): a result file's name tells the sessions apart."""
    define(team_a, AGENT, "---\nname: Lead\n---\n\nYou lead.\n")
    run = run_start(team=team_a, agent="lead", input="x", script={"lead": [{"text": "unused"}]})
    root = Activation.objects.get(run=run)
    second = Activation.objects.create(run=run, agent="lead", input="again", kind="signal", parent=root)
    other = Activation.objects.create(run=run, agent="helper", input="help", kind="delegate", parent=root, depth=1)

    def scope(activation, attempt: int) -> str:  # as a session of ``activation`` at ``attempt`` reads it
        return _run_reads(team_id=team_a.id, activation=activation, attempt=attempt, new=False).rules.scope

    scopes = [scope(root, 1), scope(root, 2), scope(second, 1), scope(other, 1)]
    assert scopes == ["", ".1.2", ".2", ""]
    paths = [result_path(agent, "tc-1", scope) for agent, scope in zip(["lead", "lead", "lead", "helper"], scopes)]
    assert paths == ["tool-results/lead-tc-1.txt", "tool-results/lead.1.2-tc-1.txt", "tool-results/lead.2-tc-1.txt",
                     "tool-results/helper-tc-1.txt"]
