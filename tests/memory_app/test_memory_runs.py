"""Agents remember across runs, on a real worker: shared knowledge reaches others, private memories do not."""


from agents_app.execution.journal import session_messages
import pytest

from agents_app.execution.runs import run_start
from agents_app.models import Event, Session
from memory_app.models import Memory
from tests.runs import agent, call, finish

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def tool_results(run):
    return [(e.data["name"], e.data["content"]) for e in Event.objects.filter(run=run, type="tool_result")
            .order_by("seq")]


def test_knowledge_contributed_in_one_run_is_found_by_another_agent_later(team_a, celery_worker_process):
    agent(team_a, "Scout")
    agent(team_a, "Analyst", "memory:\n  enabled: true\n  k: 3\n")
    first = finish(run_start(team=team_a, agent="scout", input="Explore", script={"scout": [
        call("knowledge_contribute", content="The northern pass is blocked by snow until April.", tags=["route"]),
        call("memory_store", content="My own shortcut: the tunnel under the old mill."),
        call("knowledge_contribute", content="The northern pass is blocked by snow until April!"),
        {"text": "Reported."},
    ]}))
    assert first.status == "succeeded", first.error
    shared = Memory.objects.get(team=team_a, shared=True)
    private = Memory.objects.get(team=team_a, shared=False)
    assert (shared.source_agent, shared.run_id, shared.tags) == ("scout", first.id, ["route"])
    assert (private.agent, private.content) == ("scout", "My own shortcut: the tunnel under the old mill.")
    results = tool_results(first)
    assert results[0] == ("knowledge_contribute", f"Added to the team's knowledge as memory {shared.id}.")
    assert results[2][1].startswith(f"Not added: the team already knows this as memory {shared.id} (similarity ")
    assert [e.type for e in Event.objects.filter(run=first, type__startswith="memory_").order_by("seq")] == [
        "memory_stored", "memory_stored", "memory_skipped"]

    second = finish(run_start(team=team_a, agent="analyst", input="Plan a route over the northern pass",
                                script={"analyst": [
                                    call("knowledge_query", query="is the northern pass open?"),
                                    call("memory_recall", query="shortcut tunnel old mill"),
                                    {"text": "Wait until April."},
                                ]}))
    assert second.status == "succeeded", second.error
    query, recall = tool_results(second)
    assert query == ("knowledge_query",
                     f"- [{shared.id}] (fact, shared) The northern pass is blocked by snow until April.")
    # The scout's private memory never reaches the analyst: recall finds only the shared entry.
    assert recall == ("memory_recall",
                      f"- [{shared.id}] (fact, shared) The northern pass is blocked by snow until April.")
    system = session_messages(session_id=Session.objects.get(run=second).id)[0].content
    assert "## What you remember\n\n- (fact) The northern pass is blocked by snow until April." in system
    assert "tunnel" not in system
    assert Memory.objects.get(pk=shared.pk).access_count == 3  # prompt retrieval, query, recall
    assert Memory.objects.get(pk=private.pk).access_count == 0


def test_consolidation_adds_updates_and_skips_with_provenance(team_a, celery_worker_process):
    import json

    from memory_app.services import memory_store

    agent(team_a, "Learner", "memory:\n  consolidate: true\n")
    old_password = memory_store(team_id=team_a.id, agent="learner", content="The database password rotates every 90 days.")
    old_freeze = memory_store(team_id=team_a.id, content="Deploys are frozen on Fridays.", shared=True)
    candidates = [
        {"content": "The ferry to the island leaves at 7 am.", "type": "fact"},
        {"content": "Database passwords rotate every 90 days, automatically.", "type": "fact"},
        {"content": "No deploys on Fridays.", "type": "procedure"},
    ]
    script = {"learner": [
        {"text": "Checked the schedules."},
        {"text": json.dumps(candidates)},  # what to remember
        {"text": json.dumps({"decision": "UPDATE", "content": "Database passwords rotate automatically every 90 days."})},
        {"text": json.dumps({"decision": "SKIP"})},
    ]}
    run = finish(run_start(team=team_a, agent="learner", input="Check the schedules", script=script))
    assert run.status == "succeeded", run.error
    decisions = [(e.type, e.data) for e in Event.objects.filter(run=run, type__startswith="memory_").order_by("seq")]
    assert [t for t, _ in decisions] == ["memory_stored", "memory_updated", "memory_skipped"]
    added = Memory.objects.get(content="The ferry to the island leaves at 7 am.")
    merged = Memory.objects.get(content="Database passwords rotate automatically every 90 days.")
    provenance = {"run": str(run.id), "agent": "learner", "via": "consolidation"}
    assert decisions[0][1]["memory"] == added.id and decisions[0][1].items() >= provenance.items()
    assert decisions[1][1]["supersedes"] == old_password.id and decisions[1][1]["memory"] == merged.id
    assert decisions[2][1]["matched"] == old_freeze.id and decisions[2][1]["candidate"] == "No deploys on Fridays."
    old_password.refresh_from_db()
    assert old_password.superseded_by_id == merged.id
    assert old_password.content == "The database password rotates every 90 days."  # kept, not deleted
    assert (added.agent, added.run_id, added.session_id is not None) == ("learner", run.id, True)
    assert Memory.objects.count() == 4  # nothing silently deleted, the skipped candidate not stored
    purposes = [e.data.get("purpose") for e in Event.objects.filter(run=run, type="llm_request").order_by("seq")]
    assert purposes == [None, "consolidation", "consolidation", "consolidation"]
    assert run.completion_tokens == sum(e.data["usage"]["completion_tokens"]
                                        for e in Event.objects.filter(run=run, type="llm_response"))


def test_a_consolidation_reply_that_is_not_json_is_an_error_event_and_stores_nothing(team_a, celery_worker_process):
    agent(team_a, "Learner", "memory:\n  consolidate: true\n")
    run = finish(run_start(team=team_a, agent="learner", input="x", script={"learner": [
        {"text": "done"}, {"text": "I learned many things!"}]}))
    assert run.status == "succeeded"
    [error] = Event.objects.filter(run=run, type="error")
    assert error.data["where"] == "consolidation"
    assert error.data["message"].startswith("the model's reply is not JSON")
    assert Memory.objects.count() == 0
