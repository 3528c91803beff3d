"""Long-term memory in pgvector: storing, hybrid search, visibility, de-duplication (real Postgres, real model)."""

import pytest

from memory_app.models import Memory
from memory_app.selectors import memory_search
from memory_app.services import MemoryError, knowledge_contribute, memory_share, memory_store

pytestmark = pytest.mark.django_db


def contents(hits):
    return [hit.memory.content for hit in hits]


def test_an_agent_finds_its_own_and_shared_memories_never_another_agents_private_ones(team_a, team_b):
    memory_store(team_id=team_a.id, agent="scout", content="The north valley has a river.")
    memory_store(team_id=team_a.id, agent="cook", content="The north valley river water must be boiled.")
    memory_store(team_id=team_a.id, content="Rivers in the north freeze in January.", shared=True)
    memory_store(team_id=team_b.id, agent="scout", content="The north valley river is dry.", shared=True)

    hits = memory_search(team_id=team_a.id, agent="scout", query="river in the north valley", k=10)
    assert sorted(contents(hits)) == ["Rivers in the north freeze in January.", "The north valley has a river."]
    assert contents(memory_search(team_id=team_a.id, agent="scout", query="north valley", k=10,
                                  shared_only=True)) == ["Rivers in the north freeze in January."]
    assert contents(memory_search(team_id=team_b.id, agent="cook", query="river", k=10)) == [
        "The north valley river is dry."]


def test_search_ranks_by_meaning_and_words_and_counts_access(team_a):
    for text in ["Postgres supports HNSW indexes through pgvector.", "Bananas are rich in potassium.",
                 "The meeting moved to Thursday.", "Vector search needs an approximate index for speed."]:
        memory_store(team_id=team_a.id, agent="a", content=text)
    hits = memory_search(team_id=team_a.id, agent="a", query="approximate nearest neighbour index in Postgres", k=2)
    assert sorted(contents(hits)) == ["Postgres supports HNSW indexes through pgvector.",
                                      "Vector search needs an approximate index for speed."]
    assert all(hit.similarity is not None and 0 < hit.similarity <= 1 for hit in hits)
    counts = dict(Memory.objects.values_list("content", "access_count"))
    assert counts["Bananas are rich in potassium."] == 0
    assert counts["Postgres supports HNSW indexes through pgvector."] == 1
    memory_search(team_id=team_a.id, agent="a", query="bananas", k=1, track=False)
    assert Memory.objects.get(content="Bananas are rich in potassium.").access_count == 0


def test_a_narrow_filter_still_returns_k_rows(team_a):
    # Many memories of other agents, few of this one: the index alone would starve the filter.
    from mas_core.embeddings import embed

    others = [f"Note {i} about logistics, shipping and warehouses." for i in range(400)]
    vectors = embed(others)
    Memory.objects.bulk_create([Memory(team_id=team_a.id, agent=f"agent-{i % 40}", content=text, embedding=vector)
                                for i, (text, vector) in enumerate(zip(others, vectors))])
    mine = [memory_store(team_id=team_a.id, agent="rare", content=f"Rare fact number {i} about comets.",
                         type="fact", tags=["space"]) for i in range(7)]
    hits = memory_search(team_id=team_a.id, agent="rare", query="logistics and shipping", k=5)
    assert len(hits) == 5 and {hit.memory.agent for hit in hits} == {"rare"}
    assert len(memory_search(team_id=team_a.id, agent="rare", query="comets", k=20)) == 7
    assert len(memory_search(team_id=team_a.id, agent="rare", query="comets", k=5, tags=["space"])) == 5
    assert memory_search(team_id=team_a.id, agent="rare", query="comets", k=5, types=["mistake"]) == []
    assert {m.id for m in mine} >= {hit.memory.id for hit in memory_search(team_id=team_a.id, agent="rare",
                                                                            query="x", k=3, tags=["space"])}


def test_contributing_a_near_duplicate_adds_nothing_and_names_the_existing_entry(team_a):
    first = knowledge_contribute(team_id=team_a.id, content="The API rate limit is 100 requests per minute.",
                                 source_agent="scout")
    again = knowledge_contribute(team_id=team_a.id, content="The API rate limit is 100 requests per minute!",
                                 source_agent="other")
    different = knowledge_contribute(team_id=team_a.id, content="Deployments happen every Tuesday morning.")
    assert (first.added, again.added, different.added) == (True, False, True)
    assert again.memory.id == first.memory.id and again.similarity > 0.9
    assert Memory.objects.filter(team=team_a, shared=True).count() == 2
    assert first.memory.source_agent == "scout" and first.memory.agent == ""


def test_bad_memories_are_refused_with_clear_errors(team_a):
    with pytest.raises(MemoryError, match="content: a memory needs some text"):
        memory_store(team_id=team_a.id, content="   ")
    with pytest.raises(MemoryError, match="type: one of skill, fact, procedure, observation, mistake, preference"):
        memory_store(team_id=team_a.id, content="x", type="rumour")
    with pytest.raises(MemoryError, match="tags: at most 20"):
        memory_store(team_id=team_a.id, content="x", tags=[f"t{i}" for i in range(21)])
    assert Memory.objects.count() == 0


def test_sharing_makes_a_private_memory_visible_to_the_team(team_a):
    memory = memory_store(team_id=team_a.id, agent="scout", content="The bridge is closed for repairs.")
    assert memory_search(team_id=team_a.id, agent="cook", query="bridge", k=3) == []
    memory_share(memory=memory, shared=True)
    assert contents(memory_search(team_id=team_a.id, agent="cook", query="bridge", k=3)) == [
        "The bridge is closed for repairs."]
