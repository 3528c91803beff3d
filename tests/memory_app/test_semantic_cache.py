"""The semantic cache on its own: keys, lookups by meaning, TTL, team and model scoping, what is stored."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents_app.kinds import AGENT
from mas_core.definitions.markdown import DefinitionError, parse_definition
from mas_core.llm_types import Message, ModelRequest, ModelResponse, ToolCall, ToolSchema, Usage
from memory_app.cache import cache_lookup, cache_store, replayed, request_key
from mas_core.embeddings import embed
from memory_app.models import CachedResponse

pytestmark = pytest.mark.django_db

SYSTEM = Message(role="system", content="You answer questions about geography.")
TOOLS = [ToolSchema(name="vfs_write", description="Write a file", parameters={"type": "object"})]


def request(question: str, *, tools=TOOLS, system=SYSTEM, max_tokens=None) -> ModelRequest:
    return ModelRequest(model="m", messages=[system, Message(role="user", content=question)], tools=list(tools),
                        temperature=0, max_tokens=max_tokens, agent="geo")


def answer(text="Paris.", finish_reason="stop", calls=()) -> ModelResponse:
    return ModelResponse(text=text, tool_calls=list(calls), usage=Usage(40, 3), model="m-2025",
                         finish_reason=finish_reason)


def lookup(team, question, *, model="scripted:m", similarity=0.95, ttl_s=3600, **kwargs):
    return cache_lookup(team_id=team.id, model=model, request=request(question, **kwargs), similarity=similarity,
                        ttl_s=ttl_s)


def stored(team, question, response=None, *, model="scripted:m", ttl_s=3600, **kwargs):
    found = lookup(team, question, model=model, ttl_s=ttl_s, **kwargs)
    return cache_store(team_id=team.id, agent="geo", model=model, lookup=found, response=response or answer(),
                       run_id=None, ttl_s=ttl_s)


def test_the_key_is_the_conversation_before_the_last_message_and_that_message_s_text():
    digest, prompt = request_key(request("What is the capital of France?"))
    assert prompt == "What is the capital of France?"
    assert request_key(request("Something else entirely"))[0] == digest  # the last text is compared by meaning
    assert request_key(request("What is the capital of France?", tools=[]))[0] != digest
    assert request_key(request("What is the capital of France?", max_tokens=10))[0] != digest
    other_system = Message(role="system", content="You answer questions about history.")
    assert request_key(request("What is the capital of France?", system=other_system))[0] != digest
    # Tool call ids are arbitrary: the same calls under other ids are the same conversation.
    def with_call(call_id):
        return ModelRequest(model="m", messages=[
            SYSTEM, Message(role="user", content="Write it"),
            Message(role="assistant", tool_calls=[ToolCall(id=call_id, name="vfs_write", arguments={"path": "a"})]),
            Message(role="tool", content="Wrote a (version 1).", tool_call_id=call_id, name="vfs_write")])
    assert request_key(with_call("call_1")) == request_key(with_call("cached_abc_0"))


def test_a_request_that_means_the_same_hits_and_one_that_does_not_misses(team_a):
    entry = stored(team_a, "What is the capital of France?")
    assert (entry.prompt, entry.agent, entry.model, entry.hits) == ("What is the capital of France?", "geo",
                                                                   "scripted:m", 0)
    assert entry.response == {"text": "Paris.", "tool_calls": [], "usage": {"prompt_tokens": 40,
                                                                           "completion_tokens": 3},
                              "model": "m-2025", "finish_reason": "stop"}

    hit = lookup(team_a, "What's the capital city of France?")
    expected = sum(a * b for a, b in zip(*embed(["What is the capital of France?",
                                                 "What's the capital city of France?"])))
    assert hit.entry.id == entry.id
    assert hit.similarity == pytest.approx(expected, abs=1e-3) and hit.similarity >= 0.95
    miss = lookup(team_a, "What is the capital of Germany?")
    assert miss.entry is None and miss.similarity < 0.7  # the closest entry, reported
    entry.refresh_from_db()
    assert entry.hits == 1 and entry.last_hit_at is not None  # the miss did not count


def test_a_hit_needs_the_same_team_model_tools_and_a_live_entry(team_a, team_b):
    entry = stored(team_a, "What is the capital of France?")
    question = "What is the capital of France?"
    assert lookup(team_a, question).entry == entry
    assert (lookup(team_b, question).entry, lookup(team_b, question).similarity) == (None, None)
    assert lookup(team_a, question, model="openai:gpt-4.1").entry is None
    assert lookup(team_a, question, tools=[]).entry is None
    CachedResponse.objects.filter(pk=entry.pk).update(created_at=timezone.now() - timedelta(seconds=3601))
    assert lookup(team_a, question, ttl_s=3600).entry is None
    assert lookup(team_a, question, ttl_s=7200).entry == entry  # the agent's TTL decides, at lookup time
    assert CachedResponse.objects.get(pk=entry.pk).hits == 2


def test_only_complete_answers_are_stored_and_expired_entries_of_the_conversation_are_pruned(team_a):
    assert stored(team_a, "What is the capital of France?", answer("Par", finish_reason="length")) is None
    assert CachedResponse.objects.count() == 0
    old = stored(team_a, "What is the capital of France?")
    other = stored(team_a, "What is the capital of France?", tools=[])  # another conversation
    CachedResponse.objects.update(created_at=timezone.now() - timedelta(hours=2))
    new = stored(team_a, "Which river flows through Paris?")
    assert set(CachedResponse.objects.values_list("pk", flat=True)) == {other.pk, new.pk}
    assert not CachedResponse.objects.filter(pk=old.pk).exists()


def test_a_replayed_answer_costs_nothing_and_its_tool_calls_get_new_ids(team_a):
    call = ToolCall(id="call_geo_0_0", name="vfs_write", arguments={"path": "a.md", "content": "x"})
    entry = stored(team_a, "Write the capital to a.md", answer("", finish_reason="tool_calls", calls=[call]))
    first, second = replayed(entry), replayed(entry)
    assert (first.text, first.finish_reason, first.model) == ("", "tool_calls", "m-2025")
    assert (first.usage.prompt_tokens, first.usage.completion_tokens) == (0, 0)
    assert [(c.name, c.arguments) for c in first.tool_calls] == [("vfs_write", {"path": "a.md", "content": "x"})]
    assert first.tool_calls[0].id.startswith("cached_") and first.tool_calls[0].id.endswith("_0")
    assert first.tool_calls[0].id != second.tool_calls[0].id != "call_geo_0_0"


@pytest.mark.parametrize("frontmatter, message", [
    ("memory:\n  cache:\n    enabled: true\n",
     "memory.cache needs temperature: 0 (a cached answer may only stand in for a deterministic one)"),
    ("temperature: 0.7\nmemory:\n  cache:\n    enabled: true\n",
     "memory.cache needs temperature: 0 (a cached answer may only stand in for a deterministic one)"),
    ("temperature: 0\nmemory:\n  cache:\n    enabled: true\n    similarity: 0.5\n",
     "memory.cache.similarity: Input should be greater than or equal to 0.8"),
    ("temperature: 0\nmemory:\n  cache:\n    enabled: true\n    ttl_s: 0\n",
     "memory.cache.ttl_s: Input should be greater than or equal to 1"),
    ("temperature: 0\nmemory:\n  cache:\n    enabled: yes please\n",
     "memory.cache.enabled: Input should be a valid boolean"),
])
def test_the_cache_settings_are_validated(frontmatter, message):
    with pytest.raises(DefinitionError) as caught:
        parse_definition(AGENT, f"---\nname: Geo\n{frontmatter}---\n\nYou answer.\n", path="agents/geo.md")
    assert message in str(caught.value)


def test_cache_settings_round_trip_and_default_off():
    parsed = parse_definition(AGENT, "---\nname: Geo\ntemperature: 0\nmemory:\n  cache:\n    enabled: true\n"
                                     "    similarity: 0.9\n---\n\nYou answer.\n")
    cache = parsed.spec.memory.cache
    assert (cache.enabled, cache.similarity, cache.ttl_s) == (True, 0.9, 86400)
    assert parse_definition(AGENT, "---\nname: Geo\n---\n\nx\n").spec.memory.cache.enabled is False
