"""Forks: a new run from an event of a finished run — checkpoints, files and script positions as they were
then, optionally another agent version or another tool result — on a real worker, through the API."""

from __future__ import annotations

import json
import re

import pytest
from django.db import transaction

from agents_app.execution.filehistory import files_at
from agents_app.execution.forks import ForkError, run_fork
from agents_app.execution.journal import session_messages
from agents_app.execution.runs import run_start
from agents_app.execution.tool_requests import workspace_write
from agents_app.models import (
    Activation,
    Event,
    Run,
    Session,
    SessionEntry,
    WorkspaceFile,
    WorkspaceFileVersion,
)
from memory_app.models import BlackboardEntry
from tests.runs import agent, call, events, finish

pytestmark = [pytest.mark.django_db(transaction=True)]


def recorded(run: Run) -> dict[str, list]:
    """Everything a run recorded, row by row: what a fork must leave exactly as it was."""
    return {
        "run": list(Run.objects.filter(pk=run.pk).values()),
        "events": list(Event.objects.filter(run=run).order_by("seq").values()),
        "activations": list(Activation.objects.filter(run=run).order_by("created_at").values()),
        "sessions": list(Session.objects.filter(run=run).order_by("started_at").values()),
        "entries": list(SessionEntry.objects.filter(session__run=run).order_by("session_id", "seq").values()),
        "files": list(WorkspaceFile.objects.filter(run=run).order_by("path").values()),
        "versions": list(WorkspaceFileVersion.objects.filter(run=run).order_by("id").values()),
    }


def tool_event(run: Run, type_: str, name: str, index: int = 0) -> Event:
    return [e for e in events(run, type_) if e.data["name"] == name][index]


def _loc_and_message(response):
    assert response.status_code == 422, response.content
    detail = response.json()["detail"]
    return detail[0]["loc"], detail[0]["msg"]


# -- on a worker ----------------------------------------------------------------------------


def manual_fork_body() -> dict:
    """The request body of the manual's fork example (docs/concepts/forks.md)."""
    from tests.manual import example

    block = example("docs/concepts/forks.md", language="sh", containing="/fork").text
    assert block.rstrip().endswith("/api/runs/$RUN/fork")
    return json.loads(re.search(r"-d '(.*?)'", block).group(1))


@pytest.mark.worker
def test_the_manuals_fork_of_a_failed_run_with_an_edited_tool_result_succeeds_and_leaves_the_run_as_it_was(
        team_a, api_for, celery_worker_process, runs_settled):
    agent(team_a, "Lead")
    # The answer is not where the agent looks: its next turn expects 42 in the tool's result, and fails without.
    script = {"lead": [call("vfs_read", path="answer.txt"), {"text": "The answer is 42.", "expect": ["42"]}]}
    run = finish(run_start(team=team_a, agent="lead", input="Find the answer.", script=script))
    assert run.status == "failed"
    assert run.error.startswith("provider_error: expectation: script for agent lead, turn 1 expected '42'")
    before = recorded(run)
    point = tool_event(run, "tool_result", "vfs_read")
    assert (point.seq, point.data["ok"]) == (7, False)  # as the manual tells it

    client = api_for(team_a, "operator")
    response = client.post(f"/api/runs/{run.id}/fork", manual_fork_body())
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["forked_from"], body["fork_seq"], body["forks"]) == (str(run.id), 7, [])
    fork = finish(Run.objects.get(pk=body["id"]))
    assert (fork.status, fork.result, fork.error) == ("succeeded", "The answer is 42.", "")
    assert (fork.agent, fork.input, fork.created_by) == ("lead", "Find the answer.", client.user)

    # The restored session resumed (no fresh attempt), its history the parent's up to that event with the
    # edited result, then the one turn the fork played.
    [session] = Session.objects.filter(run=fork)
    assert (session.attempt, session.status) == (1, "ok")
    history = [(m.role, m.content, m.tool_call_id) for m in session_messages(session_id=session.id)]
    parent_history = [(m.role, m.content, m.tool_call_id) for m in session_messages(
        session_id=Session.objects.get(run=run).id)]
    assert len(parent_history) == 4 and history[:3] == parent_history[:3]
    assert history[3:] == [("tool", "answer.txt: 42", "tc-1"), ("assistant", "The answer is 42.", None)]
    assert parent_history[3][0:3:2] == ("tool", "tc-1") and "answer.txt" in parent_history[3][1]
    assert [e.type for e in events(fork)] == [
        "run_start", "activation_queued", "session_start", "llm_request", "stream_chunk", "llm_response",
        "session_end", "run_complete"]
    start = events(fork, "run_start")[0].data
    assert (start["forked_from"], start["fork_seq"], start["tool_result"]) == (
        str(run.id), 7, {"event": 7, "id": "tc-1", "chars": 14})
    assert events(fork, "session_start")[0].data["resumed"] is True
    assert fork.script_cursor == {"lead": 2}

    # The parent: not one row changed; it lists its fork.
    assert recorded(run) == before
    detail = client.get(f"/api/runs/{run.id}").json()
    assert [(f["id"], f["seq"], f["status"]) for f in detail["forks"]] == [(str(fork.id), 7, "succeeded")]
    assert (detail["forked_from"], detail["fork_seq"]) == (None, None)


@pytest.mark.worker
def test_a_fork_restores_the_files_as_they_were_at_its_event(team_a, celery_worker_process, runs_settled):
    agent(team_a, "Lead")
    # Turn 1 reads a.md and turn 2 expects what the fork point had in it: a fork that restored the later
    # content would fail there.
    script = {"lead": [{"tool_calls": [{"name": "vfs_write", "arguments": {"path": "a.md", "content": "first"}},
                                       {"name": "vfs_write", "arguments": {"path": "c.md", "content": "brief"}},
                                       {"name": "vfs_delete", "arguments": {"path": "c.md"}},
                                       {"name": "blackboard_write", "arguments": {"key": "k", "value": "v"}}]},
                       call("vfs_read", path="a.md"),
                       {"expect": ["first"], "tool_calls": [
                           {"name": "vfs_write", "arguments": {"path": "a.md", "content": "second"}},
                           {"name": "vfs_write", "arguments": {"path": "b.md", "content": "later"}}]},
                       {"text": "done"}]}
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script))
    assert run.status == "succeeded"
    assert dict(WorkspaceFile.objects.filter(run=run).values_list("path", "content")) == {
        "a.md": "second", "b.md": "later"}
    before = recorded(run)
    point = tool_event(run, "tool_result", "blackboard_write")  # a.md written once, c.md gone, b.md not yet
    assert list(WorkspaceFileVersion.objects.filter(run=run).values_list("path", "content")) == [
        ("a.md", "first"), ("c.md", "brief"), ("c.md", None), ("a.md", "second"), ("b.md", "later")]
    assert files_at(run_id=run.id, seq=point.seq) == {"a.md": "first"}
    assert files_at(run_id=run.id, seq=run.next_seq) == {"a.md": "second", "b.md": "later"}

    with transaction.atomic():  # the worker starts after commit: what the fork starts with, seen first
        fork = run_fork(run=run, seq=point.seq)
        assert dict(WorkspaceFile.objects.filter(run=fork).values_list("path", "content")) == {"a.md": "first"}
        assert list(WorkspaceFileVersion.objects.filter(run=fork).values_list("path", "seq", "content")) == [
            ("a.md", 1, "first")]
        assert fork.script_cursor == {"lead": 1}
    fork = finish(fork)
    assert (fork.status, fork.result) == ("succeeded", "done")
    assert dict(WorkspaceFile.objects.filter(run=fork).values_list("path", "content")) == {
        "a.md": "second", "b.md": "later"}
    assert [(e.data["path"], e.data["action"]) for e in events(fork, "file_change")] == [
        ("a.md", "updated"), ("b.md", "created")]
    # A fork is forked like any run: at its restored agent (event 2), with what it restored.
    with transaction.atomic():
        again = run_fork(run=fork, seq=2)
        assert dict(WorkspaceFile.objects.filter(run=again).values_list("path", "content")) == {"a.md": "first"}
        [restored] = Session.objects.filter(run=again)
        assert SessionEntry.objects.filter(session=restored).count() == SessionEntry.objects.filter(
            session__run=run, event_seq__lte=point.seq).count()
        assert (again.forked_from_id, again.fork_seq, again.script_cursor) == (fork.id, 2, {"lead": 1})
        transaction.set_rollback(True)
    # Shared state outside the sessions is not restored: the parent's blackboard entry stays its own.
    assert list(BlackboardEntry.objects.filter(run=run).values_list("key", flat=True)) == ["k"]
    assert not BlackboardEntry.objects.filter(run=fork).exists()
    assert recorded(run) == before


@pytest.mark.worker
def test_a_fork_with_another_agent_version_runs_that_version(team_a, api_for, celery_worker_process, runs_settled):
    agent(team_a, "Lead", body="You are version one.")
    agent(team_a, "Lead", body="You are version two.")
    # The first turn expects version one's prompt: the run (at version two) fails, its fork at version 1 does not.
    script = {"lead": [{"text": "hello", "expect": ["You are version one."]}]}
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script))
    assert (run.status, run.versions) == ("failed", {"agent:lead": 2})
    before = recorded(run)
    client = api_for(team_a, "admin")
    response = client.post(f"/api/runs/{run.id}/fork", {"seq": 1, "versions": {"agent:lead": 1}})
    assert response.status_code == 201, response.content
    assert response.json()["versions"] == {"agent:lead": 1}
    fork = finish(Run.objects.get(pk=response.json()["id"]))
    assert (fork.status, fork.result, fork.versions) == ("succeeded", "hello", {"agent:lead": 1})
    assert events(fork, "run_start")[0].data["versions"] == {"agent:lead": 1}
    # Forked at run_start: nothing to restore but the root activation, which starts afresh.
    [session] = Session.objects.filter(run=fork)
    assert events(fork, "session_start")[0].data["resumed"] is False
    assert session_messages(session_id=session.id)[0].content.startswith("You are version one.")
    assert recorded(run) == before


@pytest.mark.worker
def test_a_fork_of_a_cancelled_delegating_run_resumes_the_parent_and_its_child(
        team_a, celery_worker_process, runs_settled):
    agent(team_a, "Lead", "tools: [delegate]\n")
    agent(team_a, "Helper")
    script = {"lead": [call("delegate", agent="helper", task="check it"), {"text": "lead done", "expect": ["ok"]}],
              "helper": [{"text": "ok", "latency_ms": 2000}]}
    run = run_start(team=team_a, agent="lead", input="x", script=script)
    from tests.runs import wait_until
    wait_until(lambda: events(run, "llm_request") and len(events(run, "llm_request")) == 2, 30, "the helper's call")
    from agents_app.execution.runs import run_cancel
    run_cancel(run=run)
    run = finish(run)
    assert run.status == "cancelled"
    wait_until(lambda: not Session.objects.filter(run=run, status="running").exists(), 30, "the sessions to stop")
    before = recorded(run)
    # At the helper's session start: the lead suspended on its delegate call, the helper not yet answered.
    point = [e for e in events(run, "session_start") if e.agent == "helper"][0]
    fork = finish(run_fork(run=run, seq=point.seq), timeout=60)
    assert (fork.status, fork.result) == ("succeeded", "lead done")
    acts = list(Activation.objects.filter(run=fork).order_by("created_at").values_list("agent", "kind", "status"))
    assert acts == [("lead", "root", "done"), ("helper", "delegate", "done")]
    lead_session = Session.objects.get(run=fork, agent="lead")
    assert lead_session.attempt == 1  # the restored session, resumed (and suspended on its child again)
    # The lead had checkpointed by then and resumes; the helper had not, and starts afresh.
    starts = events(fork, "session_start")
    assert {agent_: [e.data["resumed"] for e in starts if e.agent == agent_][0] for agent_ in ("lead", "helper")} \
        == {"lead": True, "helper": False}
    assert recorded(run) == before


@pytest.mark.worker
def test_a_running_run_forks_from_its_committed_history_and_goes_on_untouched(
        team_a, api_for, celery_worker_process, runs_settled):
    agent(team_a, "Lead")
    # The lead writes a file, then thinks for 4 s: the fork is taken while the parent waits on that answer.
    script = {"lead": [call("vfs_write", path="a.md", content="first"),
                       {"text": "done", "latency_ms": 4000}]}
    run = run_start(team=team_a, agent="lead", input="x", script=script)
    from tests.runs import wait_until
    wait_until(lambda: len(events(run, "llm_request")) == 2, 30, "the lead's second model call")
    point = tool_event(run, "tool_result", "vfs_write")
    response = api_for(team_a, "operator").post(f"/api/runs/{run.id}/fork", {"seq": point.seq})
    assert response.status_code == 201, response.content
    assert Run.objects.get(pk=run.pk).status == "running"  # forked while it ran
    fork = Run.objects.get(pk=response.json()["id"])
    assert (fork.forked_from_id, fork.fork_seq, fork.script_cursor) == (run.id, point.seq, {"lead": 1})
    assert dict(WorkspaceFile.objects.filter(run=fork).values_list("path", "content")) == {"a.md": "first"}
    # Its session is the parent's as checkpointed by the fork point: resumed, not started afresh.
    [restored] = Session.objects.filter(run=fork)
    assert SessionEntry.objects.filter(session=restored).count() == SessionEntry.objects.filter(
        session__run=run, event_seq__lte=point.seq).count() > 0
    fork, run = finish(fork), finish(run)
    assert (fork.status, fork.result) == ("succeeded", "done")
    assert events(fork, "session_start")[0].data["resumed"] is True
    assert [e.type for e in events(fork) if e.type in ("tool_call", "file_change")] == []  # not written again
    # The parent went on as if nothing happened: one session, its own events, and it lists its fork.
    assert (run.status, run.result) == ("succeeded", "done")
    assert [e.type for e in events(run)] == [
        "run_start", "activation_queued", "session_start", "llm_request", "llm_response", "tool_call",
        "file_change", "tool_result", "llm_request", "stream_chunk", "llm_response", "session_end", "run_complete"]
    assert Session.objects.filter(run=run).count() == 1
    assert list(Run.objects.filter(forked_from=run).values_list("id", flat=True)) == [fork.id]


@pytest.mark.worker
def test_a_fork_restores_the_runs_channels_as_they_were_at_its_event(team_a, celery_worker_process, runs_settled):
    from memory_app.models import Channel, ChannelMessage, Subscription

    agent(team_a, "Lead", "tools: [publish, subscribe]\n")
    # The lead publishes one, reads it (ack 1), publishes two and three, then reads again: the parent's second
    # read takes two and three. Forked after two was published, the fork's read takes two (one was acked)
    # and the three the fork publishes itself.
    script = {"lead": [call("publish", channel="news", message="one"), call("subscribe", channel="news"),
                       call("publish", channel="news", message="two"),
                       call("publish", channel="news", message="three"), call("subscribe", channel="news"),
                       {"text": "done"}]}
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script))
    assert run.status == "succeeded"
    before = recorded(run)
    point = tool_event(run, "tool_result", "publish", 1)  # after "two" was published
    with transaction.atomic():
        fork = run_fork(run=run, seq=point.seq)
        [channel] = Channel.objects.filter(run=fork)
        assert (channel.name, channel.next_seq) == ("news", 2)
        assert list(ChannelMessage.objects.filter(channel=channel).values_list("seq", "sender", "content")) == [
            (1, "lead", "one"), (2, "lead", "two")]
        assert list(Subscription.objects.filter(channel=channel).values_list("agent", "last_acked")) == [
            ("lead", 1)]
        assert [(e.type, e.data) for e in events(fork) if e.type.startswith("channel_")] == [
            ("channel_publish", {"channel": "news", "seq": 1, "content": "one", "restored": True}),
            ("channel_publish", {"channel": "news", "seq": 2, "content": "two", "restored": True}),
            ("channel_subscribe", {"channel": "news", "received": [], "last_acked": 1, "restored": True})]
    fork = finish(fork)
    assert (fork.status, fork.result) == ("succeeded", "done")
    assert list(ChannelMessage.objects.filter(channel__run=fork).values_list("seq", "content")) == [
        (1, "one"), (2, "two"), (3, "three")]
    [read] = [e.data for e in events(fork, "channel_subscribe") if not e.data.get("restored")]
    assert (read["received"], read["last_acked"]) == ([2, 3], 3)
    # The parent's channel is its own still.
    assert list(ChannelMessage.objects.filter(channel__run=run).values_list("seq", "content")) == [
        (1, "one"), (2, "two"), (3, "three")]
    assert list(Subscription.objects.filter(channel__run=run).values_list("last_acked", flat=True)) == [3]
    assert recorded(run) == before
    # A fork of the fork, at its restored state (before its lead's first turn), restores the same.
    with transaction.atomic():
        again = run_fork(run=fork, seq=events(fork, "channel_subscribe")[0].seq)
        assert list(ChannelMessage.objects.filter(channel__run=again).values_list("seq", "content")) == [
            (1, "one"), (2, "two")]
        assert list(Subscription.objects.filter(channel__run=again).values_list("last_acked", flat=True)) == [1]
        transaction.set_rollback(True)


# -- refusals ----------------------------------------------------------------------------------


def _finished_run(team, *, status="succeeded", workflow="") -> Run:
    run = Run.objects.create(team=team, agent="" if workflow else "lead", workflow=workflow, input="x",
                             status=status)
    from mas_core.eventlog import event_append
    event_append(run_id=run.id, type="run_start", agent="lead", data={})
    event_append(run_id=run.id, type="llm_response", agent="lead", data={"text": "hi"})
    return Run.objects.get(pk=run.pk)


def test_another_teams_run_is_a_404_and_viewers_may_not_fork(team_a, team_b, api_for):
    agent(team_b, "Lead")
    theirs = _finished_run(team_b)
    assert api_for(team_a, "admin").post(f"/api/runs/{theirs.id}/fork", {"seq": 1}).status_code == 404
    assert api_for(team_a, "admin").post("/api/runs/not-a-uuid/fork", {"seq": 1}).status_code == 404
    assert api_for(team_b, "viewer").post(f"/api/runs/{theirs.id}/fork", {"seq": 1}).status_code == 403
    assert api_for(team_b, "editor").post(f"/api/runs/{theirs.id}/fork", {"seq": 1}).status_code == 403
    assert Run.objects.count() == 1


def test_bad_fork_points_are_422_with_the_reason(team_a, api_for):
    agent(team_a, "Lead")
    run = _finished_run(team_a)
    client = api_for(team_a, "operator")
    url = f"/api/runs/{run.id}/fork"
    assert _loc_and_message(client.post(url, {"seq": 3})) == (
        ["body", "seq"], f"run {run.id} has no event 3 (its events are numbered 1 to 2)")
    assert _loc_and_message(client.post(url, {"seq": 2, "tool_result": "x"})) == (
        ["body", "tool_result"], "event 2 is a llm_response event: tool_result replaces a tool call's result, so "
                                 "fork from a tool_call or tool_result event")
    assert _loc_and_message(client.post(url, {"seq": 1, "versions": {"agent:lead": 7}})) == (
        ["body", "versions"], "versions: agent 'lead' has no version 7 (kept versions: 1)")
    assert _loc_and_message(client.post(url, {"seq": 1, "versions": {"lead": 1}})) == (
        ["body", "versions"], "versions: 'lead' is not a definition key like agent:writer "
                              "(kinds: agent, tool, mcp, skill)")
    assert _loc_and_message(client.post(url, {"seq": 1, "versions": {"agent:lead": 0}})) == (
        ["body", "versions"], "versions: agent:lead must name a version number (1 or more), not 0")
    loc, _ = _loc_and_message(client.post(url, {"seq": 0}))
    assert loc == ["body", "seq"]
    loc, _ = _loc_and_message(client.post(url, {"seq": 1, "tool_result": "x" * 100_001}))
    assert loc == ["body", "tool_result"]
    loc, _ = _loc_and_message(client.post(url, {"seq": 1, "surprise": True}))
    assert loc == ["body", "surprise"]
    flow = _finished_run(team_a, workflow="pipeline")
    assert _loc_and_message(client.post(f"/api/runs/{flow.id}/fork", {"seq": 1})) == (
        ["body", "seq"], f"run {flow.id} of workflow pipeline has no workflow state to fork from")
    assert Run.objects.count() == 2


def test_a_history_cut_short_by_its_limit_refuses_later_fork_points(team_a, settings):
    agent(team_a, "Lead")
    run = _finished_run(team_a)
    assert settings.MAS_WORKSPACE_HISTORY_MAX_BYTES == 4 * settings.MAS_WORKSPACE_MAX_BYTES  # the default
    settings.MAS_WORKSPACE_HISTORY_MAX_BYTES = 10
    workspace_write(run_id=run.id, path="a.md", content="12345678", agent="lead", session_id=None)  # seq 3, kept
    workspace_write(run_id=run.id, path="a.md", content="abcdefgh", agent="lead", session_id=None)  # seq 4: past
    assert list(WorkspaceFileVersion.objects.filter(run=run).values_list("seq", "content")) == [(3, "12345678")]
    assert Run.objects.get(pk=run.pk).history_bytes == 16
    with pytest.raises(ForkError) as refused:
        run_fork(run=run, seq=4)
    assert str(refused.value) == (f"run {run.id} kept its files' history only up to an earlier event "
                                  "(MAS_WORKSPACE_HISTORY_MAX_BYTES): fork from an earlier event")
    with transaction.atomic():
        fork = run_fork(run=run, seq=3)
        assert dict(WorkspaceFile.objects.filter(run=fork).values_list("path", "content")) == {"a.md": "12345678"}
        transaction.set_rollback(True)  # no worker here: nothing to run it


def test_a_run_recorded_before_forks_is_refused(team_a):
    agent(team_a, "Lead")
    run = _finished_run(team_a)
    session = Session.objects.create(run=run, activation=Activation.objects.create(run=run, agent="lead"),
                                     agent="lead", status="ok")
    SessionEntry.objects.create(session=session, seq=1, kind="message", payload=json.dumps({"role": "user",
                                                                                            "content": "x"}))
    with pytest.raises(ForkError) as refused:
        run_fork(run=run, seq=2)
    assert str(refused.value) == (f"run {run.id} was recorded before forks existed: its checkpoints are not "
                                  "numbered by event, so it cannot be forked")


# -- the monitor's form -------------------------------------------------------------------------


def test_the_monitor_offers_forks_to_operators_only_and_answers_a_refusal_on_the_runs_page(
        team_a, team_b, make_member):
    from django.test import Client

    agent(team_a, "Lead")
    run = _finished_run(team_a)
    theirs = _finished_run(team_b)
    busy = _finished_run(team_a, status="running")
    viewer, operator = Client(), Client(enforce_csrf_checks=False)
    viewer.force_login(make_member(team_a, role="viewer"))
    operator.force_login(make_member(team_a, role="operator"))
    assert 'id="fork-form"' not in viewer.get(f"/runs/{run.id}/").content.decode()
    assert viewer.post(f"/runs/{run.id}/fork", {"seq": "1"}).status_code == 404
    assert 'id="fork-form"' in operator.get(f"/runs/{run.id}/").content.decode()
    assert operator.post(f"/runs/{theirs.id}/fork", {"seq": "1"}).status_code == 404
    assert operator.get(f"/runs/{run.id}/fork").status_code == 405

    def refused(target: Run, data: dict) -> str:
        response = operator.post(f"/runs/{target.id}/fork", data, follow=True)
        assert response.redirect_chain == [(f"/runs/{target.id}/", 302)]
        return [str(m) for m in response.context["messages"]][0]

    assert refused(run, {"seq": "x"}) == "Fork: choose an event to fork from."
    assert refused(run, {"seq": "9"}) == f"Fork refused: run {run.id} has no event 9 (its events are numbered 1 to 2)"
    assert refused(run, {"seq": "2", "edit": "1", "tool_result": "42"}) == (
        "Fork refused: event 2 is a llm_response event: tool_result replaces a tool call's result, so fork from a "
        "tool_call or tool_result event")
    # A run still going offers the same form (its committed history forks).
    assert 'id="fork-form" class="card" hidden>' in operator.get(f"/runs/{busy.id}/").content.decode()
    # A workflow run offers the same form (its steps in progress resume: a tool event takes another result too).
    flow = _finished_run(team_a, workflow="pipeline")
    assert 'id="fork-form" class="card" hidden>' in operator.get(f"/runs/{flow.id}/").content.decode()
    assert 'id="fork-form" class="card" hidden>' in operator.get(f"/runs/{run.id}/").content.decode()
    assert Run.objects.count() == 4
