"""Building a session's prompt from the agent and its execution context (SPEC §2).

Context and examples are trimmed to the tier's budget: small 2 KB / 2
examples, medium 5 KB / 4, large everything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mas_core.llm_types import Message

TIER_BUDGETS: dict[str, tuple[int | None, int | None]] = {
    "small": (2 * 1024, 2),
    "medium": (5 * 1024, 4),
    "large": (None, None),
}


# How much of the prompt the execution context may take besides the task, per tier (UTF-8 bytes):
# what does not fit is written to a workspace file and referenced by path for vfs_read.
CONTEXT_BUDGETS: dict[str, int] = {"small": 2 * 1024, "medium": 8 * 1024, "large": 32 * 1024}
MAX_LISTED_FILES = 50


@dataclass
class WorkspaceEntry:
    path: str
    bytes: int
    author: str


@dataclass
class ExecutionContext:
    """What a session is told besides its agent's own prompt (SPEC §2)."""

    task: str
    output_dir: str = ""
    dependency_results: dict[str, str] = field(default_factory=dict)  # step id → its outputs and answer
    parent_context: str = ""  # what the delegating agent passed along
    parent: str = ""  # the agent that delegated or spawned this one
    findings: list[str] = field(default_factory=list)  # the shared knowledge the run's agents added so far
    files: list[WorkspaceEntry] = field(default_factory=list)


def trim_to_bytes(text: str, budget: int | None) -> str:
    """Cut ``text`` to at most ``budget`` UTF-8 bytes at a paragraph (else line) boundary, marked."""
    data = text.encode("utf-8")
    if budget is None or len(data) <= budget:
        return text
    marker = f"\n\n[… trimmed to {budget} bytes for this model tier]"
    room = max(budget - len(marker.encode("utf-8")), 0)
    head = data[:room].decode("utf-8", errors="ignore")
    for separator in ("\n\n", "\n"):
        cut = head.rfind(separator)
        if cut > room // 2:
            head = head[:cut]
            break
    return head.rstrip() + marker


def build_system_prompt(
    *, body: str, context: str = "", examples: list[dict[str, Any]] | None = None, tier: str = "medium",
    sections: list[tuple[str, str]] | None = None,
) -> str:
    budget, max_examples = TIER_BUDGETS.get(tier, TIER_BUDGETS["medium"])
    parts = [body.strip()]
    if context.strip():
        parts.append("## Context\n\n" + trim_to_bytes(context.strip(), budget))
    chosen = list(examples or [])[:max_examples] if max_examples is not None else list(examples or [])
    if chosen:
        lines = ["## Examples"]
        for number, example in enumerate(chosen, start=1):
            lines.append(f"\n### Example {number}\nTask: {example.get('task', '')}")
            if example.get("approach"):
                lines.append(f"Approach: {example['approach']}")
            if example.get("outcome"):
                lines.append(f"Outcome: {example['outcome']}")
        parts.append("\n".join(lines))
    for title, text in sections or []:
        if text.strip():
            parts.append(f"## {title}\n\n{text.strip()}")
    return "\n\n".join(part for part in parts if part)


def _fit(text: str, budget: int, path: str, spilled: dict[str, str]) -> str:
    """``text`` if it fits in ``budget`` bytes, else its head and a pointer to ``path`` (added to ``spilled``)."""
    if len(text.encode("utf-8")) <= budget:
        return text
    spilled[path] = text
    note = f"\n\n[… {len(text.encode('utf-8'))} bytes in all: the full text is in `{path}` (read it with vfs_read)]"
    head = text.encode("utf-8")[:max(0, budget - len(note.encode("utf-8")))].decode("utf-8", errors="ignore")
    return head.rstrip() + note


def build_task_message(execution: ExecutionContext, *, tier: str = "medium",
                       spill_prefix: str = "context/") -> tuple[str, dict[str, str]]:
    """The session's first user message, and the texts too long for the tier's budget (path → text).

    The task is always whole. The parent's context, the results of the
    steps depended on and the run's findings share the tier's budget; the list of workspace files
    shows at most ``MAX_LISTED_FILES``. The caller writes ``spilled`` to the
    workspace so the pointers in the message lead somewhere.
    """
    budget = CONTEXT_BUDGETS.get(tier, CONTEXT_BUDGETS["medium"])
    spilled: dict[str, str] = {}
    parts = (len(execution.dependency_results) + (1 if execution.parent_context else 0)
             + (1 if execution.findings else 0))
    share = budget // max(parts, 1)
    lines = [execution.task.strip()]
    if execution.output_dir:
        lines.append(f"\nWrite your files under `{execution.output_dir}`.")
    if execution.parent_context:
        who = f" from {execution.parent}" if execution.parent else ""
        lines.append(f"\n## Context{who}\n" + _fit(execution.parent_context.strip(), share,
                                                       f"{spill_prefix}parent-context.md", spilled))
    if execution.dependency_results:
        lines.append("\n## Results of earlier steps")
        for name, result in execution.dependency_results.items():
            lines.append(f"\n### {name}\n" + _fit(result.strip(), share, f"{spill_prefix}{name}.md", spilled))
    if execution.findings:
        lines.append("\n## Findings so far\n" + _fit("\n".join(f"- {item}" for item in execution.findings), share,
                                                    f"{spill_prefix}findings.md", spilled))
    if execution.files:
        shown = execution.files[:MAX_LISTED_FILES]
        listing = [f"- {entry.path} ({entry.bytes} B, by {entry.author or '?'})" for entry in shown]
        if len(execution.files) > len(shown):
            listing.append(f"- … and {len(execution.files) - len(shown)} more (vfs_list shows them all)")
        lines.append("\n## Files in the workspace\n" + "\n".join(listing))
    return "\n".join(lines), spilled


def build_messages(*, system: str, execution: ExecutionContext, tier: str = "medium",
                   spill_prefix: str = "context/") -> tuple[list[Message], dict[str, str]]:
    """The first two messages of a session, and the context texts to write to the workspace."""
    task, spilled = build_task_message(execution, tier=tier, spill_prefix=spill_prefix)
    return [Message(role="system", content=system), Message(role="user", content=task)], spilled
