"""OpenAI and every OpenAI-compatible server (Ollama, vLLM, llama.cpp, OpenRouter)
through the official ``openai`` SDK, streaming, with tool calls."""

from __future__ import annotations

from typing import Any

import openai
import openai.resources.chat  # noqa: F401 — else imported by the first call (~0.5 s), inside its timeout

from .common import (
    PerLoop,
    StreamingProvider,
    dumps_arguments,
    error_from_status,
    guarded_http_client,
    other_error,
    parse_tool_call,
)
from mas_core.llm_types import (
    emit_chunk,
    ChunkCallback,
    Message,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolSchema,
    Usage,
    wire_call_ids,
)

FINISH = {"stop": "stop", "tool_calls": "tool_calls", "function_call": "tool_calls", "length": "length"}


def to_wire_messages(messages: list[Message]) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    ids = wire_call_ids(messages)
    for message in messages:
        if message.role == "tool":
            call_id = message.tool_call_id or ""
            wire.append({"role": "tool", "tool_call_id": ids.get(call_id, call_id), "content": message.content})
        elif message.role == "assistant":
            item: dict[str, Any] = {"role": "assistant", "content": message.content or None}
            if message.tool_calls:
                item["tool_calls"] = [
                    {"id": ids[call.id], "type": "function",
                     "function": {"name": call.name, "arguments": dumps_arguments(call)}}
                    for call in message.tool_calls
                ]
            wire.append(item)
        else:
            wire.append({"role": message.role, "content": message.content})
    return wire


def to_wire_tools(tools: list[ToolSchema]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": tool.name, "description": tool.description,
                                              "parameters": tool.parameters}} for tool in tools]


def map_error(exc: BaseException) -> ProviderError:
    # APITimeoutError subclasses APIConnectionError: test it first.
    if isinstance(exc, openai.APITimeoutError):
        return ProviderError("timeout", "openai: the model did not answer in time")
    if isinstance(exc, openai.APIConnectionError):
        return ProviderError("connection", f"openai: cannot reach the server ({exc.__cause__ or exc})")
    if isinstance(exc, openai.APIStatusError):
        return error_from_status(exc.status_code, f"openai: {exc.message}", exc.response.headers,
                                 code=getattr(exc, "code", None))
    if isinstance(exc, openai.APIError):  # an error event inside the stream
        return ProviderError("server", f"openai: {exc.message}")
    return other_error(exc, "openai")


class OpenAIProvider(StreamingProvider):
    """Chat Completions with ``stream=True`` and usage in the last chunk."""

    name = "openai"
    map_error = staticmethod(map_error)

    def __init__(self, *, api_key: str, base_url: str | None = None, timeout_s: float = 120.0) -> None:
        self.base_url = base_url or None
        self._clients = PerLoop(lambda: openai.AsyncOpenAI(
            api_key=api_key, base_url=self.base_url, max_retries=0, timeout=timeout_s,
            http_client=guarded_http_client(openai.DefaultAsyncHttpxClient)))

    def build_params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": request.model,
            "messages": to_wire_messages(request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            params["tools"] = to_wire_tools(request.tools)
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.max_tokens is not None:
            params["max_tokens"] = request.max_tokens
        return params

    async def _stream(self, client: openai.AsyncOpenAI, request: ModelRequest,
                      on_chunk: ChunkCallback | None) -> ModelResponse:
        stream = await client.chat.completions.create(**self.build_params(request),
                                                      timeout=request.timeout_s)
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage = Usage()
        finish = "stop"
        model = request.model
        async with stream:
            async for chunk in stream:
                model = chunk.model or model
                if chunk.usage is not None:
                    usage = Usage(prompt_tokens=chunk.usage.prompt_tokens or 0,
                                  completion_tokens=chunk.usage.completion_tokens or 0)
                for choice in chunk.choices:
                    delta = choice.delta
                    if delta is not None and delta.content:
                        text.append(delta.content)
                        await emit_chunk(on_chunk, delta.content)
                    for part in (delta.tool_calls if delta is not None else None) or []:
                        call = calls.setdefault(part.index, {"id": "", "name": "", "arguments": []})
                        if part.id:
                            call["id"] = part.id
                        if part.function is not None:
                            # Sent once by OpenAI; some compatible servers repeat it.
                            if part.function.name and not call["name"]:
                                call["name"] = part.function.name
                            if part.function.arguments:
                                call["arguments"].append(part.function.arguments)
                    if choice.finish_reason:
                        finish = FINISH.get(choice.finish_reason, "stop")
        tool_calls = [
            # Some compatible servers send no id: "" (the kernel's own id goes back to them instead).
            parse_tool_call(call["id"], call["name"], "".join(call["arguments"]))
            for _, call in sorted(calls.items())
        ]
        if tool_calls and finish == "stop":
            finish = "tool_calls"  # some compatible servers say "stop" after tool calls
        return ModelResponse(text="".join(text), tool_calls=tool_calls, usage=usage, model=model,
                             finish_reason=finish)
