from __future__ import annotations

import asyncio
from typing import Any

from mas_core.llm_types import (
    Message,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
    ToolSchema,
)

WEATHER = ToolSchema(
    name="get_weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)

CONVERSATION = [
    Message(role="system", content="You are terse."),
    Message(role="user", content="Weather in Paris and Rome?"),
    Message(role="assistant", content="Checking.", tool_calls=[
        ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="call_2", name="get_weather", arguments={"city": "Rome"}),
    ]),
    Message(role="tool", content="sunny", tool_call_id="call_1", name="get_weather"),
    Message(role="tool", content="rain", tool_call_id="call_2", name="get_weather"),
]


def request(model: str, messages: list[Message] | None = None, **kwargs: Any) -> ModelRequest:
    return ModelRequest(model=model, messages=messages or [Message(role="system", content="Be brief."),
                                                           Message(role="user", content="Hi")], **kwargs)


def run(provider: Any, req: ModelRequest) -> tuple[ModelResponse, list[str]]:
    """Call ``provider.complete`` on a fresh loop; return the response and the chunks streamed."""
    chunks: list[str] = []

    async def go() -> ModelResponse:
        return await provider.complete(req, on_chunk=chunks.append)

    return asyncio.run(go()), chunks


def run_error(provider: Any, req: ModelRequest) -> ProviderError:
    async def go() -> None:
        await provider.complete(req)

    try:
        asyncio.run(go())
    except ProviderError as exc:
        return exc
    raise AssertionError("expected a ProviderError")
