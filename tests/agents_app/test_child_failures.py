"""Children that cannot start, and children of a parent that fails, on a real worker.

A child whose agent file is deleted or made invalid while it is queued fails
after a bounded number of tries, and its waiting parent resumes with the
failure report as its tool result.
"""

from __future__ import annotations

import json

import pytest

from agents_app.execution.runs import run_start
from agents_app.models import Activation, Session
from tests.runs import agent, events, finish

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

SCOUT = "---\nname: Scout\ntools: []\n---\n\nYou scout.\n"


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
