"""AnthropicProvider against a local server speaking /v1/messages SSE."""

from __future__ import annotations

import time
from decimal import Decimal

from agents_app.llm.anthropic_provider import AnthropicProvider
from agents_app.llm.pricing import Prices, usage_cost
from mas_core.llm_types import Message, ToolCall, Usage

from .fake_servers import (
    _event,
    anthropic_error,
    anthropic_stream,
    closed_port_url,
    hang,
    json_reply,
    sse,
)
from .helpers import CONVERSATION, WEATHER, request, run, run_error


def provider(server) -> AnthropicProvider:
    return AnthropicProvider(api_key="sk-ant-test", base_url=server.url)


def test_text_streams_in_order_with_usage_and_cost(server):
    server.add(sse(anthropic_stream(text=["Bon", "jour", " à ", "tous"], usage=(25, 9)), event_delay_s=0.01))
    response, chunks = run(provider(server), request("claude-test", temperature=0.5))

    assert chunks == ["Bon", "jour", " à ", "tous"]
    assert response.text == "Bonjour à tous"
    assert response.finish_reason == "stop"
    assert response.model == "claude-fake"
    assert response.usage == Usage(prompt_tokens=25, completion_tokens=9)
    assert usage_cost(response.usage, Prices.of(3, 15)) == Decimal("0.00021000")

    [sent] = server.requests
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == "sk-ant-test"
    assert sent.headers.get("x-stainless-retry-count") == "0"
    assert sent.body == {
        "model": "claude-test",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        "system": "Be brief.",
        "stream": True,
        "temperature": 0.5,
    }


def test_tool_use_from_input_json_deltas_and_conversation_format(server):
    server.add(sse(anthropic_stream(text=["On it."], tool_calls=[
        ("toolu_1", "get_weather", ['{"city"', ': "Pa', 'ris"}']),
        ("toolu_2", "get_weather", ['{"city": "Rome", ', '"days": 3}']),
        ("toolu_3", "list_cities", []),  # no input at all → {}
    ], usage=(120, 44))))
    response, chunks = run(provider(server), request("claude-test", CONVERSATION, tools=[WEATHER], max_tokens=300))

    assert chunks == ["On it."]
    assert response.finish_reason == "tool_calls"
    assert response.tool_calls == [
        ToolCall(id="toolu_1", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="toolu_2", name="get_weather", arguments={"city": "Rome", "days": 3}),
        ToolCall(id="toolu_3", name="list_cities", arguments={}),
    ]
    assert response.usage == Usage(120, 44)

    body = server.requests[0].body
    assert body["system"] == "You are terse."
    assert body["max_tokens"] == 300
    assert body["tools"] == [{"name": "get_weather", "description": "Weather for a city",
                              "input_schema": WEATHER.parameters}]
    # Both tool results answer one assistant turn: one user message.
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"city": "Rome"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "rain"},
        ]},
    ]


def test_several_system_messages_join(server):
    server.add(sse(anthropic_stream(text=["ok"])))
    run(provider(server), request("claude-test", [Message(role="system", content="A"),
                                                  Message(role="system", content="B"),
                                                  Message(role="user", content="go")]))
    assert server.requests[0].body["system"] == "A\n\nB"


def test_malformed_input_json_kept_raw(server):
    server.add(sse(anthropic_stream(tool_calls=[("toolu_9", "get_weather", ['{"city": "Par'])])))
    response, _ = run(provider(server), request("claude-test", tools=[WEATHER]))
    assert response.tool_calls == [ToolCall(id="toolu_9", name="get_weather", arguments={},
                                            raw_arguments='{"city": "Par')]


def test_max_tokens_stop_reason(server):
    server.add(sse(anthropic_stream(text=["cut"], stop_reason="max_tokens", usage=(3, 4))))
    response, _ = run(provider(server), request("claude-test"))
    assert (response.finish_reason, response.usage) == ("length", Usage(3, 4))


def test_rate_limit_with_retry_after(server):
    server.add(json_reply(429, anthropic_error("rate_limit_error", "too many"), {"retry-after": "3"}))
    error = run_error(provider(server), request("claude-test"))
    assert (error.kind, error.status, error.retry_after_s) == ("rate_limit", 429, 3.0)
    assert "too many" in error.message
    assert len(server.requests) == 1


def test_status_errors_map_to_kinds(server):
    cases = [(500, "server"), (529, "server"), (401, "auth"), (403, "auth"), (400, "bad_request"),
             (413, "bad_request")]
    for status, _ in cases:
        server.add(json_reply(status, anthropic_error()))
    assert [(run_error(provider(server), request("claude-test")).kind) for _ in cases] == [k for _, k in cases]
    assert len(server.requests) == len(cases)


def test_error_event_inside_stream(server):
    events = anthropic_stream(text=["par"])[:4]
    events.append(_event("error", anthropic_error("overloaded_error", "Overloaded")))
    server.add(sse(events))
    error = run_error(provider(server), request("claude-test"))
    assert error.kind == "server" and error.retryable and "Overloaded" in error.message


def test_hanging_server_times_out(server):
    server.add(hang(30))
    started = time.monotonic()
    error = run_error(provider(server), request("claude-test", timeout_s=0.5))
    assert error.kind == "timeout"
    assert time.monotonic() - started < 5


def test_connection_refused():
    error = run_error(AnthropicProvider(api_key="k", base_url=closed_port_url()), request("claude-test"))
    assert error.kind == "connection"


def test_prompt_too_long_is_the_context_length_kind(server):
    server.add(json_reply(400, anthropic_error("invalid_request_error", "prompt is too long: 208954 tokens > "
                                                                        "200000 maximum")))
    error = run_error(provider(server), request("claude-test"))
    assert (error.kind, error.status, error.retryable) == ("context_length", 400, False)
