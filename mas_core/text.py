"""Names and paths a person reads: no character that hides text or changes the order it is shown in.

U+202E (RIGHT-TO-LEFT OVERRIDE) makes ``invoice\u202Efdp.exe`` display as
``invoiceexe.pdf``; zero-width characters make two different names look the
same. Names of definitions, file names of definitions and workspace paths
refuse them (:func:`visible_text`), so what the admin, the monitor and a
model show is what is stored.

Refused: the bidirectional controls (U+202A–U+202E, U+2066–U+2069, U+200E,
U+200F, U+061C), every other invisible format character (Unicode category
Cf: zero-width space, word joiner, soft hyphen, byte-order mark, invisible
operators, tag characters …) except the zero-width joiner and non-joiner
that some scripts and emoji need and that reorder nothing, control
characters (Cc: NUL, tab, newline …), line and paragraph separators,
surrogates, private-use and unassigned code points.
"""

from __future__ import annotations

import unicodedata

BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
JOINERS = frozenset("\u200c\u200d")  # ZWNJ, ZWJ: Persian, Indic scripts and emoji need them
REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def hidden_character(text: str) -> str | None:
    """The first character of ``text`` a reader would not see as written (see the module), or None."""
    for char in text:
        if char in BIDI_CONTROLS:
            return char
        if char not in JOINERS and unicodedata.category(char) in REFUSED_CATEGORIES:
            return char
    return None


def describe(char: str) -> str:
    """``U+202E RIGHT-TO-LEFT OVERRIDE``."""
    return f"U+{ord(char):04X} {unicodedata.name(char, 'unnamed character')}"


def visible_text(text: str, what: str = "text") -> str:
    """``text`` unchanged when it has no hidden character; else ValueError naming the character. Anything
    but a string (a PATCH's ``null``) passes through: what may be missing is decided elsewhere."""
    if not isinstance(text, str):
        return text
    char = hidden_character(text)
    if char is not None:
        kind = "a direction control" if char in BIDI_CONTROLS else "an invisible or control character"
        raise ValueError(f"{what} contains {kind} ({describe(char)}), which would show it differently "
                         "from what is stored; remove it")
    return text
