"""The detectors about prompts: ``prompt_leak`` (the system prompt in a text) and ``injection`` (instructions planted
in a text, such as a tool's result).

``prompt_leak`` (``threshold`` 0.5, ``min_words`` 8)
    Words normalised (punctuation dropped, lower case, whitespace collapsed);
    the text leaks the system prompt (:attr:`Context.system_prompt`) when it
    holds at least ``threshold`` of the prompt's distinct 8-word shingles, or
    any ``min_words`` consecutive words of it. Then each matching region (a
    run of shingles of ``min(8, min_words)`` words found in the prompt) is a
    finding, so that redact removes every leaked part.
``injection`` (``extra_phrases``, at most 100 of 1 to 200 characters)
    What prompt injections in tool results say, case-insensitive
    (:data:`INJECTION_SIGNS`): ignore/disregard/forget (all) (the)
    previous/prior/above instructions, "you are now a …", "new
    instructions:", "system prompt", "do not tell the user", exfiltrate,
    "send … to http(s)://", chat-template markers (``</system>``,
    ``[INST]``, ``<|im_start|>``, ``<<SYS>>`` …), Unicode tag characters
    (U+E0000–U+E007F, save a flag's tag sequence) and runs of three or more
    zero-width characters; plus the team's phrases (anywhere, any whitespace
    between their words).
"""

from __future__ import annotations

import functools
import re
from typing import Iterator

import re2

from mas_core.guardrails.custom import MAX_WORD_CHARS
from mas_core.guardrails.detector import Detector, DetectorError, DetectorSettings
from mas_core.guardrails.findings import MAX_TEXT_CHARS, Context, Span
from mas_core.guardrails.scanning import ScannedText, capped, re2_compiled

MAX_PHRASES = 100
MAX_MIN_WORDS = 64
SHINGLE_WORDS = 8


# -- prompt_leak ---------------------------------------------------------------------------------------------------

_PUNCTUATION = re.compile(r"[^\w\s]+")
_TOKEN = re.compile(r"\S+")


def _words(text: str) -> list[str]:
    """Normalised words: punctuation dropped, lower case, split on whitespace."""
    return _PUNCTUATION.sub("", text).lower().split()


def _shingles(words: list[str], size: int):
    return zip(*(words[offset:] for offset in range(size)))


@functools.lru_cache(maxsize=32)
def _prompt_shingles(prompt: str, size: int, min_words: int) -> tuple[int, frozenset, frozenset, frozenset]:
    """The prompt's word count and its shingles of ``size``, of 8 and of ``min_words`` words (cached: an agent's
    prompt is checked against many texts)."""
    words = _words(prompt[:MAX_TEXT_CHARS])
    return (len(words), frozenset(_shingles(words, size)), frozenset(_shingles(words, SHINGLE_WORDS)),
            frozenset(_shingles(words, min_words)))


def _word_spans(text: str) -> list[tuple[int, int]]:
    """Where each normalised word of ``text`` is (the same words, in the same order, as :func:`_words`)."""
    spans = []
    for token in _TOKEN.finditer(text):
        if _PUNCTUATION.sub("", token.group()).lower():
            spans.append(token.span())
    return spans


def prompt_leak_build(settings: DetectorSettings) -> Detector:
    """The ``prompt_leak`` detector (see the module)."""
    threshold = settings.get("threshold", 0.5)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold <= 1:
        raise DetectorError("detector.threshold", f"must be a number above 0 and at most 1, not {threshold!r}")
    min_words = settings.get("min_words", 8)
    if isinstance(min_words, bool) or not isinstance(min_words, int) or not 3 <= min_words <= MAX_MIN_WORDS:
        raise DetectorError("detector.min_words", f"must be a whole number from 3 to {MAX_MIN_WORDS}, not "
                                                  f"{min_words!r}")
    settings.done()
    size = min(SHINGLE_WORDS, min_words)

    def scan(text: str, context: Context) -> list[Span]:
        if not context.system_prompt:
            return []
        count, prompt_small, prompt_eight, prompt_run = _prompt_shingles(context.system_prompt, size, min_words)
        if count < min_words:
            return []
        words = _words(text)
        if prompt_small.isdisjoint(_shingles(words, size)):
            return []  # the common case: not one shingle of the prompt in the text
        share = len(prompt_eight.intersection(_shingles(words, SHINGLE_WORDS))) / len(prompt_eight) if (
            prompt_eight) else 0.0
        if share < threshold and prompt_run.isdisjoint(_shingles(words, min_words)):
            return []
        return list(capped(_leak_regions(text, words, prompt_small, size), len(text)))

    return Detector("prompt_leak", scan)


def _leak_regions(text: str, words: list[str], prompt_small: frozenset, size: int) -> Iterator[Span]:
    """Each run of the text's shingles that are the prompt's, as the span of its words."""
    spans = _word_spans(text)
    if len(spans) != len(words):  # cannot happen; if it did, the whole text is the region
        yield 0, len(text), "prompt_leak"
        return
    first = last = None
    for index, shingle in enumerate(_shingles(words, size)):
        if shingle in prompt_small:
            first = index if first is None else first
            last = index
        elif first is not None:
            yield spans[first][0], spans[last + size - 1][1], "prompt_leak"
            first = None
    if first is not None:
        yield spans[first][0], spans[last + size - 1][1], "prompt_leak"


# -- injection -----------------------------------------------------------------------------------------------------

# What each sign looks like, for the manual and the review; matched case-insensitively, as one RE2 alternation.
INJECTION_SIGNS: tuple[tuple[str, str], ...] = (
    ("ignore the previous instructions",
     r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:(?:all|any|every)\s+)?(?:(?:of\s+)?(?:the|your|my|these|"
     r"those|its)\s+)?(?:(?:previous|prior|above|earlier|preceding|former|original|initial|system|old)\s+)+"
     r"(?:instructions?|prompts?|directions?|directives?|rules|guidelines|guidance|commands?|context|messages?)\b"),
    ("you are now …",
     r"\byou\s+are\s+now\s+(?:a|an|the|my|no\s+longer|acting|dan|jailbroken|unrestricted|free\s+from|"
     r"in\s+(?:developer|god|jailbreak|unrestricted|admin|debug)\s+mode)\b"),
    ("new instructions:", r"\b(?:new|updated|revised|real|actual|additional)\s+(?:system\s+)?instructions?\s*:"),
    ("system prompt", r"\bsystem\s+prompt\b"),
    ("do not tell the user",
     r"\b(?:do\s+not|don[’']?t|never|without)\s+(?:tell(?:ing)?|inform(?:ing)?|notify(?:ing)?|alert(?:ing)?|"
     r"let(?:ting)?|show(?:ing)?|reveal(?:ing)?\s+(?:this\s+|it\s+)?to|mention(?:ing)?\s+(?:this\s+|it\s+)?to)"
     r"\s+the\s+user\b"),
    ("exfiltrate", r"\bexfiltrat\w*"),
    ("send … to a URL", r"\b(?:send|post|upload|forward|transmit|leak)\b[^\n]{0,80}?\bto\s+https?://"),
    ("chat-template markers",
     r"</?system>|\[/?INST\]|<<\s*/?SYS\s*>>|<\|(?:im_start|im_end|system|endoftext|start_header_id|"
     r"end_header_id|eot_id)\|>"),
    ("Unicode tag characters", r"[\x{E0000}-\x{E007F}]+"),
    ("a run of zero-width characters", r"[\x{200B}-\x{200D}\x{2060}\x{FEFF}]{3,}"),
)
_BLACK_FLAG = "\U0001f3f4".encode()  # 🏴 and tag characters spell England's, Scotland's and Wales's flags
_CANCEL_TAG = "\U000e007f".encode()


def injection_build(settings: DetectorSettings) -> Detector:
    """The ``injection`` detector (see the module)."""
    extra = settings.strings("extra_phrases", most=MAX_PHRASES, longest=MAX_WORD_CHARS, default=())
    settings.done()
    signs = [pattern for _, pattern in INJECTION_SIGNS]
    signs += [r"[\s\p{Z}]+".join(re2.escape(part) for part in phrase.split()) for phrase in extra]
    try:
        regex = re2_compiled("(?i)" + "|".join(f"(?:{sign})" for sign in signs))
    except re2.error as error:
        raise DetectorError("detector.extra_phrases", f"cannot be compiled ({error}); use fewer phrases") from None

    def matches(scanned: ScannedText) -> Iterator[Span]:
        for match in regex.finditer(scanned.data):
            start, end = match.span()
            found = match.group()
            if (found.startswith(b"\xf3\xa0") and found.endswith(_CANCEL_TAG) and len(found) <= 8 * 4
                    and scanned.data[max(0, start - 4):start] == _BLACK_FLAG):
                continue  # a flag's tag sequence
            yield scanned.span(start, end, "injection")

    def scan(text: str, context: Context) -> list[Span]:
        return list(capped(matches(ScannedText(text)), len(text)))

    return Detector("injection", scan)
