"""What a detector finds, and what it may compare a text with: :class:`Finding`, :class:`Context`, the span a scan
returns, and the limits every detector keeps.

The foundation of the package: it imports nothing from it.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_TEXT_CHARS = 1_000_000

# Findings that are about the whole text, not a part of it: mask leaves the text as it is.
WHOLE_TEXT_LABELS = frozenset({"length", "json_schema", "language", "llm_judge"})


@dataclass(frozen=True)
class Context:
    """What a check may compare the text with."""

    secret_values: tuple[str, ...] = ()  # the team's declared secret values (the kernel passes them)
    system_prompt: str = ""  # the agent's own body (for prompt_leak)


@dataclass(frozen=True)
class Finding:
    """What a detector found: ``label`` at ``text[start:end]``; ``excerpt`` shows its surroundings, redacted."""

    label: str
    start: int
    end: int
    excerpt: str


Span = tuple[int, int, str]  # start, end, label: what a detector's scan returns
