"""The detectors a team writes itself: ``pattern`` (its RE2 patterns) and ``keywords`` (its words and phrases).

``pattern`` (``patterns``, at most 50; ``ignore_case``)
    RE2 patterns (:mod:`mas_core.patterns`); every non-empty match is a
    finding. A pattern that would backtrack catastrophically in a
    backtracking engine is refused too, although RE2 never backtracks
    (:mod:`mas_core.guardrails.backtracking` says why, and how it is told).
``keywords`` (``words``, at most 1000 of 1 to 200 characters; ``case_sensitive``)
    Whole words and phrases: not inside a longer word (letters, digits,
    marks and ``_`` are word characters, in any script); the words of a
    phrase may be separated by any whitespace. One RE2 alternation.
"""

from __future__ import annotations

from typing import Iterator

import re2

from mas_core.guardrails.backtracking import backtracking_problem
from mas_core.guardrails.detector import Detector, DetectorError, DetectorSettings
from mas_core.guardrails.findings import Context, Span
from mas_core.guardrails.scanning import ScannedText, capped, re2_compiled
from mas_core.patterns import PatternError, compiled

MAX_PATTERNS = 50
MAX_WORDS = 1000
MAX_WORD_CHARS = 200


# -- pattern ---------------------------------------------------------------------------------------------------------


def pattern_build(settings: DetectorSettings) -> Detector:
    """The ``pattern`` detector (see the module)."""
    patterns = settings.strings("patterns", most=MAX_PATTERNS, longest=1000)
    ignore_case = settings.flag("ignore_case", False)
    settings.done()
    regexes = []
    for position, pattern in enumerate(patterns):
        try:
            regex = compiled(pattern)
            regexes.append(re2_compiled(f"(?i:{pattern})") if ignore_case else regex)
        except (PatternError, re2.error) as error:
            raise DetectorError(f"detector.patterns[{position}]", str(error)) from None
        danger = backtracking_problem(pattern, ignore_case=ignore_case)
        if danger:
            raise DetectorError(f"detector.patterns[{position}]", danger)
    try:  # one pass that says whether any pattern matches at all: most texts match none
        anyone = re2_compiled("|".join(f"(?:{regex.pattern})" for regex in regexes))
    except re2.error:
        anyone = None

    def matches(regex, scanned: ScannedText) -> Iterator[Span]:
        for match in regex.finditer(scanned.data):
            if match.end() > match.start():  # an empty match marks no text
                yield scanned.span(match.start(), match.end(), "pattern")

    def scan(text: str, context: Context) -> list[Span]:
        scanned = ScannedText(text)
        if anyone is not None and anyone.search(scanned.data) is None:
            return []
        return [span for regex in regexes for span in capped(matches(regex, scanned), len(text))]

    return Detector("pattern", scan)


# -- keywords --------------------------------------------------------------------------------------------------------

_NOT_WORD = r"[^\pL\pN\pM_]"


def keywords_build(settings: DetectorSettings) -> Detector:
    """The ``keywords`` detector (see the module)."""
    words = settings.strings("words", most=MAX_WORDS, longest=MAX_WORD_CHARS)
    case_sensitive = settings.flag("case_sensitive", False)
    settings.done()
    unique = sorted({" ".join(word.split()) for word in words}, key=lambda word: (-len(word), word))
    # Longest first: at one place RE2 takes the first alternative that matches, so "new york city" beats "new york".
    phrases = "|".join(r"[\s\p{Z}]+".join(re2.escape(part) for part in word.split(" ")) for word in unique)
    source = ("" if case_sensitive else "(?i)") + rf"(?:\A|{_NOT_WORD})({phrases})(?:{_NOT_WORD}|\z)"
    try:
        regex = re2_compiled(source)
    except re2.error as error:
        raise DetectorError("detector.words", f"cannot be compiled into one pattern ({error}); use fewer or shorter "
                                              "words") from None

    def matches(scanned: ScannedText) -> Iterator[Span]:
        pos = 0
        while (match := regex.search(scanned.data, pos)) is not None:
            start, end = match.span(1)
            yield scanned.span(start, end, "keyword")
            pos = end  # the character after a word may be the one before the next word

    def scan(text: str, context: Context) -> list[Span]:
        return list(capped(matches(ScannedText(text)), len(text)))

    return Detector("keywords", scan)
