"""GeminiProvider against a local server speaking streamGenerateContent?alt=sse."""

from __future__ import annotations

import time
from decimal import Decimal

from agents_app.llm.gemini_provider import GeminiProvider
from agents_app.llm.pricing import Prices, usage_cost
from mas_core.llm_types import ToolCall, Usage

from .fake_servers import (
    closed_port_url,
    gemini_error,
    gemini_stream,
    hang,
    json_reply,
    sse,
)
from .helpers import CONVERSATION, WEATHER, request, run, run_error


def provider(server) -> GeminiProvider:
    return GeminiProvider(api_key="g-test", base_url=server.url)


def test_text_streams_in_order_with_usage_and_cost(server):
    server.add(sse(gemini_stream(text=["Ciao", ", ", "mondo"], usage=(30, 6)), event_delay_s=0.01))
    response, chunks = run(provider(server), request("gemini-test", temperature=0.1, max_tokens=50))

    assert chunks == ["Ciao", ", ", "mondo"]
    assert response.text == "Ciao, mondo"
    assert response.finish_reason == "stop"
    assert response.model == "gemini-fake"
    assert response.usage == Usage(prompt_tokens=30, completion_tokens=6)
    assert usage_cost(response.usage, Prices.of("0.10", "0.40")) == Decimal("0.00000540")

    [sent] = server.requests
    assert sent.path == "/v1beta/models/gemini-test:streamGenerateContent"
    assert sent.query == {"alt": ["sse"]}
    assert sent.headers["x-goog-api-key"] == "g-test"
    assert sent.body == {
        "contents": [{"role": "user", "parts": [{"text": "Hi"}]}],
        "systemInstruction": {"role": "user", "parts": [{"text": "Be brief."}]},
        "generationConfig": {"temperature": 0.1, "maxOutputTokens": 50},
    }


def test_function_calls_and_conversation_format(server):
    server.add(sse(gemini_stream(text=["Sure."], function_calls=[
        ("fc_1", "get_weather", {"city": "Paris"}),
        (None, "get_weather", {"city": "Rome", "days": [1, 2]}),
    ], usage=(77, 13))))
    response, chunks = run(provider(server), request("gemini-test", CONVERSATION, tools=[WEATHER]))

    assert chunks == ["Sure."]
    assert response.finish_reason == "tool_calls"
    first, second = response.tool_calls
    assert first == ToolCall(id="fc_1", name="get_weather", arguments={"city": "Paris"})
    assert (second.name, second.arguments, second.raw_arguments) == ("get_weather", {"city": "Rome", "days": [1, 2]}, None)
    assert second.id.startswith("call_") and second.id != first.id
    assert response.usage == Usage(77, 13)

    body = server.requests[0].body
    assert body["systemInstruction"] == {"role": "user", "parts": [{"text": "You are terse."}]}
    # The SDK sends this one field in snake_case; the API's JSON parser takes both spellings.
    assert body["tools"] == [{"functionDeclarations": [{
        "name": "get_weather", "description": "Weather for a city", "parameters_json_schema": WEATHER.parameters}]}]
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "Weather in Paris and Rome?"}]},
        {"role": "model", "parts": [
            {"text": "Checking."},
            {"functionCall": {"id": "call_1", "name": "get_weather", "args": {"city": "Paris"}}},
            {"functionCall": {"id": "call_2", "name": "get_weather", "args": {"city": "Rome"}}},
        ]},
        {"role": "user", "parts": [
            {"functionResponse": {"id": "call_1", "name": "get_weather", "response": {"result": "sunny"}}},
            {"functionResponse": {"id": "call_2", "name": "get_weather", "response": {"result": "rain"}}},
        ]},
    ]


def test_max_tokens_and_safety_finish(server):
    server.add(sse(gemini_stream(text=["cu"], finish="MAX_TOKENS")), sse(gemini_stream(text=[], finish="SAFETY")))
    assert run(provider(server), request("gemini-test"))[0].finish_reason == "length"
    assert run(provider(server), request("gemini-test"))[0].finish_reason == "error"


def test_rate_limit_with_retry_after(server):
    server.add(json_reply(429, gemini_error(429, "RESOURCE_EXHAUSTED", "quota"), {"Retry-After": "12"}))
    error = run_error(provider(server), request("gemini-test"))
    assert (error.kind, error.status, error.retry_after_s) == ("rate_limit", 429, 12.0)
    assert "quota" in error.message
    assert len(server.requests) == 1


def test_status_errors_map_to_kinds(server):
    cases = [(500, "INTERNAL", "server"), (503, "UNAVAILABLE", "server"), (401, "UNAUTHENTICATED", "auth"),
             (403, "PERMISSION_DENIED", "auth"), (400, "INVALID_ARGUMENT", "bad_request")]
    for code, status, _ in cases:
        server.add(json_reply(code, gemini_error(code, status)))
    assert [run_error(provider(server), request("gemini-test")).kind for _ in cases] == [k for *_, k in cases]
    assert len(server.requests) == len(cases)  # no SDK retries


def test_hanging_server_times_out(server):
    server.add(hang(30))
    started = time.monotonic()
    error = run_error(provider(server), request("gemini-test", timeout_s=0.5))
    assert error.kind == "timeout"
    assert time.monotonic() - started < 5


def test_connection_refused():
    error = run_error(GeminiProvider(api_key="k", base_url=closed_port_url()), request("gemini-test"))
    assert error.kind == "connection"


def test_input_token_count_over_the_maximum_is_the_context_length_kind(server):
    server.add(json_reply(400, gemini_error(400, "INVALID_ARGUMENT", "The input token count (1290571) exceeds the "
                                                                     "maximum number of tokens allowed (1048576).")))
    error = run_error(provider(server), request("gemini-test"))
    assert (error.kind, error.status, error.retryable) == ("context_length", 400, False)
