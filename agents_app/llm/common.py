"""Helpers shared by the provider modules: argument parsing,
HTTP status → :class:`ProviderError`, one SDK client per event loop."""

from __future__ import annotations

import asyncio
import email.utils
import encodings.idna  # noqa: F401 — as httpcore below
import json
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

# The transport's modules, which httpx would import at a provider's first request — inside the model call's timeout.
# This module is imported with a provider's SDK, when the first provider of its type is built (registry.py).
import httpcore  # noqa: F401

from mas_core.netpolicy import blocked_cause, private_url_transport
from mas_core.tls import tls

from mas_core.llm_types import ChunkCallback, ProviderError, ToolCall

tls()  # the providers' TLS context, built with the first provider too: not in its first call's timeout

T = TypeVar("T")


def parse_tool_call(call_id: str, name: str, raw: str | None) -> ToolCall:
    """A tool call from its streamed argument text.

    Arguments that are not a JSON object are kept verbatim in
    ``raw_arguments`` (with ``arguments={}``) so the kernel can tell the model
    what was wrong instead of failing the session.
    """
    text = raw or ""
    if not text.strip():
        return ToolCall(id=call_id, name=name, arguments={})
    try:
        value = json.loads(text)
    except ValueError:
        return ToolCall(id=call_id, name=name, arguments={}, raw_arguments=text)
    if not isinstance(value, dict):
        return ToolCall(id=call_id, name=name, arguments={}, raw_arguments=text)
    return ToolCall(id=call_id, name=name, arguments=value)


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds from a ``Retry-After`` (seconds or HTTP date) or ``retry-after-ms`` header."""
    if not headers:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(float(millis) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


# How each API says the request is longer than the model's window: OpenAI (and compatible servers) send
# code ``context_length_exceeded``; Anthropic "prompt is too long: N tokens > M maximum"; Gemini "The input
# token count (N) exceeds the maximum number of tokens allowed (M)"; vLLM/llama.cpp word it like OpenAI.
CONTEXT_LENGTH_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
CONTEXT_LENGTH_PHRASES = ("maximum context length", "prompt is too long", "exceeds the maximum number of tokens",
                          "context length exceeded", "exceeds the context window", "context_length_exceeded",
                          "input is too long")


def is_context_length(message: str, code: str | None = None) -> bool:
    """Whether an API's refusal says the request does not fit the model's context window."""
    if code and str(code) in CONTEXT_LENGTH_CODES:
        return True
    lowered = message.lower()
    return any(phrase in lowered for phrase in CONTEXT_LENGTH_PHRASES)


def error_from_status(status: int, message: str, headers: Mapping[str, str] | None = None, *,
                      code: str | None = None) -> ProviderError:
    """The kernel's error kind for an HTTP status (``code``: the API's own error code, when it sends one)."""
    if status in (400, 413, 422) and is_context_length(message, code):
        return ProviderError("context_length", message, status=status)
    if status == 429:
        return ProviderError("rate_limit", message, status=status, retry_after_s=parse_retry_after(headers))
    if status == 408:
        return ProviderError("timeout", message, status=status)
    if status >= 500:
        return ProviderError("server", message, status=status, retry_after_s=parse_retry_after(headers))
    if status in (401, 403):
        return ProviderError("auth", message, status=status)
    return ProviderError("bad_request", message, status=status)


def transport_error(exc: BaseException, provider: str) -> ProviderError | None:
    """Timeouts and connection failures raised below the SDKs (httpx, asyncio)."""
    import httpx

    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, httpx.TimeoutException)):
        return ProviderError("timeout", f"{provider}: the model did not answer in time")
    if isinstance(exc, (httpx.TransportError, ConnectionError, OSError)):
        return ProviderError("connection", f"{provider}: cannot reach the server ({exc.__class__.__name__}: {exc})")
    return None


class PerLoop(Generic[T]):
    """One object per running event loop.

    SDK clients hold connection pools bound to the loop that opened them; a
    Celery worker or a test may run several loops in turn.
    """

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._items: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = weakref.WeakKeyDictionary()

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        item = self._items.get(loop)
        if item is None:
            item = self._items[loop] = self._factory()
        return item

    def pop(self) -> T | None:
        try:
            return self._items.pop(asyncio.get_running_loop(), None)
        except RuntimeError:
            return None


def guarded_http_client(client_class: Callable[..., Any] | None = None) -> Any:
    """An httpx client for an SDK whose every request passes the address policy of provider URLs
    (MAS_PRIVATE_URL_ALLOW), checked when it connects, pinned to the address checked. Proxies from the
    environment are not used: a proxy would resolve the name itself."""
    import httpx

    return (client_class or httpx.AsyncClient)(transport=private_url_transport(httpx), trust_env=False)


def dumps_arguments(call: ToolCall) -> str:
    """A tool call's arguments as the model sent them (raw text when it was not JSON)."""
    if call.raw_arguments is not None:
        return call.raw_arguments
    return json.dumps(call.arguments, ensure_ascii=False)


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def other_error(exc: BaseException, provider: str) -> ProviderError:
    """The errors every SDK shares: transport failures, unreadable responses; anything else is re-raised."""
    mapped = transport_error(exc, provider)
    if mapped is not None:
        return mapped
    if isinstance(exc, ValueError):
        return ProviderError("malformed", f"{provider}: unreadable response ({exc})")
    raise exc


class StreamingProvider:
    """Base of the SDK providers: one bounded, streamed call; SDK errors mapped to ProviderError.

    Subclasses set ``_clients`` (a :class:`PerLoop` of SDK clients) and
    implement ``_stream`` and ``map_error``.
    """

    _clients: PerLoop
    # Set by the registry: the API key. Some APIs quote the key they refused in their error
    # message, and error messages become events, run errors and log lines.
    secrets: tuple[str, ...] = ()

    async def complete(self, request, *, on_chunk: ChunkCallback | None = None):
        client = self._clients.get()
        try:
            async with asyncio.timeout(request.timeout_s):
                return await self._stream(client, request, on_chunk)
        except ProviderError as error:
            raise self._redacted(error) from None
        except Exception as exc:
            blocked = blocked_cause(exc)
            if blocked is not None:  # the address policy refused the host: no retry will change that
                raise self._redacted(ProviderError("bad_request", f"{self.name}: {blocked}")) from None
            # Not chained: the SDK's exception carries the same unredacted message.
            raise self._redacted(self.map_error(exc)) from None

    def _redacted(self, error: ProviderError) -> ProviderError:
        for secret in self.secrets:
            if secret and len(secret) >= 8 and secret in error.message:
                error.message = error.message.replace(secret, "[redacted]")
                error.args = (error.message,)
        return error

    async def _stream(self, client, request, on_chunk):  # pragma: no cover - abstract
        raise TypeError(f"{type(self).__name__} must define _stream")

    @staticmethod
    def map_error(exc: BaseException) -> ProviderError:  # pragma: no cover - abstract
        raise exc
