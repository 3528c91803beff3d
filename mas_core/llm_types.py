"""What the kernel and every model provider exchange: plain data, no SDK types.

A provider turns a :class:`ModelRequest` into a :class:`ModelResponse`
(streaming text through a callback as it arrives) or raises
:class:`ProviderError` with a kind the kernel can act on.
"""

from __future__ import annotations

import inspect

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Literal, Protocol

Role = Literal["system", "user", "assistant", "tool"]


@dataclass
class ToolCall:
    # A provider's answer carries the provider's id here; the kernel loop replaces it with its own (unique in
    # the session: approvals, children, tool workers, events and files are keyed by it) and keeps the
    # provider's in ``provider_id``, only to send the call and its result back in the provider's terms.
    id: str
    name: str
    # Parsed JSON arguments; when the model sent something that is not a JSON
    # object, ``arguments`` is {} and ``raw_arguments`` holds what it sent.
    arguments: dict[str, Any]
    raw_arguments: str | None = None
    provider_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = {"id": self.id, "name": self.name, "arguments": self.arguments}
        if self.raw_arguments is not None:
            data["raw_arguments"] = self.raw_arguments
        if self.provider_id:
            data["provider_id"] = self.provider_id
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ToolCall":
        return cls(id=data["id"], name=data["name"], arguments=data.get("arguments") or {},
                   raw_arguments=data.get("raw_arguments"), provider_id=data.get("provider_id") or "")


def wire_call_ids(messages: list["Message"]) -> dict[str, str]:
    """{kernel id: the id to send the provider} for every tool call in ``messages``: the provider's own id,
    unless it sent none or repeated one within a turn (then the kernel's, unique in the session)."""
    ids: dict[str, str] = {}
    for message in messages:
        seen: set[str] = set()
        for call in message.tool_calls:
            wire = call.provider_id if call.provider_id and call.provider_id not in seen else call.id
            seen.add(wire)
            ids[call.id] = wire
    return ids


@dataclass
class Message:
    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)  # assistant turns
    tool_call_id: str | None = None  # tool results
    name: str | None = None  # tool results: the tool's name

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            data["name"] = self.name
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Message":
        return cls(
            role=data["role"],
            content=data.get("content", ""),
            tool_calls=[ToolCall.from_dict(call) for call in data.get("tool_calls", [])],
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
        )


@dataclass(frozen=True)
class ToolSchema:
    """A tool as offered to a model: name, description, JSON schema of its parameters."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class ModelRequest:
    model: str  # the provider's model name, e.g. "gpt-4.1-mini"
    messages: list[Message]  # the first may be the system prompt
    tools: list[ToolSchema] = field(default_factory=list)
    temperature: float | None = None
    max_tokens: int | None = None
    agent: str = ""  # the agent's slug: the scripted provider's script key
    timeout_s: float = 120.0


@dataclass
class ModelResponse:
    text: str
    tool_calls: list[ToolCall]
    usage: Usage
    model: str
    finish_reason: str = "stop"  # stop | tool_calls | length | error
    cached: bool = False  # a stored answer replayed (memory_app.cache): no model was called


ProviderErrorKind = Literal["rate_limit", "server", "timeout", "auth", "bad_request", "malformed", "connection",
                            "expectation",  # a scripted turn was not sent what it expected
                            "context_length"]  # the request is longer than the model's context window


class ProviderError(Exception):
    """A model call that failed; ``retryable`` says whether a retry may help."""

    RETRYABLE = frozenset({"rate_limit", "server", "timeout", "connection"})

    def __init__(self, kind: ProviderErrorKind, message: str, *, status: int | None = None,
                 retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.status, self.retry_after_s = kind, message, status, retry_after_s

    @property
    def retryable(self) -> bool:
        return self.kind in self.RETRYABLE

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}" + (f" (HTTP {self.status})" if self.status else "")


ChunkCallback = Callable[[str], Awaitable[None] | None]


class Provider(Protocol):
    """One model provider. Implementations live one per module in this package."""

    name: str

    async def complete(self, request: ModelRequest, *, on_chunk: ChunkCallback | None = None) -> ModelResponse:
        """Call the model once; stream text to ``on_chunk`` as it arrives."""
        ...


async def emit_chunk(on_chunk: ChunkCallback | None, text: str) -> None:
    """Deliver one text chunk to a sync or async callback."""
    if on_chunk is None or not text:
        return
    result = on_chunk(text)
    if inspect.isawaitable(result):
        await result
