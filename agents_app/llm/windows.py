"""Context windows and output limits of well-known models, for model rows that leave them blank.

The first prefix that a model's name starts with wins (longest first in the table), so
``gpt-4o-mini-2024-07-18`` finds ``gpt-4o-mini``. A model no prefix names has no known
window: its sessions are never compacted ahead of a call, only when the provider answers
that the context is too long. Figures in tokens, from the providers' model pages.
"""

from __future__ import annotations

from dataclasses import dataclass

# prefix → (context window, max output tokens)
KNOWN: dict[str, tuple[int, int]] = {
    "gpt-4.1": (1_047_576, 32_768),
    "gpt-4o-mini": (128_000, 16_384),
    "gpt-4o": (128_000, 16_384),
    "gpt-4-turbo": (128_000, 4_096),
    "gpt-5": (400_000, 128_000),
    "o1": (200_000, 100_000),
    "o3": (200_000, 100_000),
    "o4-mini": (200_000, 100_000),
    "claude-3-5-haiku": (200_000, 8_192),
    "claude-3-5-sonnet": (200_000, 8_192),
    "claude-3-7-sonnet": (200_000, 64_000),
    "claude-3-haiku": (200_000, 4_096),
    "claude-3-opus": (200_000, 4_096),
    "claude-sonnet-4": (200_000, 64_000),
    "claude-opus-4": (200_000, 32_000),
    "claude-haiku-4": (200_000, 64_000),
    "gemini-1.5-flash": (1_048_576, 8_192),
    "gemini-1.5-pro": (2_097_152, 8_192),
    "gemini-2.0-flash": (1_048_576, 8_192),
    "gemini-2.5-flash": (1_048_576, 65_536),
    "gemini-2.5-pro": (1_048_576, 65_536),
    "llama3.1": (128_000, 4_096),
    "llama3.2": (128_000, 4_096),
    "qwen2.5": (32_768, 8_192),
    "mistral": (32_768, 4_096),
}
_PREFIXES = sorted(KNOWN, key=len, reverse=True)


@dataclass(frozen=True)
class ModelLimits:
    context_window: int | None = None
    max_output_tokens: int | None = None


def model_limits(name: str, *, context_window: int | None = None,
                 max_output_tokens: int | None = None) -> ModelLimits:
    """A row's own figures, or the defaults of the first known prefix of ``name`` for the blank ones."""
    known = next((KNOWN[prefix] for prefix in _PREFIXES if name.lower().startswith(prefix)), (None, None))
    return ModelLimits(context_window=context_window or known[0], max_output_tokens=max_output_tokens or known[1])
