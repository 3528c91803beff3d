"""The scripted provider: deterministic model turns for tests, demos and replay.

A script maps an agent slug to its list of turns::

    {"researcher": [
        {"tool_calls": [{"name": "vfs_write", "arguments": {"path": "a.md", "content": "hi"}}]},
        {"text": "done", "latency_ms": 200, "usage": {"prompt_tokens": 10, "completion_tokens": 2},
         "expect": ["written", {"regex": "version \\d+"}]},
        {"error": "rate_limit"},
    ]}

``expect`` makes a turn check what it is sent: each substring (or
``{"regex": …}``) must occur in what the request added since the agent's
previous turn — the results of all its tool calls, or on a session's first
turn everything: the system prompt and the task. A turn whose expectation is not met fails the session, naming the turn
and the text it expected.

The key ``"*"`` serves agents the script does not name; the key ``"compactor"`` gives the summaries a
session asks for when it compacts its history (agents_app.execution.compaction), the key ``"guardrail"`` the
verdicts its llm_judge guardrails ask for (agents_app.execution.guardrail_calls). The provider keeps
no position of its own: a :class:`ScriptCursor` says which turn comes next,
and the kernel stores it with the session so a replaced worker resumes at the
same turn.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any, Protocol

import regex

from mas_core.llm_types import (
    emit_chunk,
    ChunkCallback,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
    Usage,
)

ERRORS: dict[str, tuple[str, int | None, str]] = {
    "rate_limit": ("rate_limit", 429, "scripted rate limit"),
    "server": ("server", 500, "scripted server error"),
    "timeout": ("timeout", None, "scripted timeout"),
    "connection": ("connection", None, "scripted connection failure"),
    "auth": ("auth", 401, "scripted authentication failure"),
    "bad_request": ("bad_request", 400, "scripted bad request"),
    "malformed": ("malformed", None, "scripted malformed response"),
    "context_length": ("context_length", 400, "scripted context length exceeded"),
}
TURN_KEYS = {"text", "tool_calls", "error", "latency_ms", "usage", "retry_after_s", "expect"}
USAGE_KEYS = ("prompt_tokens", "completion_tokens")
# Bounds of a script's numbers. Token counts are added to the run's bigint
# counters and priced into numeric(14, 6) costs: ten million per turn is more
# than any model's window and keeps every sum storable. A turn may not take
# longer than the longest session timeout an agent can declare (a day); the
# run checks each agent's own timeout when it starts (``script_check_latency``).
MAX_TURN_TOKENS = 10_000_000
MAX_LATENCY_MS = 86_400_000
MAX_RETRY_AFTER_S = 3_600
MAX_TOOL_CALLS_PER_TURN = 128
MAX_EXPECTATIONS = 16
MAX_EXPECT_CHARS = 500
REGEX_TIMEOUT_S = 0.5


class ScriptCursor(Protocol):
    """Where each agent is in its script: persisted by the caller."""

    def get(self, agent: str) -> int: ...

    def set(self, agent: str, position: int) -> None: ...

    def advance(self, agent: str) -> int: ...


class MemoryCursor:
    """A cursor over a plain dict (agent → next turn index).

    Pass the dict stored with the session (``MemoryCursor(session_state)``)
    and save ``cursor.positions`` at each checkpoint.
    """

    def __init__(self, positions: dict[str, int] | None = None) -> None:
        self.positions: dict[str, int] = positions if positions is not None else {}

    def get(self, agent: str) -> int:
        return int(self.positions.get(agent, 0))

    def set(self, agent: str, position: int) -> None:
        self.positions[agent] = int(position)

    def advance(self, agent: str) -> int:
        self.set(agent, self.get(agent) + 1)
        return self.get(agent)


def validate_script(script: Any) -> dict[str, list[dict[str, Any]]]:
    """Check a script's shape; raise ``ValueError`` naming the first bad turn."""
    if not isinstance(script, Mapping):
        raise ValueError("a script maps agent slugs to lists of turns")
    for agent, turns in script.items():
        if not isinstance(turns, list):
            raise ValueError(f"script for agent {agent}: expected a list of turns")
        for index, turn in enumerate(turns):
            where = f"script for agent {agent}, turn {index}"
            if not isinstance(turn, Mapping):
                raise ValueError(f"{where}: expected an object")
            unknown = set(turn) - TURN_KEYS
            if unknown:
                raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
            if not ({"text", "tool_calls", "error"} & set(turn)):
                raise ValueError(f"{where}: needs text, tool_calls or error")
            if "error" in turn and turn["error"] not in ERRORS:
                raise ValueError(f"{where}: error must be one of {', '.join(ERRORS)}")
            if "text" in turn and turn["text"] is not None and not isinstance(turn["text"], str):
                raise ValueError(f"{where}: text must be a string")
            calls = turn.get("tool_calls") or []
            if not isinstance(calls, list) or len(calls) > MAX_TOOL_CALLS_PER_TURN:
                raise ValueError(f"{where}: tool_calls must be a list of at most {MAX_TOOL_CALLS_PER_TURN} calls")
            for call in calls:
                if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
                    raise ValueError(f"{where}: each tool call needs a name")
                if not isinstance(call.get("arguments", {}), (Mapping, str)):
                    raise ValueError(f"{where}: tool call arguments must be an object")
            _check_expect(turn.get("expect"), where)
            _check_number(turn, "latency_ms", MAX_LATENCY_MS, where)
            _check_number(turn, "retry_after_s", MAX_RETRY_AFTER_S, where)
            usage = turn.get("usage")
            if usage is not None:
                if not isinstance(usage, Mapping) or set(usage) - set(USAGE_KEYS):
                    raise ValueError(f"{where}: usage is an object with {' and '.join(USAGE_KEYS)} only")
                for key in USAGE_KEYS:
                    _check_number(usage, key, MAX_TURN_TOKENS, where, prefix="usage.", integer=True)
    return {agent: list(turns) for agent, turns in script.items()}


def _expectations(expect: Any) -> list[Any]:
    return list(expect) if isinstance(expect, list) else [expect]


def _check_expect(expect: Any, where: str) -> None:
    if expect is None:
        return
    items = _expectations(expect)
    if not items or len(items) > MAX_EXPECTATIONS:
        raise ValueError(f"{where}: expect holds 1 to {MAX_EXPECTATIONS} expectations")
    for item in items:
        pattern = item.get("regex") if isinstance(item, Mapping) and set(item) == {"regex"} else None
        text = pattern if pattern is not None else item
        if not isinstance(text, str) or not 0 < len(text) <= MAX_EXPECT_CHARS:
            raise ValueError(f"{where}: each expectation is a text or {{\"regex\": text}} of 1 to "
                             f"{MAX_EXPECT_CHARS} characters")
        if pattern is not None:
            try:
                regex.compile(pattern)
            except regex.error as error:
                raise ValueError(f"{where}: expect regex {pattern!r}: {error}") from None


def unmet_expectation(expect: Any, text: str) -> str | None:
    """The first expectation ``text`` does not meet, described, or None."""
    for item in _expectations(expect):
        if isinstance(item, Mapping):
            try:
                found = regex.search(item["regex"], text, timeout=REGEX_TIMEOUT_S) is not None
            except TimeoutError:
                found = False
            if not found:
                return f"a match for the regex {item['regex']!r}"
        elif item not in text:
            return repr(item)
    return None


def _check_number(data: Mapping[str, Any], key: str, maximum: int, where: str, *, prefix: str = "",
                  integer: bool = False) -> None:
    value = data.get(key)
    if value is None:
        return
    number_ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not number_ok or not 0 <= value <= maximum:
        kind = "an integer" if integer else "a number"
        raise ValueError(f"{where}: {prefix}{key} must be {kind} from 0 to {maximum}, not {value!r}"[:300])


def script_check_latency(script: Mapping[str, Any], timeouts: Mapping[str, float]) -> None:
    """Refuse a turn slower than its agent's session timeout (``timeouts``: agent slug → seconds).

    ``timeouts["*"]`` is the limit of the turns the script gives every other agent.
    """
    for agent, turns in script.items():
        limit = timeouts.get(agent)
        if limit is None:
            continue
        for index, turn in enumerate(turns):
            latency = turn.get("latency_ms") or 0
            if latency > limit * 1000:
                raise ValueError(f"script for agent {agent}, turn {index}: latency_ms {latency:g} is longer than "
                                 f"the session timeout of {limit:g} s")


def new_input(request: ModelRequest) -> str:
    """What the request added since the agent's previous turn: its tool results, or at first all of it
    (the system prompt and the task)."""
    messages = list(request.messages)
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "assistant":
            return "\n".join(m.content for m in messages[index + 1:])
    return "\n".join(m.content for m in messages)


def estimate_tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4) if text else 0


def split_chunks(text: str, pieces: int = 4) -> list[str]:
    """Split text into a few chunks at spaces; joined, they equal ``text``."""
    if len(text) <= 8:
        return [text] if text else []
    size = max(1, -(-len(text) // pieces))
    chunks, start = [], 0
    while start < len(text):
        end = min(len(text), start + size)
        space = text.find(" ", end)
        end = len(text) if space == -1 or space - end > size else space + 1
        chunks.append(text[start:end])
        start = end
    return chunks


class ScriptedProvider:
    """Plays the turns of a script, one per :meth:`complete`.

    ``replay``: an agent whose turns are all played starts them again (the demo recording, which stands in for
    a model however many sessions an agent has in a run — a workflow may call it in two steps); a run's own
    script is played once, and a turn past its end is an error.
    """

    name = "scripted"

    def __init__(self, script: Mapping[str, Any], cursor: ScriptCursor | None = None, *, replay: bool = False) -> None:
        self.script = validate_script(script)
        self.cursor: ScriptCursor = cursor if cursor is not None else MemoryCursor()
        self.replay = replay

    def _turns(self, agent: str) -> list[dict[str, Any]]:
        if agent in self.script:
            return self.script[agent]
        if "*" in self.script:
            return self.script["*"]
        raise ProviderError("bad_request", f"script has no turns for agent {agent or '(none)'}")

    async def complete(self, request: ModelRequest, *, on_chunk: ChunkCallback | None = None) -> ModelResponse:
        agent = request.agent
        turns = self._turns(agent)
        position = self.cursor.get(agent)
        if position >= len(turns) and self.replay and turns:
            position = 0
            self.cursor.set(agent, 0)
        if position >= len(turns):
            raise ProviderError(
                "bad_request", f"script for agent {agent} has no turn {position} (it has {len(turns)})"
            )
        turn = turns[position]
        latency = float(turn.get("latency_ms") or 0) / 1000
        if latency > request.timeout_s:
            await asyncio.sleep(request.timeout_s)
            self.cursor.advance(agent)
            raise ProviderError("timeout", f"scripted turn {position} of {agent} took longer than {request.timeout_s}s")
        if latency:
            await asyncio.sleep(latency)
        # The turn is consumed whatever it holds, errors included: a retry
        # gets the next turn, as a retried call to a real model would.
        self.cursor.advance(agent)
        if "expect" in turn:
            received = new_input(request)
            missing = unmet_expectation(turn["expect"], received)
            if missing is not None:
                shown = received if len(received) <= 300 else received[:300] + "…"
                raise ProviderError("expectation", f"script for agent {agent}, turn {position} expected {missing} "
                                                   f"in what it was sent, which was: {shown!r}")

        if "error" in turn:
            kind, status, message = ERRORS[turn["error"]]
            raise ProviderError(kind, f"{message} (agent {agent}, turn {position})", status=status,  # type: ignore[arg-type]
                                retry_after_s=turn.get("retry_after_s"))

        text = str(turn.get("text") or "")
        for chunk in split_chunks(text):
            await emit_chunk(on_chunk, chunk)
        calls = []
        for index, call in enumerate(turn.get("tool_calls") or []):
            arguments = call.get("arguments", {})
            call_id = f"call_{agent}_{position}_{index}"
            if isinstance(arguments, str):  # a recorded malformed call, replayed as sent
                calls.append(ToolCall(id=call_id, name=call["name"], arguments={}, raw_arguments=arguments))
            else:
                calls.append(ToolCall(id=call_id, name=call["name"], arguments=dict(arguments)))

        usage_data = turn.get("usage")
        if usage_data:
            usage = Usage(prompt_tokens=int(usage_data.get("prompt_tokens", 0)),
                          completion_tokens=int(usage_data.get("completion_tokens", 0)))
        else:
            prompt = "".join(message.content for message in request.messages)
            spoken = text + "".join(json.dumps(call.to_dict(), sort_keys=True) for call in calls)
            usage = Usage(prompt_tokens=estimate_tokens(prompt), completion_tokens=estimate_tokens(spoken))
        return ModelResponse(text=text, tool_calls=calls, usage=usage, model=request.model or "scripted",
                             finish_reason="tool_calls" if calls else "stop")
