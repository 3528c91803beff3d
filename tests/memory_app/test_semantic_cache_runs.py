"""The semantic cache on a real worker: a later run's similar request is answered without calling the model."""

from decimal import Decimal

import pytest

from agents_app.execution.runs import run_start
from agents_app.models import Event, Session, WorkspaceFile
from memory_app.models import CachedResponse
from tests.runs import agent, call, finish as finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

CACHED = "temperature: 0\nmemory:\n  cache:\n    enabled: true\n"


def events(run, *types):
    return [(e.type, e.data) for e in Event.objects.filter(run=run, type__in=types).order_by("seq")]


def test_a_similar_question_in_a_later_run_is_answered_from_the_cache(team_a, team_b, api_for,
                                                                      celery_worker_process):
    agent(team_a, "Answerer", CACHED)
    first = finished(run_start(team=team_a, agent="answerer", input="What is the capital of France?",
                               script={"answerer": [{"text": "Paris.", "usage": {"prompt_tokens": 30,
                                                                                 "completion_tokens": 2}}]}))
    assert first.status == "succeeded", first.error
    [entry] = CachedResponse.objects.all()
    assert (entry.team_id, entry.agent, entry.model, entry.run_id, entry.hits) == (
        team_a.id, "answerer", "scripted:scripted", first.id, 0)
    assert entry.prompt == "What is the capital of France?\n\nWrite your files under `out/answerer/`."
    assert events(first, "cache_hit", "cache_miss") == [
        ("cache_miss", {"model": "scripted:scripted", "closest_similarity": None})]

    # No turns in the script: only the cache can answer.
    second = finished(run_start(team=team_a, agent="answerer", input="What's the capital city of France?",
                                script={"answerer": []}))
    assert second.status == "succeeded", second.error
    assert second.result == "Paris."
    [(kind, hit)] = events(second, "cache_hit", "cache_miss")
    assert kind == "cache_hit"
    assert (hit["entry"], hit["model"], hit["saved_tokens"]) == (
        entry.id, "scripted:scripted", {"prompt_tokens": 30, "completion_tokens": 2})
    assert 0.96 <= hit["similarity"] < 1
    [(_, response)] = events(second, "llm_response")
    assert (response["text"], response["usage"], Decimal(response["cost_usd"])) == (
        "Paris.", {"prompt_tokens": 0, "completion_tokens": 0}, 0)
    assert (second.prompt_tokens, second.completion_tokens) == (0, 0)
    assert CachedResponse.objects.get(pk=entry.pk).hits == 1
    assert CachedResponse.objects.count() == 1  # a hit stores nothing

    # A different question misses (the closest entry is reported), calls the model and is kept.
    third = finished(run_start(team=team_a, agent="answerer", input="What is the capital of Germany?",
                               script={"answerer": [{"text": "Berlin."}]}))
    assert third.result == "Berlin."
    [(kind, miss)] = events(third, "cache_hit", "cache_miss")
    assert kind == "cache_miss" and 0.5 < miss["closest_similarity"] < 0.96
    assert CachedResponse.objects.count() == 2

    # Another team asking the first question gets nothing of team A's.
    agent(team_b, "Answerer", CACHED)
    theirs = finished(run_start(team=team_b, agent="answerer", input="What is the capital of France?",
                                script={"answerer": [{"text": "Paris, says B."}]}))
    assert theirs.result == "Paris, says B."
    assert events(theirs, "cache_hit", "cache_miss") == [
        ("cache_miss", {"model": "scripted:scripted", "closest_similarity": None})]

    client = api_for(team_a, "viewer")
    totals = {run.id: client.get(f"/api/runs/{run.id}").json()["totals"] for run in (first, second, third)}
    assert [(t["cache_hits"], t["cache_misses"]) for t in totals.values()] == [(0, 1), (1, 0), (0, 1)]
    assert totals[first.id]["prompt_tokens"] == 30 and totals[second.id]["prompt_tokens"] == 0
    assert "cache_hits" not in client.get("/api/runs").json()[0]["totals"]  # lists stay one query
    assert api_for(team_b, "viewer").get(f"/api/runs/{second.id}").status_code == 404


def test_cached_tool_calls_still_run_their_tools_and_an_agent_without_the_cache_is_untouched(
        team_a, celery_worker_process):
    agent(team_a, "Writer", CACHED)
    script = {"writer": [call("vfs_write", path="capital.md", content="Paris"), {"text": "Wrote it."}]}
    first = finished(run_start(team=team_a, agent="writer", input="Write the capital of France to capital.md",
                               script=script))
    assert first.status == "succeeded", first.error
    assert [t for t, _ in events(first, "cache_hit", "cache_miss")] == ["cache_miss", "cache_miss"]

    second = finished(run_start(team=team_a, agent="writer", input="Write the capital of France to capital.md",
                                script={"writer": []}))
    assert second.status == "succeeded", second.error
    assert second.result == "Wrote it."
    assert [t for t, _ in events(second, "cache_hit", "cache_miss")] == ["cache_hit", "cache_hit"]
    # The model's decision came from the cache; the tool itself ran in this run's workspace.
    assert WorkspaceFile.objects.get(run=second, path="capital.md").content == "Paris"
    [(_, tool_call)] = events(second, "tool_call")
    # The kernel names the replayed call as any other (the cache's own fresh id is only the provider's).
    assert tool_call == {"id": "tc-1", "name": "vfs_write", "arguments": {"path": "capital.md", "content": "Paris"}}
    assert CachedResponse.objects.count() == 2 and sorted(CachedResponse.objects.values_list("hits", flat=True)) == [
        1, 1]

    agent(team_a, "Plain", "temperature: 0\n")
    plain = finished(run_start(team=team_a, agent="plain", input="Write the capital of France to capital.md",
                               script={"plain": [{"text": "Not cached."}]}))
    assert plain.result == "Not cached."
    assert events(plain, "cache_hit", "cache_miss") == []
    assert CachedResponse.objects.count() == 2
    assert Session.objects.get(run=plain).prompt_tokens > 0
