"""The manual as the tests read it: README.md and the pages of docs/, their sections and their examples.

Tests that run an example find it here by page and heading, so a reworded or moved example fails by name
instead of silently testing nothing: every lookup that finds nothing (or more than one) raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# An example: a fenced block at the start of a line (```lang title="…"), closed by ``` at the same indent.
FENCE = re.compile(r"^(?P<indent> *)```(?P<language>[\w-]*)(?P<info>[^\n]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.M | re.S)
TITLE = re.compile(r'\btitle="([^"]*)"')
HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$", re.M)


@dataclass(frozen=True)
class Example:
    page: str  # "README.md", "docs/concepts/runs.md"
    line: int  # of the opening fence, 1-based
    language: str
    title: str
    text: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line} ({self.language}{' ' + self.title if self.title else ''})"


def pages() -> list[str]:
    """README.md, then every page of docs/, as paths from the repository's root."""
    return ["README.md", *sorted(path.relative_to(ROOT).as_posix() for path in DOCS.rglob("*.md"))]


@cache
def page(name: str) -> str:
    """The text of one page (``README.md``, ``docs/concepts/runs.md``)."""
    return (ROOT / name).read_text(encoding="utf-8")


def section(name: str, heading: str) -> str:
    """The part of page ``name`` under the heading ``heading`` (any level), up to the next heading as high."""
    text = page(name)
    found = [match for match in HEADING.finditer(text) if match[2] == heading and not _in_fence(text, match.start())]
    if len(found) != 1:
        raise LookupError(f"{name}: {len(found)} headings {heading!r}, expected one")
    level = len(found[0][1])
    end = len(text)
    for match in HEADING.finditer(text, found[0].end()):
        if len(match[1]) <= level and not _in_fence(text, match.start()):
            end = match.start()
            break
    return text[found[0].start():end]


def _in_fence(text: str, index: int) -> bool:
    return any(match.start() < index < match.end() for match in FENCE.finditer(text))


def examples(name: str, text: str | None = None) -> list[Example]:
    """Every fenced block of page ``name`` (or of ``text``, a part of it), in order."""
    whole = page(name)
    text = whole if text is None else text
    offset = whole.index(text)
    found = []
    for match in FENCE.finditer(text):
        title = TITLE.search(match["info"])
        body = "\n".join(line.removeprefix(match["indent"]) for line in match["body"].split("\n"))
        found.append(Example(page=name, line=whole.count("\n", 0, offset + match.start()) + 1,
                             language=match["language"], title=title[1] if title else "", text=body))
    return found


def example(name: str, *, language: str, heading: str | None = None, containing: str = "") -> Example:
    """The one ``language`` block of page ``name`` (under ``heading``) whose text holds ``containing``."""
    text = section(name, heading) if heading else None
    found = [block for block in examples(name, text) if block.language == language and containing in block.text]
    where = f"{name}{' under ' + repr(heading) if heading else ''}"
    if len(found) != 1:
        raise LookupError(f"{where}: {len(found)} {language} blocks holding {containing!r}, expected one")
    return found[0]


def fence_lines(name: str) -> int:
    """How many lines of page ``name`` open or close a fence (counted without FENCE, to check it)."""
    return sum(1 for line in page(name).split("\n") if line.lstrip(" ").startswith("```"))


def prose() -> str:
    """The whole manual (README and every page) with its whitespace folded, for statements quoted word for word."""
    return " ".join(" ".join(page(name).split()) for name in pages())


def says(text: str) -> None:
    """The statement is the manual's, word for word (a reworded manual must reword the test that quotes it)."""
    assert " ".join(text.split()) in prose(), f"the manual no longer says: {text}"
