"""Keeping a session's history inside its model's window, and big tool results out of it.

:class:`Compaction` is the kernel's compactor (``agents_app.kernel.loop.Compactor``)
for a session on a worker: it plans with :mod:`agents_app.kernel.context`,
moves the large tool results of the turns it keeps to workspace files, asks
the team's small tier for a summary of the turns it drops (a model call
accounted on the run under its budget, script key ``compactor`` for the
scripted provider) — or trims them deterministically when that fails — and
records a ``context_compacted`` event.

:func:`result_kept` is the one place every tool's result passes (built-in,
custom, MCP): above the team's ``tool_result_max_bytes`` it is stored as
``tool-results/<agent>-<call id>.txt`` and the model gets its head, its size
and the path to page through with ``vfs_read``.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Awaitable, Callable

from agents_app.execution.workspace_limit import WorkspaceFull
from agents_app.kernel import context
from agents_app.kernel.loop import SessionState
from mas_core.llm_types import Message, ProviderError, ToolSchema

logger = logging.getLogger(__name__)

KEEP_TURNS = 4  # the last turns a compaction keeps as they are (fewer when they alone pass the target)
MOVE_CHARS = 2_000  # a kept tool result longer than this is moved to a file by a compaction
HEAD_CHARS = 1_000  # what the model still sees of a moved or stored result
POINTER_MARK = "[result stored in the workspace:"
SUMMARY_MAX_TOKENS = 1_024
SUMMARY_SYSTEM = (
    "You compact the history of an AI agent's working session so it fits the model's context window. "
    "Write a concise summary of the turns below for the agent itself: what it was asked, what it did "
    "(tools called, files written, what they returned that matters), what it found and decided, and what "
    "is still open. Keep names, paths, numbers and identifiers exactly. Plain text, no preamble."
)

Write = Callable[[str, str], Awaitable[Any]]
Summarise = Callable[[SessionState, str], Awaitable[str]]  # (state, what to summarise) → the summary


def result_path(agent: str, call_id: str, scope: str = "") -> str:
    """Where a long result is kept: named by the agent, ``scope`` (which of the agent's sessions in the run:
    tool call ids are the kernel's, unique within a session only) and the call."""
    return f"tool-results/{agent}{re.sub(r'[^A-Za-z0-9_.-]', '_', f'{scope}-{call_id}')[:100]}.txt"


def pointer(content: str, *, path: str, head_chars: int = HEAD_CHARS) -> str:
    size = len(content.encode("utf-8"))
    return (f"{content[:head_chars]}\n{POINTER_MARK} {size} bytes ({len(content)} characters) in all at {path}; "
            f"the text above is its first {min(head_chars, len(content))} characters. Read the rest with "
            f"vfs_read, path {path!r}, offset and max_chars]")


async def result_kept(*, name: str, call_id: str, arguments: dict[str, Any], content: str, agent: str,
                      max_bytes: int, write: Write, scope: str = "") -> str:
    """A tool's result as the model gets it: as is up to ``max_bytes``, else its head and where the rest is."""
    size = len(content.encode("utf-8"))
    if size <= max_bytes:
        return content
    head = min(HEAD_CHARS * 4, max_bytes // 2)
    if name == "vfs_read":  # already a workspace file: point into it rather than copy it
        start = arguments.get("offset") or 0
        path = str(arguments.get("path", ""))
        return (f"{content[:head]}\n[{path}: {size} bytes from offset {start} are more than a tool result may "
                f"hold ({max_bytes} bytes); these are its first {head} characters. Read on with vfs_read, "
                f"path {path!r}, offset {start + head} and max_chars]")
    path = result_path(agent, call_id, scope)
    try:
        await write(path, content)
    except WorkspaceFull as full:
        return f"{content[:head]}\n[result cut: {size} bytes in all; it could not be stored ({full})]"
    return pointer(content, path=path, head_chars=head)


class Compaction:
    """The compactor of one session (see the module's docstring)."""

    def __init__(self, *, agent: str, window: context.Window | None, write: Write, summarise: Summarise,
                 emit: Callable[[str, dict[str, Any]], Awaitable[None]], keep_turns: int = KEEP_TURNS,
                 scope: str = "") -> None:
        self.agent, self.window, self.write, self.summarise, self.emit = agent, window, write, summarise, emit
        self.scope = scope
        self.keep_turns = keep_turns

    def tokens(self, state: SessionState, messages: list[Message], tools: list[ToolSchema]) -> int:
        return context.estimate_tokens(context.request_chars(messages, tools), state.token_ratio)

    async def __call__(self, state: SessionState, tools: list[ToolSchema], reason: str) -> bool:
        before = self.tokens(state, state.messages, tools)
        # Refused by the provider: aim below what was sent, whatever the window says.
        target = self.window.target_tokens if self.window is not None else before // 2
        if reason == "context_length":
            target = min(target, before // 2)

        def fits(messages: list[Message]) -> bool:
            return self.tokens(state, messages, tools) <= target

        plan = context.plan_compaction(state.messages, fits=fits, keep_turns=self.keep_turns)
        if plan is None:
            return False
        kept, moved = await self._move_results(plan.kept, last_too=not fits(plan.head + plan.kept_messages))
        how = "summary"
        try:
            task = "\n\n".join(m.content for m in plan.head if m.role == "user")[:4_000]
            summary = (await self.summarise(state, f"The agent's task:\n{task}\n\n"
                                            + (f"Summary so far:\n{plan.previous}\n\n" if plan.previous else "")
                                            + "Turns to summarise:\n" + context.transcript(plan))).strip()
            if not summary:
                raise ProviderError("malformed", "the summary was empty")
        except ProviderError as error:
            how = "trim"
            summary = context.trim_summary(plan)
            await self.emit("error", {"where": "compaction", "kind": error.kind, "message": str(error)})
        state.messages = context.compacted(plan, summary, kept)
        state.compactions += 1
        await self.emit("context_compacted", {
            "reason": reason, "how": how, "tokens_before": before,
            "tokens_after": self.tokens(state, state.messages, tools),
            "turns_removed": len(plan.dropped), "turns_kept": len(plan.kept), "files_moved": moved,
            "window": self.window.limit if self.window is not None else None,
        })
        return True

    async def _move_results(self, turns: list[list[Message]], *, last_too: bool) -> tuple[list[Message], list[str]]:
        """The kept turns with their long tool results (not the last turn's, unless even so they do not fit)
        replaced by pointers to files holding them."""
        kept: list[Message] = []
        moved: list[str] = []
        for index, turn in enumerate(turns):
            movable = last_too or index < len(turns) - 1
            for message in turn:
                if (movable and message.role == "tool" and len(message.content) > MOVE_CHARS
                        and POINTER_MARK not in message.content):
                    path = result_path(self.agent, message.tool_call_id or f"result-{len(moved)}", self.scope)
                    try:
                        await self.write(path, message.content)
                    except WorkspaceFull:
                        kept.append(message)
                        continue
                    moved.append(path)
                    message = Message(role="tool", content=pointer(message.content, path=path),
                                      tool_call_id=message.tool_call_id, name=message.name)
                kept.append(message)
        return kept, moved
