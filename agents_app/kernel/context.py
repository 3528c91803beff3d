"""Context that fits the model: counting a request's tokens and planning how to shorten a history.

Plain Python. No tokenizer is downloaded at run time, so a request is
counted from its characters at a tokens-per-character ratio calibrated on
the ``prompt_tokens`` the provider reported for the session's previous call
(before any: :data:`DEFAULT_RATIO`, more than common tokenizers give for
English and code), times a safety margin.

A history is compacted by keeping its *head* (the system prompt and the task
with its execution context: everything before the first model turn), the last
turns, and one summary message in place of the turns in between. A turn is a
model turn with the tool results and notes that follow it, so a tool result
always stays with (or goes with) the call it answers.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Callable, Iterable

from mas_core import jsontext
from mas_core.llm_types import Message, ToolSchema

DEFAULT_RATIO = 0.3  # tokens per character before the provider has reported any count
MIN_RATIO, MAX_RATIO = 0.05, 1.0
SAFETY = 1.1  # estimates are this much above the calibrated count
MESSAGE_OVERHEAD_CHARS = 16  # role and framing of each message on the wire
SUMMARY_PREFIX = "[Summary of earlier work in this session]"
MAX_SUMMARY_CHARS = 8_000
TRIM_CALLS_LISTED = 30


@dataclass(frozen=True)
class Window:
    """A model's context window as a session uses it: compact above ``threshold`` of what is left once the
    answer's reserve is taken, down to ``target`` of it."""

    limit: int
    reserve: int = 0
    threshold: float = 0.8
    target: float = 0.5

    @property
    def budget(self) -> int:
        return max(1, self.limit - self.reserve)

    @property
    def threshold_tokens(self) -> int:
        return int(self.budget * self.threshold)

    @property
    def target_tokens(self) -> int:
        return int(self.budget * self.target)


def window_for(*, context_window: int | None, max_output_tokens: int | None, max_tokens: int | None = None,
               threshold: float = 0.8) -> Window | None:
    """The window of a model row (None when its window is unknown); the reserve for the answer is what the agent
    asks for (``max_tokens``), else the model's output limit, at most a quarter of the window."""
    if not context_window:
        return None
    reserve = min(max_tokens or max_output_tokens or 4_096, context_window // 4)
    return Window(limit=context_window, reserve=reserve, threshold=threshold)


def message_chars(message: Message) -> int:
    chars = len(message.content) + MESSAGE_OVERHEAD_CHARS
    for call in message.tool_calls:
        chars += len(call.id) + len(call.name) + len(call.raw_arguments if call.raw_arguments is not None
                                                     else json.dumps(call.arguments, ensure_ascii=False))
    return chars + len(message.tool_call_id or "") + len(message.name or "")


def tools_chars(tools: Iterable[ToolSchema]) -> int:
    return sum(len(t.name) + len(t.description) + len(json.dumps(t.parameters)) for t in tools)


def request_chars(messages: Iterable[Message], tools: Iterable[ToolSchema]) -> int:
    return sum(map(message_chars, messages)) + tools_chars(tools)


class Meter:
    """A request's characters and digest, figured per message once: a session's messages are not changed
    after they are appended (a compaction makes new ones), so each step measures only what it added."""

    def __init__(self) -> None:
        self.measured: list[tuple[Message, int, bytes]] = []  # message, its chars, digest of the prefix to it
        # The tools measured last and their characters: a session offers the same tool objects step after
        # step, and dumping every schema at each measure was half a step's kernel time.
        self.tools: tuple[list[ToolSchema], int] = ([], 0)

    def tools_chars(self, tools: list[ToolSchema]) -> int:
        known, chars = self.tools
        if len(known) != len(tools) or any(a is not b for a, b in zip(known, tools)):
            known, chars = list(tools), tools_chars(tools)
            self.tools = (known, chars)
        return chars

    def measure(self, messages: list[Message], tools: list[ToolSchema]) -> tuple[int, str]:
        """Characters (as :func:`request_chars` counts them) and a digest of the messages, in order, and of
        the tools' names."""
        same = 0
        for (known, _, _), message in zip(self.measured, messages):
            if known is not message:
                break
            same += 1
        del self.measured[same:]
        chain = self.measured[-1][2] if self.measured else b""
        total = sum(chars for _, chars, _ in self.measured)
        for message in messages[same:]:
            chars = message_chars(message)
            chain = hashlib.sha256(chain + jsontext.dumps(message.to_dict()).encode()).digest()
            self.measured.append((message, chars, chain))
            total += chars
        digest = hashlib.sha256(chain + jsontext.dumps([t.name for t in tools]).encode()).hexdigest()[:24]
        return total + self.tools_chars(tools), digest


def estimate_tokens(chars: int, ratio: float) -> int:
    return math.ceil(chars * (ratio or DEFAULT_RATIO) * SAFETY)


def calibrated(chars: int, prompt_tokens: int, ratio: float) -> float:
    """The ratio after a call of ``chars`` characters the provider counted as ``prompt_tokens`` (kept when it
    reported none). Rounded so it survives a checkpoint unchanged."""
    if chars <= 0 or prompt_tokens <= 0:
        return ratio
    return round(min(MAX_RATIO, max(MIN_RATIO, prompt_tokens / chars)), 6)


# -- compaction ----------------------------------------------------------------------------


@dataclass
class Plan:
    head: list[Message]  # system prompt, task, execution context: always kept
    previous: str  # the summary an earlier compaction wrote ("" for none)
    dropped: list[list[Message]]  # older turns, to summarise
    kept: list[list[Message]]  # the last turns, kept as they are

    @property
    def kept_messages(self) -> list[Message]:
        return [message for turn in self.kept for message in turn]


def is_summary(message: Message) -> bool:
    return message.role == "user" and message.content.startswith(SUMMARY_PREFIX)


def split_turns(messages: list[Message]) -> tuple[list[Message], str, list[list[Message]]]:
    """The head, the text of an earlier summary, and the turns (each starts with a model turn)."""
    head: list[Message] = []
    previous = ""
    turns: list[list[Message]] = []
    for message in messages:
        if message.role == "assistant":
            turns.append([message])
        elif turns:
            turns[-1].append(message)
        elif is_summary(message):
            previous = message.content[len(SUMMARY_PREFIX):].strip()
        else:
            head.append(message)
    return head, previous, turns


def plan_compaction(messages: list[Message], *, fits: Callable[[list[Message]], bool],
                    keep_turns: int = 4) -> Plan | None:
    """Which turns to summarise: all but the last ``keep_turns`` (fewer while head + kept does not ``fit``,
    at least one). None when there is nothing older than the last turn to compact."""
    head, previous, turns = split_turns(messages)
    if len(turns) < 2:
        return None
    keep = max(1, min(keep_turns, len(turns) - 1))
    summary_room = Message(role="user", content=SUMMARY_PREFIX + "\n" + "x" * 2_000)
    while keep > 1 and not fits(head + [summary_room] + [m for turn in turns[-keep:] for m in turn]):
        keep -= 1
    return Plan(head=head, previous=previous, dropped=turns[:-keep], kept=turns[-keep:])


def summary_message(text: str) -> Message:
    text = text.strip()
    if len(text) > MAX_SUMMARY_CHARS:
        text = text[:MAX_SUMMARY_CHARS] + "\n[summary cut]"
    return Message(role="user", content=f"{SUMMARY_PREFIX}\n{text}")


def compacted(plan: Plan, summary: str, kept: list[Message] | None = None) -> list[Message]:
    """The new history: head, the summary, the kept turns (``kept``: as rewritten, e.g. results moved)."""
    return [*plan.head, summary_message(summary), *(plan.kept_messages if kept is None else kept)]


def _call_text(message: Message) -> list[str]:
    return [f"{call.name}({(call.raw_arguments or json.dumps(call.arguments, ensure_ascii=False))[:120]})"
            for call in message.tool_calls]


def trim_summary(plan: Plan) -> str:
    """The deterministic stand-in for a written summary: what was dropped, by its tool calls."""
    calls = [text for turn in plan.dropped for message in turn for text in _call_text(message)]
    lines = []
    if plan.previous:
        lines += [plan.previous[:MAX_SUMMARY_CHARS // 2], ""]
    lines.append(f"{len(plan.dropped)} earlier turn(s) were removed to fit the model's context window "
                 f"(no summary of them could be written).")
    if calls:
        shown = calls[-TRIM_CALLS_LISTED:]
        more = len(calls) - len(shown)
        lines.append("Tool calls in them" + (f" (the last {len(shown)} of {len(calls)})" if more else "") + ":")
        lines += [f"- {text}" for text in shown]
    return "\n".join(lines)


def transcript(plan: Plan, *, max_chars: int = 48_000, per_message: int = 1_500) -> str:
    """The dropped turns as text for the summariser: each message cut to ``per_message`` characters, the
    whole to ``max_chars`` (its beginning and its end kept)."""
    parts = []
    for turn in plan.dropped:
        for message in turn:
            if message.role == "assistant":
                said = message.content[:per_message]
                parts.append("assistant: " + "; ".join(filter(None, [said, *_call_text(message)])))
            elif message.role == "tool":
                parts.append(f"result of {message.name or 'tool'}: {message.content[:per_message]}")
            else:
                parts.append(f"{message.role}: {message.content[:per_message]}")
    text = "\n".join(parts)
    if len(text) > max_chars:
        half = max_chars // 2
        text = text[:half] + "\n[…]\n" + text[-half:]
    return text
