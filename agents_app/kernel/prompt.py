"""Building a session's prompt from the agent and its execution context (SPEC §2).

Context and examples are trimmed to the tier's budget: small 2 KB / 2
examples, medium 5 KB / 4, large everything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents_app.llm.types import Message

TIER_BUDGETS: dict[str, tuple[int | None, int | None]] = {
    "small": (2 * 1024, 2),
    "medium": (5 * 1024, 4),
    "large": (None, None),
}


@dataclass
class ExecutionContext:
    task: str
    output_dir: str = ""
    dependency_results: dict[str, str] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


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


def build_task_message(execution: ExecutionContext) -> str:
    lines = [execution.task.strip()]
    if execution.output_dir:
        lines.append(f"\nWrite your files under `{execution.output_dir}`.")
    if execution.dependency_results:
        lines.append("\n## Results of earlier steps")
        for name, result in execution.dependency_results.items():
            lines.append(f"\n### {name}\n{result.strip()}")
    if execution.findings:
        lines.append("\n## Findings so far\n" + "\n".join(f"- {item}" for item in execution.findings))
    if execution.files:
        lines.append("\n## Files created earlier\n" + "\n".join(f"- {path}" for path in execution.files))
    return "\n".join(lines)


def build_messages(*, system: str, execution: ExecutionContext) -> list[Message]:
    return [Message(role="system", content=system), Message(role="user", content=build_task_message(execution))]
