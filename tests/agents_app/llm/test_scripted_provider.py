"""The scripted provider: deterministic turns, a cursor that survives a crash."""

from __future__ import annotations

import asyncio
import time

import pytest

from agents_app.llm.scripted import (
    MemoryCursor,
    ScriptedProvider,
    split_chunks,
    validate_script,
)
from mas_core.llm_types import Message, ModelRequest, ToolCall, Usage

from .helpers import run, run_error

SCRIPT = {
    "writer": [
        {"tool_calls": [{"name": "vfs_write", "arguments": {"path": "notes.md", "content": "hi"}},
                        {"name": "vfs_list", "arguments": {}}],
         "usage": {"prompt_tokens": 100, "completion_tokens": 7}},
        {"text": "The notes are written and the listing shows one file."},
    ],
    "flaky": [{"error": "rate_limit"}, {"error": "server"}, {"error": "timeout"}, {"text": "ok"}],
}


def req(agent: str, content: str = "Write notes please", **kwargs) -> ModelRequest:
    return ModelRequest(model="replay", agent=agent, messages=[Message(role="user", content=content)], **kwargs)


def test_turns_in_order_with_deterministic_ids_and_usage():
    cursor = MemoryCursor()
    provider = ScriptedProvider(SCRIPT, cursor)

    first, chunks = run(provider, req("writer"))
    assert chunks == []
    assert first.text == ""
    assert first.finish_reason == "tool_calls"
    assert first.tool_calls == [
        ToolCall(id="call_writer_0_0", name="vfs_write", arguments={"path": "notes.md", "content": "hi"}),
        ToolCall(id="call_writer_0_1", name="vfs_list", arguments={}),
    ]
    assert first.usage == Usage(100, 7)
    assert cursor.positions == {"writer": 1}

    second, chunks = run(provider, req("writer"))
    text = "The notes are written and the listing shows one file."
    assert len(chunks) > 1 and "".join(chunks) == text
    assert (second.text, second.tool_calls, second.finish_reason) == (text, [], "stop")
    # Estimated: ~4 characters a token.
    assert second.usage == Usage(prompt_tokens=5, completion_tokens=14)
    assert cursor.positions == {"writer": 2}


def test_cursor_survives_a_new_provider_instance():
    """The kernel stores cursor.positions with the session; a replacement
    worker builds a new provider from them and gets the next turn."""
    stored: dict[str, int] = {}
    run(ScriptedProvider(SCRIPT, MemoryCursor(stored)), req("writer"))
    assert stored == {"writer": 1}

    saved = dict(stored)  # what the checkpoint wrote
    # ... worker dies; a new one loads the checkpoint:
    response, _ = run(ScriptedProvider(SCRIPT, MemoryCursor(saved)), req("writer"))
    assert response.text.startswith("The notes are written")
    assert saved == {"writer": 2}


def test_agents_have_separate_positions_and_star_serves_the_rest():
    cursor = MemoryCursor()
    provider = ScriptedProvider({**SCRIPT, "*": [{"text": "generic"}]}, cursor)
    run_error(provider, req("flaky"))
    assert run(provider, req("someone"))[0].text == "generic"
    assert run(provider, req("writer"))[0].tool_calls[0].id == "call_writer_0_0"
    assert cursor.positions == {"flaky": 1, "someone": 1, "writer": 1}


def test_errors_map_to_kinds_and_consume_their_turn():
    provider = ScriptedProvider(SCRIPT)
    errors = [run_error(provider, req("flaky")) for _ in range(3)]
    assert [(e.kind, e.status, e.retryable) for e in errors] == [
        ("rate_limit", 429, True), ("server", 500, True), ("timeout", None, True)]
    assert run(provider, req("flaky"))[0].text == "ok"


def test_past_the_end_is_a_clear_error():
    provider = ScriptedProvider({"solo": [{"text": "one"}]})
    run(provider, req("solo"))
    error = run_error(provider, req("solo"))
    assert (error.kind, error.retryable) == ("bad_request", False)
    assert error.message == "script for agent solo has no turn 1 (it has 1)"
    assert provider.cursor.get("solo") == 1  # not advanced by the failed call


def test_a_replayed_script_starts_an_agents_turns_again_past_their_end():
    """The demo recording's way: an agent with more sessions (or turns) than it has recorded plays them again."""
    provider = ScriptedProvider({"duo": [{"text": "one"}, {"text": "two"}], "*": [{"text": "any"}]}, replay=True)
    assert [run(provider, req("duo"))[0].text for _ in range(5)] == ["one", "two", "one", "two", "one"]
    assert [run(provider, req("new"))[0].text for _ in range(2)] == ["any", "any"]
    assert (provider.cursor.get("duo"), provider.cursor.get("new")) == (1, 1)


def test_unknown_agent_is_a_clear_error():
    error = run_error(ScriptedProvider({"solo": [{"text": "one"}]}), req("other"))
    assert error.message == "script has no turns for agent other"


def test_latency_is_honoured_and_concurrent_calls_overlap():
    provider = ScriptedProvider({"*": [{"text": "slow", "latency_ms": 200}]})

    async def many() -> list[str]:
        results = await asyncio.gather(*(provider.complete(req(f"agent{i}")) for i in range(20)))
        return [result.text for result in results]

    started = time.monotonic()
    assert asyncio.run(many()) == ["slow"] * 20
    elapsed = time.monotonic() - started
    assert 0.2 <= elapsed < 1.0


def test_latency_beyond_the_request_timeout_is_a_timeout():
    provider = ScriptedProvider({"a": [{"text": "late", "latency_ms": 5000}, {"text": "next"}]})
    started = time.monotonic()
    error = run_error(provider, req("a", timeout_s=0.1))
    assert error.kind == "timeout"
    assert time.monotonic() - started < 1
    assert run(provider, req("a"))[0].text == "next"


def test_recorded_malformed_arguments_replay_raw():
    provider = ScriptedProvider({"a": [{"tool_calls": [{"name": "vfs_read", "arguments": "{path: x"}]}]})
    [call] = run(provider, req("a"))[0].tool_calls
    assert call == ToolCall(id="call_a_0_0", name="vfs_read", arguments={}, raw_arguments="{path: x")


@pytest.mark.parametrize("script, message", [
    ([], "a script maps agent slugs to lists of turns"),
    ({"a": {"text": "x"}}, "script for agent a: expected a list of turns"),
    ({"a": [{"latency_ms": 3}]}, "script for agent a, turn 0: needs text, tool_calls or error"),
    ({"a": [{"text": "x", "colour": 1}]}, "script for agent a, turn 0: unknown key(s) colour"),
    ({"a": [{"text": "x"}, {"error": "boom"}]}, "script for agent a, turn 1: error must be one of"),
    ({"a": [{"tool_calls": [{"arguments": {}}]}]}, "script for agent a, turn 0: each tool call needs a name"),
    # Numbers the database stores and the session can wait for (issue 13, finding 3).
    ({"a": [{"text": "x", "usage": {"completion_tokens": 1e30}}]},
     "script for agent a, turn 0: usage.completion_tokens must be an integer from 0 to 10000000, not 1e+30"),
    ({"a": [{"text": "x", "usage": {"prompt_tokens": 10_000_001}}]},
     "script for agent a, turn 0: usage.prompt_tokens must be an integer from 0 to 10000000, not 10000001"),
    ({"a": [{"text": "x", "usage": {"prompt_tokens": -1}}]},
     "script for agent a, turn 0: usage.prompt_tokens must be an integer from 0 to 10000000, not -1"),
    ({"a": [{"text": "x", "usage": {"prompt_tokens": True}}]},
     "script for agent a, turn 0: usage.prompt_tokens must be an integer from 0 to 10000000, not True"),
    ({"a": [{"text": "x", "usage": {"tokens": 3}}]},
     "script for agent a, turn 0: usage is an object with prompt_tokens and completion_tokens only"),
    ({"a": [{"text": "x", "latency_ms": 10**12}]},
     "script for agent a, turn 0: latency_ms must be a number from 0 to 86400000, not 1000000000000"),
    ({"a": [{"text": "x", "latency_ms": "5"}]},
     "script for agent a, turn 0: latency_ms must be a number from 0 to 86400000, not '5'"),
    ({"a": [{"error": "rate_limit", "retry_after_s": 1e9}]},
     "script for agent a, turn 0: retry_after_s must be a number from 0 to 3600, not 1000000000.0"),
    ({"a": [{"text": 5}]}, "script for agent a, turn 0: text must be a string"),
    ({"a": [{"tool_calls": [{"name": "x"}] * 129}]},
     "script for agent a, turn 0: tool_calls must be a list of at most 128 calls"),
])
def test_invalid_scripts_are_rejected(script, message):
    with pytest.raises(ValueError) as info:
        validate_script(script)
    assert str(info.value).startswith(message)


def test_the_largest_numbers_a_script_may_hold_are_accepted():
    script = {"a": [{"text": "x", "latency_ms": 86_400_000, "usage": {"prompt_tokens": 10_000_000,
                                                                      "completion_tokens": 0}}]}
    assert validate_script(script) == script


def test_split_chunks_rejoin_exactly():
    for text in ["", "short", "a" * 50, "one two three four five six seven eight nine ten", "x " * 33]:
        chunks = split_chunks(text)
        assert "".join(chunks) == text
        assert len(chunks) <= 5


def test_a_first_turn_expects_in_the_system_prompt_and_the_task_a_later_turn_in_what_is_new():
    script = {"lead": [{"expect": ["You are the lead, version one.", "Do it"], "tool_calls": [
                           {"name": "vfs_list", "arguments": {}}]},
                       {"expect": "version one", "text": "never"}]}
    provider = ScriptedProvider(script, MemoryCursor())
    sent = [Message(role="system", content="You are the lead, version one."), Message(role="user", content="Do it")]
    first, _ = run(provider, ModelRequest(model="m", agent="lead", messages=sent))
    later = [*sent, Message(role="assistant", content="", tool_calls=first.tool_calls),
             Message(role="tool", content="a.md", tool_call_id=first.tool_calls[0].id, name="vfs_list")]
    error = run_error(provider, ModelRequest(model="m", agent="lead", messages=later))
    assert (error.kind, str(error)) == (
        "expectation", "expectation: script for agent lead, turn 1 expected 'version one' in what it was sent, "
                       "which was: 'a.md'")
