"""Anthropic's Messages API through the official ``anthropic`` SDK, streaming,
with tool use."""

from __future__ import annotations

import json
from typing import Any

import anthropic

from .common import (
    PerLoop,
    StreamingProvider,
    as_dict,
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

FINISH = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length"}
# The Messages API requires max_tokens; this is the budget when the agent sets none.
DEFAULT_MAX_TOKENS = 4096
STREAM_ERROR_KINDS = {"rate_limit_error": "rate_limit", "overloaded_error": "server", "api_error": "server",
                      "authentication_error": "auth", "permission_error": "auth",
                      "invalid_request_error": "bad_request", "timeout_error": "timeout"}


def to_wire(messages: list[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """System text (Anthropic takes it apart) and the alternating message list."""
    system = [message.content for message in messages if message.role == "system" and message.content]
    wire: list[dict[str, Any]] = []
    ids = wire_call_ids(messages)

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        # Consecutive turns of one role become one message: several tool
        # results answer one assistant turn together.
        if wire and wire[-1]["role"] == role:
            wire[-1]["content"].extend(blocks)
        else:
            wire.append({"role": role, "content": blocks})

    for message in messages:
        if message.role == "system":
            continue
        if message.role == "tool":
            call_id = message.tool_call_id or ""
            add("user", [{"type": "tool_result", "tool_use_id": ids.get(call_id, call_id),
                          "content": message.content}])
        elif message.role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
            for call in message.tool_calls:
                # A malformed call is sent back as {} — the tool result explains.
                blocks.append({"type": "tool_use", "id": ids[call.id], "name": call.name, "input": call.arguments})
            add("assistant", blocks)
        else:
            add("user", [{"type": "text", "text": message.content}])
    return ("\n\n".join(system) or None), wire


def to_wire_tools(tools: list[ToolSchema]) -> list[dict[str, Any]]:
    return [{"name": tool.name, "description": tool.description, "input_schema": tool.parameters} for tool in tools]


def map_error(exc: BaseException) -> ProviderError:
    if isinstance(exc, anthropic.APITimeoutError):
        return ProviderError("timeout", "anthropic: the model did not answer in time")
    if isinstance(exc, anthropic.APIConnectionError):
        return ProviderError("connection", f"anthropic: cannot reach the server ({exc.__cause__ or exc})")
    if isinstance(exc, anthropic.APIStatusError):
        if exc.status_code >= 400:
            return error_from_status(exc.status_code, f"anthropic: {exc.message}", exc.response.headers)
        # An ``event: error`` inside a 200 stream: the body names the kind.
        error_type = as_dict(as_dict(exc.body).get("error")).get("type", "")
        return ProviderError(STREAM_ERROR_KINDS.get(error_type, "server"), f"anthropic: {exc.message}")  # type: ignore[arg-type]
    if isinstance(exc, anthropic.APIError):
        return ProviderError("server", f"anthropic: {exc.message}")
    return other_error(exc, "anthropic")


class AnthropicProvider(StreamingProvider):
    """Messages API with ``stream=True``; text and tool-use blocks assembled from deltas."""

    name = "anthropic"
    map_error = staticmethod(map_error)

    def __init__(self, *, api_key: str, base_url: str | None = None, timeout_s: float = 120.0) -> None:
        self.base_url = base_url or None
        self._clients = PerLoop(lambda: anthropic.AsyncAnthropic(
            api_key=api_key, base_url=self.base_url, max_retries=0, timeout=timeout_s,
            http_client=guarded_http_client(anthropic.DefaultAsyncHttpxClient)))

    def build_params(self, request: ModelRequest) -> dict[str, Any]:
        system, messages = to_wire(request.messages)
        params: dict[str, Any] = {
            "model": request.model,
            "messages": messages,
            "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
            "stream": True,
        }
        if system:
            params["system"] = system
        if request.tools:
            params["tools"] = to_wire_tools(request.tools)
        if request.temperature is not None:
            params["temperature"] = request.temperature
        return params

    async def _stream(self, client: anthropic.AsyncAnthropic, request: ModelRequest,
                      on_chunk: ChunkCallback | None) -> ModelResponse:
        stream = await client.messages.create(**self.build_params(request), timeout=request.timeout_s)
        text: list[str] = []
        blocks: dict[int, dict[str, Any]] = {}
        prompt_tokens = completion_tokens = 0
        finish = "stop"
        model = request.model
        async with stream:
            async for event in stream:
                if event.type == "message_start":
                    model = event.message.model or model
                    usage = event.message.usage
                    prompt_tokens = (usage.input_tokens or 0) + (usage.cache_read_input_tokens or 0) \
                        + (usage.cache_creation_input_tokens or 0)
                    completion_tokens = usage.output_tokens or 0
                elif event.type == "content_block_start":
                    block = event.content_block
                    if block.type == "tool_use":
                        initial = block.input if isinstance(block.input, dict) and block.input else None
                        blocks[event.index] = {"id": block.id, "name": block.name, "json": [],
                                               "initial": initial}
                    elif block.type == "text" and block.text:
                        text.append(block.text)
                        await emit_chunk(on_chunk, block.text)
                elif event.type == "content_block_delta":
                    delta = event.delta
                    if delta.type == "text_delta":
                        text.append(delta.text)
                        await emit_chunk(on_chunk, delta.text)
                    elif delta.type == "input_json_delta" and event.index in blocks:
                        blocks[event.index]["json"].append(delta.partial_json)
                elif event.type == "message_delta":
                    if event.delta.stop_reason:
                        finish = FINISH.get(event.delta.stop_reason, "stop")
                    # message_delta usage is cumulative.
                    completion_tokens = event.usage.output_tokens or completion_tokens
                    if getattr(event.usage, "input_tokens", None):
                        prompt_tokens = event.usage.input_tokens + (event.usage.cache_read_input_tokens or 0) \
                            + (event.usage.cache_creation_input_tokens or 0)
        tool_calls = []
        for _, block in sorted(blocks.items()):
            raw = "".join(block["json"])
            if not raw and block["initial"] is not None:
                raw = json.dumps(block["initial"])
            tool_calls.append(parse_tool_call(block["id"], block["name"], raw))
        if tool_calls and finish == "stop":
            finish = "tool_calls"
        return ModelResponse(text="".join(text), tool_calls=tool_calls,
                             usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens),
                             model=model, finish_reason=finish)
