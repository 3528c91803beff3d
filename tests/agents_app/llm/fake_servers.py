"""Real local HTTP servers that speak the OpenAI, Anthropic and Gemini wire
formats, scripted per test.

A :class:`FakeServer` answers each request with the next queued reply (SSE
stream, JSON error, or a hang) and records what it received, so tests can
assert the exact request bodies the SDKs sent. The ``*_stream`` builders
produce the event sequences each API sends, as the SDKs parse them.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    events: list[str] | None = None  # SSE: written one by one, flushed
    event_delay_s: float = 0.0
    hang_s: float = 0.0  # before the status line
    hang_after_events_s: float = 0.0  # after the events, before closing


def sse(events: list[str], *, event_delay_s: float = 0.0, hang_after_events_s: float = 0.0) -> Reply:
    return Reply(headers={"Content-Type": "text/event-stream"}, events=events, event_delay_s=event_delay_s,
                 hang_after_events_s=hang_after_events_s)


def json_reply(status: int, body: Any, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status=status, headers={"Content-Type": "application/json", **(headers or {})},
                 body=json.dumps(body).encode())


def hang(seconds: float) -> Reply:
    return Reply(hang_s=seconds)


class FakeServer:
    """A threaded HTTP server on 127.0.0.1 with a free port."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Recorded] = []
        # Called with each request before it is answered, on the server's thread (tests look at the world then).
        self.on_request: Callable[[Recorded], None] | None = None
        self.stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                url = urlsplit(self.path)
                recorded = Recorded(self.command, url.path, parse_qs(url.query),
                                    {k.lower(): v for k, v in self.headers.items()}, body)
                server.requests.append(recorded)
                if server.on_request is not None:
                    server.on_request(recorded)
                reply = server.replies.popleft() if server.replies else json_reply(
                    500, {"error": {"message": "fake server: no reply queued"}})
                self.answer(reply)

            def answer(self, reply: Reply) -> None:
                if reply.hang_s and server.stopping.wait(reply.hang_s):
                    return
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    if reply.events is None:
                        self.send_header("Content-Length", str(len(reply.body)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    if reply.events is None:
                        self.wfile.write(reply.body)
                        return
                    for event in reply.events:
                        self.wfile.write(event.encode())
                        self.wfile.flush()
                        if reply.event_delay_s:
                            time.sleep(reply.event_delay_s)
                    if reply.hang_after_events_s:
                        server.stopping.wait(reply.hang_after_events_s)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeouts): expected

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    def add(self, *replies: Reply) -> FakeServer:
        self.replies.extend(replies)
        return self

    def start(self) -> FakeServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def closed_port_url() -> str:
    """A URL where nothing listens: connection refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# --- OpenAI: /v1/chat/completions, ``data: <chunk>`` lines, ``data: [DONE]`` ---

def _openai_chunk(choices: list[dict[str, Any]], model: str, usage: dict[str, int] | None = None) -> str:
    chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1700000000, "model": model,
             "system_fingerprint": "fp_fake", "choices": choices}
    if usage is not None:
        chunk["usage"] = usage
    return f"data: {json.dumps(chunk)}\n\n"


def openai_stream(*, text: list[str] = (), tool_calls: list[tuple[str, str, list[str]]] = (),  # type: ignore[assignment]
                  usage: tuple[int, int] | None = (0, 0), finish: str | None = None,
                  model: str = "gpt-fake") -> list[str]:
    """Chunks as OpenAI streams them: role, content deltas, tool-call deltas
    (id and name first, then argument fragments), finish, usage chunk, [DONE]."""
    events = [_openai_chunk([{"index": 0, "delta": {"role": "assistant", "content": ""},
                              "logprobs": None, "finish_reason": None}], model)]
    for piece in text:
        events.append(_openai_chunk([{"index": 0, "delta": {"content": piece}, "logprobs": None,
                                      "finish_reason": None}], model))
    for index, (call_id, name, fragments) in enumerate(tool_calls):
        events.append(_openai_chunk([{"index": 0, "delta": {"tool_calls": [
            {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]},
            "logprobs": None, "finish_reason": None}], model))
        for fragment in fragments:
            events.append(_openai_chunk([{"index": 0, "delta": {"tool_calls": [
                {"index": index, "function": {"arguments": fragment}}]}, "logprobs": None,
                "finish_reason": None}], model))
    finish = finish or ("tool_calls" if tool_calls else "stop")
    events.append(_openai_chunk([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}], model))
    if usage is not None:
        events.append(_openai_chunk([], model, {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                                                "total_tokens": usage[0] + usage[1]}))
    events.append("data: [DONE]\n\n")
    return events


def openai_error(status: int, message: str = "fake error") -> dict[str, Any]:
    return {"error": {"message": message, "type": "fake", "param": None, "code": None}}


# --- Anthropic: /v1/messages, named SSE events ---

def _event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def anthropic_stream(*, text: list[str] = (), tool_calls: list[tuple[str, str, list[str]]] = (),  # type: ignore[assignment]
                     usage: tuple[int, int] = (0, 0), stop_reason: str | None = None,
                     model: str = "claude-fake") -> list[str]:
    """message_start, a text block of deltas, tool_use blocks of input_json
    deltas, message_delta (stop reason, cumulative usage), message_stop."""
    events = [_event("message_start", {"type": "message_start", "message": {
        "id": "msg_fake", "type": "message", "role": "assistant", "content": [], "model": model,
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": 1}}}),
        _event("ping", {"type": "ping"})]
    index = 0
    if text:
        events.append(_event("content_block_start", {"type": "content_block_start", "index": index,
                                                     "content_block": {"type": "text", "text": ""}}))
        for piece in text:
            events.append(_event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                         "delta": {"type": "text_delta", "text": piece}}))
        events.append(_event("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    for call_id, name, fragments in tool_calls:
        events.append(_event("content_block_start", {"type": "content_block_start", "index": index,
                                                     "content_block": {"type": "tool_use", "id": call_id,
                                                                       "name": name, "input": {}}}))
        for fragment in fragments:
            events.append(_event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                         "delta": {"type": "input_json_delta",
                                                                   "partial_json": fragment}}))
        events.append(_event("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    stop_reason = stop_reason or ("tool_use" if tool_calls else "end_turn")
    events.append(_event("message_delta", {"type": "message_delta",
                                           "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                                           "usage": {"output_tokens": usage[1]}}))
    events.append(_event("message_stop", {"type": "message_stop"}))
    return events


def anthropic_error(kind: str = "api_error", message: str = "fake error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


# --- Gemini: /v1beta/models/<model>:streamGenerateContent?alt=sse ---

def _gemini_chunk(parts: list[dict[str, Any]], *, finish: str | None, usage: dict[str, int] | None,
                  model: str) -> str:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": model, "responseId": "resp_fake"}
    if usage is not None:
        chunk["usageMetadata"] = usage
    return f"data: {json.dumps(chunk)}\r\n\r\n"


def gemini_stream(*, text: list[str] = (), function_calls: list[tuple[str | None, str, dict[str, Any]]] = (),  # type: ignore[assignment]
                  usage: tuple[int, int] = (0, 0), finish: str = "STOP", model: str = "gemini-fake") -> list[str]:
    """One chunk per text piece, function calls whole in the last chunk with
    the finish reason; usageMetadata in every chunk, totals in the last."""
    prompt, completion = usage
    events = []
    for i, piece in enumerate(text):
        events.append(_gemini_chunk([{"text": piece}], finish=None,
                                    usage={"promptTokenCount": prompt, "totalTokenCount": prompt + i},
                                    model=model))
    parts = []
    for call_id, name, args in function_calls:
        call: dict[str, Any] = {"name": name, "args": args}
        if call_id:
            call["id"] = call_id
        parts.append({"functionCall": call})
    events.append(_gemini_chunk(parts or [{"text": ""}], finish=finish, usage={
        "promptTokenCount": prompt, "candidatesTokenCount": completion, "totalTokenCount": prompt + completion},
        model=model))
    return events


def gemini_error(code: int, status: str, message: str = "fake error") -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}
