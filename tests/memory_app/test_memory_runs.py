"""Agents remember across runs, on a real worker: shared knowledge reaches others, private memories do not."""

import time

import pytest

from agents_app.definitions.kinds import AGENT
from agents_app.definitions.services import definition_parse, definition_save
from agents_app.execution.services import run_start
from agents_app.models import Event, Run, Session
from memory_app.models import Memory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def agent(team, name, frontmatter=""):
    text = f"---\nname: {name}\n{frontmatter}---\n\nYou work.\n"
    definition_save(kind=AGENT, team=team, parsed=definition_parse(kind=AGENT, team=team, text=text))


def finished(run, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run.pk)
        if run.status in {"succeeded", "failed", "cancelled"}:
            return run
        time.sleep(0.2)
    raise AssertionError(f"run still {run.status}")


def call(name, **arguments):
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def tool_results(run):
    return [(e.data["name"], e.data["content"]) for e in Event.objects.filter(run=run, type="tool_result")
            .order_by("seq")]


def test_knowledge_contributed_in_one_run_is_found_by_another_agent_later(team_a, celery_worker_process):
    agent(team_a, "Scout")
    agent(team_a, "Analyst", "memory:\n  enabled: true\n  k: 3\n")
    first = finished(run_start(team=team_a, agent="scout", input="Explore", script={"scout": [
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

    second = finished(run_start(team=team_a, agent="analyst", input="Plan a route over the northern pass",
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
    system = Session.objects.get(run=second).state["messages"][0]["content"]
    assert "## What you remember\n\n- (fact) The northern pass is blocked by snow until April." in system
    assert "tunnel" not in system
    assert Memory.objects.get(pk=shared.pk).access_count == 3  # prompt retrieval, query, recall
    assert Memory.objects.get(pk=private.pk).access_count == 0
