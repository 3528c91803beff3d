"""Scanning a text with RE2: our patterns match the text's UTF-8 bytes while findings count its characters
(:class:`ScannedText`), and each pattern's findings are capped (:func:`capped`).

Every pattern of ours runs on RE2, as the teams' patterns do: the text is untrusted, and on Python's ``re`` even a
careful pattern such as an e-mail address's is quadratic on a long run of letters (``re`` only splits words and
digits here, with single character classes: linear). A pattern, a kind or a declared value gives at most
:data:`MAX_FINDINGS` (1000) findings in a text; past them, one more finding covers everything from the next match
to the end of the text, so that redacting stays complete.
"""

from __future__ import annotations

from typing import Iterator

import re2

from mas_core.guardrails.findings import Span
from mas_core.patterns import re2_options

# Findings of one pattern, one kind or one declared value in one text; past them, one finding covers the rest.
MAX_FINDINGS = 1000


def re2_compiled(pattern: str):
    """One of our own patterns (or one built from a team's words), compiled by RE2; re2.error if it cannot be."""
    return re2.compile(pattern, options=re2_options())


_CONTINUATION_BYTES = bytes(range(0x80, 0xC0))


class ScannedText:
    """A text and its UTF-8 form (RE2 matches bytes, which spares its str wrapper's per-match cost); turns byte
    offsets into character offsets, linearly when asked in increasing order."""

    __slots__ = ("text", "data", "_ascii", "_byte", "_char")

    def __init__(self, text: str):
        self.text = text
        self.data = text.encode("utf-8", "surrogatepass")  # a lone surrogate stays one (invalid) character
        self._ascii = len(self.data) == len(text)
        self._byte = self._char = 0

    def char(self, offset: int) -> int:
        if self._ascii:
            return offset
        if offset < self._byte:
            self._byte = self._char = 0
        self._char += len(self.data[self._byte:offset].translate(None, _CONTINUATION_BYTES))
        self._byte = offset
        return self._char

    def span(self, start: int, end: int, label: str) -> Span:
        return self.char(start), self.char(end), label


def capped(spans: Iterator[Span], size: int) -> Iterator[Span]:
    """At most MAX_FINDINGS of ``spans`` (in increasing order); past them, one span from the next one's start to the
    end of the text, so that redact and mask still cover every one (a text of thousands of e-mail addresses is
    redacted from the thousandth on) and a check's cost stays bounded."""
    for count, span in enumerate(spans):
        if count == MAX_FINDINGS:
            yield span[0], size, span[2]
            return
        yield span


def byte_before(data: bytes, start: int) -> bytes:
    """The byte before ``data[start]`` (b"" at the start): what a match is glued to on its left."""
    return data[max(0, start - 1):start]


def is_word_byte(byte: bytes) -> bool:
    """Whether ``byte`` (one byte, or b"") is an ASCII letter, digit or ``_``."""
    return byte.isalnum() or byte == b"_"
