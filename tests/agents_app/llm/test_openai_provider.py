"""OpenAIProvider against a local server speaking /v1/chat/completions SSE."""

from __future__ import annotations

import time
from decimal import Decimal

from agents_app.llm.openai_provider import OpenAIProvider
from agents_app.llm.pricing import Prices, usage_cost
from mas_core.llm_types import ToolCall, Usage

from .fake_servers import (
    closed_port_url,
    hang,
    json_reply,
    openai_error,
    openai_stream,
    sse,
)
from .helpers import CONVERSATION, WEATHER, request, run, run_error


def provider(server) -> OpenAIProvider:
    return OpenAIProvider(api_key="sk-test", base_url=f"{server.url}/v1")


def test_text_streams_in_order_with_usage_and_cost(server):
    server.add(sse(openai_stream(text=["Hel", "lo, ", "world", "!"], usage=(12, 5)), event_delay_s=0.01))
    response, chunks = run(provider(server), request("gpt-test", temperature=0.2, max_tokens=64))

    assert chunks == ["Hel", "lo, ", "world", "!"]
    assert response.text == "Hello, world!"
    assert response.tool_calls == []
    assert response.finish_reason == "stop"
    assert response.model == "gpt-fake"
    assert response.usage == Usage(prompt_tokens=12, completion_tokens=5)
    assert usage_cost(response.usage, Prices.of("2.50", "10")) == Decimal("0.00008000")

    [sent] = server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.headers.get("x-stainless-retry-count") == "0"
    assert sent.body == {
        "model": "gpt-test",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.2,
        "max_tokens": 64,
    }


def test_tool_calls_from_argument_fragments(server):
    server.add(sse(openai_stream(text=["Let me check."], tool_calls=[
        ("call_a", "get_weather", ['{"ci', 'ty": "Pa', 'ris"}']),
        ("call_b", "get_weather", ['{"city": ', '"Rome", "units": ["c", 1]}']),
    ], usage=(40, 20))))
    response, chunks = run(provider(server), request("gpt-test", CONVERSATION, tools=[WEATHER]))

    assert chunks == ["Let me check."]
    assert response.finish_reason == "tool_calls"
    assert response.tool_calls == [
        ToolCall(id="call_a", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="call_b", name="get_weather", arguments={"city": "Rome", "units": ["c", 1]}),
    ]
    assert response.usage == Usage(40, 20)

    body = server.requests[0].body
    assert body["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city", "parameters": WEATHER.parameters}}]
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "rain"},
    ]


def test_malformed_arguments_are_kept_raw(server):
    server.add(sse(openai_stream(tool_calls=[("call_x", "get_weather", ['{"city": ', "Paris"]),
                                             ("call_y", "get_weather", ['["not", "an object"]'])])))
    response, _ = run(provider(server), request("gpt-test", tools=[WEATHER]))
    assert response.tool_calls == [
        ToolCall(id="call_x", name="get_weather", arguments={}, raw_arguments='{"city": Paris'),
        ToolCall(id="call_y", name="get_weather", arguments={}, raw_arguments='["not", "an object"]'),
    ]


def test_length_finish_and_missing_usage(server):
    server.add(sse(openai_stream(text=["trunc"], usage=None, finish="length")))
    response, _ = run(provider(server), request("gpt-test"))
    assert (response.text, response.finish_reason, response.usage) == ("trunc", "length", Usage(0, 0))


def test_rate_limit_with_retry_after_is_not_retried_by_the_sdk(server):
    server.add(json_reply(429, openai_error(429, "slow down"), {"Retry-After": "7"}),
               sse(openai_stream(text=["never sent"])))
    error = run_error(provider(server), request("gpt-test"))
    assert (error.kind, error.status, error.retry_after_s, error.retryable) == ("rate_limit", 429, 7.0, True)
    assert "slow down" in error.message
    assert len(server.requests) == 1  # max_retries=0: the kernel owns retries
    assert len(server.replies) == 1


def test_status_errors_map_to_kinds(server):
    cases = [(500, "server", True), (503, "server", True), (401, "auth", False), (403, "auth", False),
             (400, "bad_request", False), (404, "bad_request", False)]
    for status, _, _ in cases:
        server.add(json_reply(status, openai_error(status)))
    for status, kind, retryable in cases:
        error = run_error(provider(server), request("gpt-test"))
        assert (error.kind, error.status, error.retryable) == (kind, status, retryable)
    assert len(server.requests) == len(cases)


def test_hanging_server_times_out(server):
    server.add(hang(30))
    started = time.monotonic()
    error = run_error(provider(server), request("gpt-test", timeout_s=0.5))
    assert error.kind == "timeout" and error.retryable
    assert time.monotonic() - started < 5


def test_stream_that_stalls_times_out(server):
    server.add(sse(openai_stream(text=["partial"])[:2], hang_after_events_s=30))
    chunks: list[str] = []
    import asyncio

    async def go():
        await provider(server).complete(request("gpt-test", timeout_s=0.5), on_chunk=chunks.append)

    try:
        asyncio.run(go())
    except Exception as exc:  # noqa: BLE001
        assert getattr(exc, "kind", None) == "timeout"
    else:
        raise AssertionError("expected a timeout")
    assert chunks == ["partial"]


def test_connection_refused():
    error = run_error(OpenAIProvider(api_key="k", base_url=f"{closed_port_url()}/v1"), request("gpt-test"))
    assert error.kind == "connection" and error.retryable


def test_async_chunk_callback(server):
    import asyncio

    server.add(sse(openai_stream(text=["a", "b"])))
    seen: list[str] = []

    async def on_chunk(text: str) -> None:
        await asyncio.sleep(0)
        seen.append(text)

    async def go():
        return await provider(server).complete(request("gpt-test"), on_chunk=on_chunk)

    assert asyncio.run(go()).text == "ab"
    assert seen == ["a", "b"]


def test_context_length_exceeded_is_its_own_kind(server):
    server.add(json_reply(400, {"error": {
        "message": "This model's maximum context length is 128000 tokens. However, your messages resulted in "
                   "130211 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}))
    error = run_error(provider(server), request("gpt-test"))
    assert (error.kind, error.status, error.retryable) == ("context_length", 400, False)
    assert "maximum context length is 128000 tokens" in error.message
