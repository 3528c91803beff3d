"""Lists of shipped files that tests are parametrized over.

An empty list must not turn into one skipped ``[NOTSET]`` case and a green
suite: ``listed`` makes it a collection error naming the folder (and
pyproject's ``empty_parameter_set_mark = fail_at_collect`` catches any other
empty parametrization).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, TypeVar

T = TypeVar("T")


def listed(items: Iterable[T], what: str) -> list[T]:
    found = list(items)
    if not found:
        raise LookupError(f"no {what}: the tests parametrized over them would test nothing")
    return found


def markdown_files(folder: Path) -> list[Path]:
    """The ``*.md`` files of ``folder``, sorted; a collection error when there are none."""
    return listed(sorted(folder.glob("*.md")), f"*.md files in {folder}")
