"""Children that cannot start, and children of a parent that fails, on a real worker.

A child whose agent file is deleted or made invalid while it is queued fails
after a bounded number of tries, and its waiting parent resumes with the
failure report as its tool result.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from agents_app.execution.errors import RunError
from agents_app.execution.lifecycle import session_begin, session_begin_failed, session_settle
from agents_app.execution.reaper import sessions_reap
from agents_app.execution.runs import run_start
from agents_app.execution.store import _monitor_tick
from agents_app.models import Activation, Run, Session, WorkspaceFile
from tests.runs import agent, events, finish

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

SCOUT = "---\nname: Scout\ntools: []\n---\n\nYou scout.\n"


@pytest.fixture
def held(unserved):
    """Nothing goes to a worker: the rows a test builds stay as it built them (a test of the worker suite in
    this process may have one running)."""


def spawn(task: str = "Scout the north") -> dict:
    return {"name": "spawn_agent", "arguments": {"filename": "scout.md", "content": SCOUT, "task": task}}


EDITS = {
    "deleted": ({"name": "vfs_delete", "arguments": {"path": "agents/scout.md"}},
                "agent 'scout' does not exist in this team or run"),
    "made invalid": ({"name": "vfs_write", "arguments": {"path": "agents/scout.md",
                                                         "content": "---\nname: [Scout\n---\n\nBroken.\n"}},
                     "agents/scout.md is not a valid agent definition: "),
}


@pytest.mark.parametrize("edit", EDITS, ids=list(EDITS))
def test_a_child_whose_agent_file_goes_bad_while_queued_fails_and_its_parent_gets_the_report(
        team_a, celery_worker_process, edit):
    agent(team_a, "Lead", "tools:\n- spawn_agent\n- vfs_delete\n- vfs_write\n")
    change, reason = EDITS[edit]
    script = {"lead": [
        # One session at a time: the child waits in the queue while the lead's turn edits its file.
        {"tool_calls": [spawn(), change]},
        {"expect": ['"status": "failed"', "agent scout could not be started (tried 3 times): "],
         "text": "The scout could not start."},
    ]}
    run = finish(run_start(team=team_a, agent="lead", input="Scout", limits={"max_concurrency": 1},
                           script=script))

    assert (run.status, run.result, run.error) == ("succeeded", "The scout could not start.", "")
    child = Activation.objects.get(run=run, agent="scout")
    assert (child.status, child.attempts, child.context["begin_tries"]) == ("failed", 1, 3)
    [session] = Session.objects.filter(activation=child)
    assert (session.status, session.attempt) == ("failed", 1)
    assert session.failure["message"].startswith(f"agent scout could not be started (tried 3 times): {reason}")
    assert (session.failure["kind"], session.failure["suggested_retry"]) == ("unknown", False)
    [spawned] = [json.loads(e.data["content"]) for e in events(run, "tool_result")
                 if e.data["name"] == "spawn_agent"]
    assert (spawned["agent"], spawned["status"], spawned["failure"]) == ("scout", "failed", session.failure)
    # Tried three times in all, twice again after a backoff; never sent again by the sweep.
    begun = [e for e in events(run, "error") if e.data["where"] == "session_begin"]
    assert [(e.data["try"], e.data["message"].startswith(reason)) for e in begun] == [(1, True), (2, True), (3, True)]
    assert [(e.data["what"], e.data["attempt"]) for e in events(run, "retry")] == [
        ("session_begin", 2), ("session_begin", 3)]
    assert [e.data["status"] for e in events(run, "session_end") if e.agent == "scout"] == ["failed"]


def delegate(task: str) -> dict:
    return {"name": "delegate", "arguments": {"agent": "helper", "task": task}}


def test_a_retried_parent_cancels_the_child_it_waited_for_and_its_retry_may_start_another(
        team_a, celery_worker_process):
    agent(team_a, "Lead", "tools:\n- delegate\n- vfs_read\n")
    agent(team_a, "Helper")
    script = {
        "lead": [
            # The child waits in the queue (one session at a time); five failed reads in a row fail the
            # lead's session as tool_error, which is retried.
            {"tool_calls": [delegate("first"), *[{"name": "vfs_read", "arguments": {"path": f"missing-{n}.md"}}
                                                 for n in range(5)]]},
            {"tool_calls": [delegate("second")]},
            {"expect": '"result": "second done"', "text": "Recovered."},
        ],
        "helper": [{"expect": "second", "text": "second done"}],
    }
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script,
                           limits={"max_concurrency": 1, "max_fanout": 1, "max_retries": 1}))

    assert (run.status, run.result) == ("succeeded", "Recovered.")
    children = list(Activation.objects.filter(run=run, agent="helper").order_by("created_at"))
    assert [(c.input, c.status) for c in children] == [("first", "cancelled"), ("second", "done")]
    # The cancelled child never ran; the fan-out limit of 1 let the retry start its own.
    assert list(Session.objects.filter(run=run, agent="helper").values_list("activation_id", "status")) == [
        (children[1].id, "ok")]
    first_attempt = Session.objects.get(run=run, agent="lead", attempt=1)
    [cancelled] = events(run, "children_cancelled")
    assert (cancelled.agent, cancelled.session_id, cancelled.data) == (
        "lead", first_attempt.id, {"activations": [str(children[0].id)], "reason": "lead failed: tool_error"})
    assert [e.data["what"] for e in events(run, "retry")] == ["session"]
    assert [(e.data["to"], e.data["task"]) for e in events(run, "delegate")] == [("helper", "first"),
                                                                                 ("helper", "second")]


def test_a_failed_parent_cancels_its_waiting_children_and_their_children_keeping_partial_results(team_a, held):
    """The database side, with every state a child may be in when its parent fails (no worker needed)."""
    agent(team_a, "Lead")
    agent(team_a, "Helper")
    run = run_start(team=team_a, agent="lead", input="x", script={"lead": [{"text": "unused"}]})
    root = Activation.objects.get(run=run)
    Activation.objects.filter(pk=root.pk).update(status="running")
    lead = Session.objects.create(run=run, activation=root, agent="lead", attempt=1, status="running")

    def child(task, status, *, parent=root, wait=True, call="tc-1"):
        marks = {"tool_call": f"{lead.id}:{call}", **({"wait": True} if wait else {"notify": True})}
        return Activation.objects.create(run=run, agent="helper", input=task, kind="delegate", parent=parent,
                                         status=status, depth=parent.depth + 1, context=marks)

    suspended = child("suspended", "suspended")
    suspended_session = Session.objects.create(run=run, activation=suspended, agent="helper", attempt=1,
                                               status="suspended", result="Half way")
    grandchild = child("deeper", "queued", parent=suspended)
    running = child("running", "running", call="tc-2")
    running_session = Session.objects.create(run=run, activation=running, agent="helper", attempt=1,
                                             status="running", result="")
    queued = child("queued", "queued", call="tc-3")
    child("not waited for", "queued", wait=False, call="tc-4")
    child("finished", "done", call="tc-5")
    tool_worker = Activation.objects.create(run=run, agent="report", input="tool", kind="tool", parent=root,
                                            status="running", context={"tool_call": f"{lead.id}:tc-6"})

    failure = {"kind": "stuck", "message": "the same call vfs_list with the same arguments 3 times in a row",
               "last_tool_calls": [], "suggested_retry": False}
    session_settle(run_id=run.id, session_id=lead.id, status="failed", result="", meta={}, failure=failure,
                   ladder=[])

    status = dict(Activation.objects.filter(run=run).values_list("input", "status"))
    assert status == {"x": "failed", "suspended": "cancelled", "deeper": "cancelled", "running": "cancelled",
                      "queued": "cancelled", "not waited for": "ready", "finished": "done",  # that one goes on
                      "tool": "cancelled"}
    [cancelled] = events(run, "children_cancelled")
    assert (cancelled.agent, cancelled.session_id, cancelled.data["reason"]) == ("lead", lead.id, "lead failed: stuck")
    assert sorted(cancelled.data["activations"]) == sorted(map(str, [suspended.id, grandchild.id, running.id,
                                                                     queued.id, tool_worker.id]))
    # The suspended child's session ends now, its partial result kept.
    suspended_session.refresh_from_db()
    assert (suspended_session.status, suspended_session.result) == ("cancelled", "Half way")
    assert [(e.session_id, e.data["status"], e.data["result"]) for e in events(run, "session_end")
            if e.agent == "helper"] == [(suspended_session.id, "cancelled", "Half way")]
    # The running one is stopped by its worker's monitor, which sees its activation cancelled …
    assert _monitor_tick(session_ids=[], watched=[running_session.id, lead.id]) == {running_session.id}
    # … and however its session ends, the activation stays cancelled: not retried, its partial result kept.
    session_settle(run_id=run.id, session_id=running_session.id, status="failed", result="partial",
                   meta={}, failure={**failure, "kind": "tool_error", "suggested_retry": True}, ladder=[])
    running.refresh_from_db()
    running_session.refresh_from_db()
    assert (running.status, running_session.status, running_session.result) == ("cancelled", "failed", "partial")
    assert [e.data["what"] for e in events(run, "retry")] == []


def test_the_reaper_leaves_a_custom_tools_worker_to_the_caller_that_runs_it_inline(team_a, held):
    """Both sessions lost their worker: the caller is resumed, and resumes its tool's worker itself."""
    agent(team_a, "Lead")
    run = run_start(team=team_a, agent="lead", input="x", script={"lead": [{"text": "unused"}]})
    root = Activation.objects.get(run=run)
    Activation.objects.filter(pk=root.pk).update(status="running")
    Run.objects.filter(pk=run.pk).update(status="running")
    silent = timezone.now() - timedelta(minutes=5)
    lead = Session.objects.create(run=run, activation=root, agent="lead", attempt=1, status="running",
                                  heartbeat_at=silent, worker="dead:1")
    tool_worker = Activation.objects.create(
        run=run, agent="report", input="Report on rows", kind="tool", parent=root, status="running", attempts=1,
        context={"worker": {"name": "report", "body": "You report."}, "tool_call": f"{lead.id}:tc-1"})
    worker_session = Session.objects.create(run=run, activation=tool_worker, agent="report", attempt=1,
                                            status="running", heartbeat_at=silent, worker="dead:1")

    assert sessions_reap() == [str(root.id)]
    tool_worker.refresh_from_db()
    assert (tool_worker.status, tool_worker.context.get("resumes")) == ("running", None)  # not sent anywhere
    assert [(e.session_id, e.data["what"]) for e in events(run, "retry")] == [(lead.id, "session_resume")]
    # The resumed caller runs it inline: its session is resumed from its checkpoint, not started again.
    start = session_begin(activation_id=tool_worker.id, worker="alive:2")
    assert (start.session.id, start.resumed) == (worker_session.id, True)


def test_an_agent_file_restored_between_tries_begins_and_its_tries_are_counted_afresh(team_a, held):
    agent(team_a, "Lead")
    run = run_start(team=team_a, agent="lead", input="x", script={"lead": [{"text": "unused"}]})
    root = Activation.objects.get(run=run)
    scout = Activation.objects.create(run=run, agent="scout", input="Scout", kind="spawn", parent=root,
                                      status="dispatched", depth=1, context={"tool_call": "s:tc-1", "wait": True})
    with pytest.raises(RunError, match="agent 'scout' does not exist in this team or run"):
        session_begin(activation_id=scout.id, worker="w:1")
    assert session_begin_failed(activation_id=scout.id, worker="w:1", error="gone") is None
    scout.refresh_from_db()
    assert (scout.status, scout.context["begin_tries"], scout.not_before is not None) == ("queued", 1, True)
    assert not Session.objects.filter(activation=scout).exists()
    WorkspaceFile.objects.create(run=run, path="agents/scout.md", content=SCOUT, author="lead")
    start = session_begin(activation_id=scout.id, worker="w:1")
    scout.refresh_from_db()
    assert (start.agent.slug, start.resumed, scout.status, scout.attempts) == ("scout", False, "running", 1)
    assert "begin_tries" not in scout.context
