"""Google's Gemini API through the official ``google-genai`` SDK, streaming
(``streamGenerateContent?alt=sse``), with function calling."""

from __future__ import annotations

import uuid

import google.auth.aio.credentials  # noqa: F401 — else imported by the first call, inside its timeout
import google.auth.aio.transport.sessions  # noqa: F401
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as gt

from .common import (
    PerLoop,
    StreamingProvider,
    error_from_status,
    guarded_http_client,
    other_error,
)
from mas_core.tls import tls
from mas_core.llm_types import (
    emit_chunk,
    ChunkCallback,
    Message,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
    ToolSchema,
    Usage,
    wire_call_ids,
)

FINISH = {"STOP": "stop", "MAX_TOKENS": "length"}


def to_wire(messages: list[Message]) -> tuple[str | None, list[gt.Content]]:
    """System instruction (kept apart) and the contents list, roles user/model."""
    system = [message.content for message in messages if message.role == "system" and message.content]
    # Tool results must name their function: find it from the call they answer.
    names = {call.id: call.name for message in messages for call in message.tool_calls}
    ids = wire_call_ids(messages)
    contents: list[gt.Content] = []

    def add(role: str, parts: list[gt.Part]) -> None:
        if not parts:
            return
        if contents and contents[-1].role == role:
            contents[-1].parts.extend(parts)  # type: ignore[union-attr]
        else:
            contents.append(gt.Content(role=role, parts=parts))

    for message in messages:
        if message.role == "system":
            continue
        if message.role == "tool":
            name = message.name or names.get(message.tool_call_id or "", "")
            add("user", [gt.Part(function_response=gt.FunctionResponse(
                id=ids.get(message.tool_call_id or "", message.tool_call_id), name=name, response={"result": message.content}))])
        elif message.role == "assistant":
            parts = [gt.Part(text=message.content)] if message.content else []
            parts += [gt.Part(function_call=gt.FunctionCall(id=ids[call.id], name=call.name, args=call.arguments))
                      for call in message.tool_calls]
            add("model", parts)
        else:
            add("user", [gt.Part(text=message.content)])
    return ("\n\n".join(system) or None), contents


def to_wire_tools(tools: list[ToolSchema]) -> list[gt.Tool]:
    if not tools:
        return []
    return [gt.Tool(function_declarations=[
        gt.FunctionDeclaration(name=tool.name, description=tool.description, parameters_json_schema=tool.parameters)
        for tool in tools
    ])]


def map_error(exc: BaseException) -> ProviderError:
    if isinstance(exc, genai_errors.APIError):
        headers = getattr(getattr(exc, "response", None), "headers", None)
        message = f"gemini: {exc.message or exc.status or exc.code}"
        if not exc.code:
            return ProviderError("server", message)
        return error_from_status(int(exc.code), message, headers)
    return other_error(exc, "gemini")


class GeminiProvider(StreamingProvider):
    """``generate_content_stream``; function calls arrive whole, one part each."""

    name = "gemini"
    map_error = staticmethod(map_error)

    def __init__(self, *, api_key: str, base_url: str | None = None, timeout_s: float = 120.0) -> None:
        self.base_url = base_url or None
        self.timeout_s = timeout_s
        self._clients = PerLoop(lambda: genai.Client(api_key=api_key, http_options=gt.HttpOptions(
            base_url=self.base_url, timeout=int(timeout_s * 1000),
            retry_options=gt.HttpRetryOptions(attempts=1),  # the kernel owns retries
            httpx_async_client=guarded_http_client(),
            client_args={"verify": tls()}, async_client_args={"verify": tls(), "ssl": tls()},  # else built per client
        )))

    def build_config(self, request: ModelRequest) -> tuple[list[gt.Content], gt.GenerateContentConfig]:
        system, contents = to_wire(request.messages)
        config = gt.GenerateContentConfig(
            system_instruction=system,
            tools=to_wire_tools(request.tools) or None,
            temperature=request.temperature,
            max_output_tokens=request.max_tokens,
            http_options=gt.HttpOptions(timeout=int(request.timeout_s * 1000)),
        )
        return contents, config

    async def _stream(self, client: genai.Client, request: ModelRequest,
                      on_chunk: ChunkCallback | None) -> ModelResponse:
        contents, config = self.build_config(request)
        stream = await client.aio.models.generate_content_stream(model=request.model, contents=contents,
                                                                 config=config)
        text: list[str] = []
        calls: list[ToolCall] = []
        usage = Usage()
        finish = "stop"
        model = request.model
        async for chunk in stream:
            model = chunk.model_version or model
            if chunk.usage_metadata is not None:
                # Cumulative in each chunk: the last one holds the totals.
                usage = Usage(prompt_tokens=chunk.usage_metadata.prompt_token_count or 0,
                              completion_tokens=(chunk.usage_metadata.candidates_token_count or 0)
                              + (chunk.usage_metadata.thoughts_token_count or 0))
            for candidate in (chunk.candidates or [])[:1]:
                for part in (candidate.content.parts if candidate.content else None) or []:
                    if part.function_call is not None:
                        call = part.function_call
                        call_id = call.id or f"call_{uuid.uuid4().hex[:16]}"
                        if isinstance(call.args, dict) or call.args is None:
                            calls.append(ToolCall(id=call_id, name=call.name or "", arguments=dict(call.args or {})))
                        else:
                            calls.append(ToolCall(id=call_id, name=call.name or "", arguments={},
                                                  raw_arguments=str(call.args)))
                    elif part.text and not part.thought:
                        text.append(part.text)
                        await emit_chunk(on_chunk, part.text)
                if candidate.finish_reason is not None:
                    reason = getattr(candidate.finish_reason, "value", str(candidate.finish_reason))
                    finish = FINISH.get(reason, "error" if reason not in ("FINISH_REASON_UNSPECIFIED",) else "stop")
        if calls:
            finish = "tool_calls"  # Gemini says STOP after function calls
        return ModelResponse(text="".join(text), tool_calls=calls, usage=usage, model=model, finish_reason=finish)
