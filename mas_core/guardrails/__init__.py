"""What a guardrail finds in text that enters or leaves a model (issue 26): the content detectors, plain Python.

A guardrail definition names a detector (its ``detector:`` mapping) and an
action; :func:`detector_build` checks the mapping and compiles it once, and
the kernel calls :meth:`Detector.find` on each text, then acts on the
:class:`Finding` list with :func:`redact`, :func:`mask` or :func:`fence` (or
blocks, or warns). A finding carries a span and an :attr:`Finding.excerpt`
that is safe to store in events and logs: the text around the finding with
every finding of the list replaced by its ``[label]``, never the value found.

This module is the package's public interface. The detectors (``type:``), by
the module that builds them and says what each finds and which settings it
takes:

``pattern``, ``keywords`` — :mod:`~mas_core.guardrails.custom`
    The team's own RE2 patterns, and its words and phrases. A pattern that
    would backtrack catastrophically in a backtracking engine is refused
    (:mod:`~mas_core.guardrails.backtracking`).
``pii`` — :mod:`~mas_core.guardrails.pii`
    E-mail addresses, phone numbers, card numbers, IBANs, IP addresses and
    national ids (:data:`PII_KINDS`), each checked past its shape.
``secrets`` — :mod:`~mas_core.guardrails.credentials`
    API keys, private keys and the team's declared secret values
    (:data:`SECRET_KINDS`).
``prompt_leak``, ``injection`` — :mod:`~mas_core.guardrails.prompts`
    The agent's system prompt in a text; what prompt injections say.
``json_schema``, ``length`` — :mod:`~mas_core.guardrails.whole_text`
    A JSON document valid against a schema; a length in characters.
``language`` — :mod:`~mas_core.guardrails.language`
    The language a text is written in, one of the allowed ones (py3langid's
    model, shipped in its wheel, loaded by the process's first check).
``llm_judge``, ``webhook`` — :mod:`~mas_core.guardrails.remote`
    A model of the team judges the text against a criterion; the team's own
    service answers allow, deny or redact. Their builders check the settings;
    the session asks (:attr:`Detector.remote`).

What they share: :mod:`~mas_core.guardrails.findings` (:class:`Finding`,
:class:`Context`, the limits), :mod:`~mas_core.guardrails.detector`
(:class:`Detector`, :class:`DetectorError`, reading settings),
:mod:`~mas_core.guardrails.scanning` (RE2 on a text's bytes, the cap on
findings), :mod:`~mas_core.guardrails.actions` (redact, mask, fence, the
excerpts).

Limits: :meth:`Detector.find` looks at the first :data:`MAX_TEXT_CHARS`
(1,000,000) characters of a text; what comes after is not looked at (pair the
guardrail with a ``length`` one to refuse longer texts). ``length`` counts
the whole text, and ``json_schema`` finds a longer text invalid, unread;
``language`` judges a text by its first :data:`LANGUAGE_BYTES` (1,000) bytes. A
pattern, a kind or a declared value gives at most :data:`MAX_FINDINGS` (1000)
findings in a text; past them, one more finding covers everything from the
next match to the end of the text, so that redacting stays complete.
Every pattern of ours runs on RE2, as the teams' patterns do (the text is
untrusted). Settings are bounded (each detector's module says how); an
excerpt has at most ``limit`` characters, ellipses included, its line breaks
and tabs made spaces. Findings of one detector may overlap (a card number
that is also a declared secret); :func:`redact` and :func:`mask` join them.
"""

from __future__ import annotations

from typing import Callable

from mas_core.guardrails.actions import (  # noqa: F401
    EXCERPT_CHARS,
    FENCE_BEGIN,
    FENCE_END,
    FENCE_MARKER_REMOVED,
    MAX_EXCERPT_CHARS,
    MAX_SOURCE_CHARS,
    excerpt,
    fence,
    mask,
    redact,
)
from mas_core.guardrails.backtracking import backtracking_problem  # noqa: F401
from mas_core.guardrails.credentials import SECRET_KINDS, secrets_build
from mas_core.guardrails.custom import MAX_PATTERNS, MAX_WORD_CHARS, MAX_WORDS, keywords_build, pattern_build  # noqa: F401
from mas_core.guardrails.detector import Detector, DetectorError, DetectorSettings
from mas_core.guardrails.findings import MAX_TEXT_CHARS, WHOLE_TEXT_LABELS, Context, Finding, Span  # noqa: F401
from mas_core.guardrails.language import LANGUAGE_BYTES, LANGUAGES, language_build
from mas_core.guardrails.pii import IBAN_LENGTHS, PII_KINDS, pii_build  # noqa: F401
from mas_core.guardrails.prompts import (  # noqa: F401
    INJECTION_SIGNS,
    MAX_MIN_WORDS,
    MAX_PHRASES,
    SHINGLE_WORDS,
    injection_build,
    prompt_leak_build,
)
from mas_core.guardrails.remote import (  # noqa: F401
    REMOTE_DETECTORS,
    llm_judge_build,
    webhook_build,
    webhook_findings,
)
from mas_core.guardrails.scanning import MAX_FINDINGS  # noqa: F401
from mas_core.guardrails.whole_text import json_schema_build, length_build

DETECTORS: tuple[str, ...] = ("pattern", "keywords", "pii", "secrets", "prompt_leak", "injection", "json_schema",
                              "length", "language", "llm_judge", "webhook")
ACTIONS: tuple[str, ...] = ("block", "redact", "mask", "warn", "fence", "ask")


def detector_build(settings: dict) -> Detector:
    """Validate the `detector:` mapping of a guardrail definition and build it; DetectorError names the bad field."""
    if not isinstance(settings, dict):
        raise DetectorError("detector", "must be a mapping with a type, such as {type: pii}")
    kind = settings.get("type")
    if kind is None:
        raise DetectorError("detector.type", f"is required: one of {', '.join(DETECTORS)}")
    if kind not in DETECTORS:
        raise DetectorError("detector.type", f"{kind!r} is not a detector: one of {', '.join(DETECTORS)}")
    return _BUILDERS[kind](DetectorSettings(kind, settings))


_BUILDERS: dict[str, Callable[[DetectorSettings], Detector]] = {
    "pattern": pattern_build,
    "keywords": keywords_build,
    "pii": pii_build,
    "secrets": secrets_build,
    "prompt_leak": prompt_leak_build,
    "injection": injection_build,
    "json_schema": json_schema_build,
    "length": length_build,
    "language": language_build,
    "llm_judge": llm_judge_build,
    "webhook": webhook_build,
}

__all__ = [
    "ACTIONS", "DETECTORS", "FENCE_BEGIN", "FENCE_END", "FENCE_MARKER_REMOVED", "IBAN_LENGTHS", "INJECTION_SIGNS",
    "LANGUAGE_BYTES", "LANGUAGES", "MAX_FINDINGS", "MAX_TEXT_CHARS", "PII_KINDS", "REMOTE_DETECTORS", "SECRET_KINDS",
    "WHOLE_TEXT_LABELS", "Context", "Detector", "DetectorError", "Finding",
    "backtracking_problem", "detector_build", "excerpt", "fence", "mask", "redact", "webhook_findings",
]
