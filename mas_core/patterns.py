"""Regular expressions that someone else wrote: a team's schema, a model's search. RE2, never backtracking.

Python's ``re`` backtracks: ``^(a+)+$`` over forty ``a`` and a ``!`` runs for
hours, holding the thread (and, on a worker, the event loop every session
shares). RE2 (``google-re2``) matches in time linear in the text, whatever the
pattern, so every pattern that reaches MAS from a model or a definition is
compiled here. The semantics are RE2's: no look-around and no backreferences
(such a pattern is refused with RE2's reason); ``\\d``, ``\\w``, ``(?i)``,
classes, alternation and repetition work as in Python.

:func:`off_loop` runs CPU-bound work (a search over files, HTML to text, a
large JSON document) on a small pool of its own, so a coroutine that calls it
never holds its event loop.
"""

from __future__ import annotations

import asyncio
import functools
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

import re2

T = TypeVar("T")

MAX_PATTERN_CHARS = 1_000
# RE2's own budget for a compiled program (its DFA caches included): a pattern past it is refused, not slow.
MAX_PATTERN_MEMORY = 8 * 1024 * 1024
MAX_PROGRAM_SIZE = 20_000

_cpu_pool = ThreadPoolExecutor(int(os.environ.get("MAS_CPU_THREADS", "2")), thread_name_prefix="mas-cpu")


class PatternError(ValueError):
    """A pattern that cannot be used: too long, too big, or syntax RE2 does not have."""


def re2_options() -> re2.Options:
    """RE2's options for every pattern of MAS: errors as exceptions only, memory bounded."""
    options = re2.Options()
    options.log_errors = False  # the reason comes back in the exception; RE2 would also print it to stderr
    options.max_mem = MAX_PATTERN_MEMORY
    return options


@functools.lru_cache(maxsize=256)
def compiled(pattern: str):
    """``pattern`` compiled by RE2 (cached), or :class:`PatternError` saying why it cannot be."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"the pattern is {len(pattern)} characters long; at most {MAX_PATTERN_CHARS} are allowed")
    try:
        regex = re2.compile(pattern, options=re2_options())
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise PatternError(f"{reason} (patterns use RE2 syntax: no look-around or backreferences)") from None
    if regex.programsize > MAX_PROGRAM_SIZE:
        raise PatternError(f"the pattern compiles to {regex.programsize} instructions; at most {MAX_PROGRAM_SIZE} "
                           "are allowed (large counted repetitions such as {1000} multiply it)")
    return regex


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text`` (linear time); :class:`PatternError` if unusable."""
    return compiled(pattern).search(text) is not None


async def off_loop(func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run ``func`` on the CPU pool and await it: the caller's event loop stays free meanwhile.

    A cancelled caller stops waiting at once; ``func`` itself runs on to its own bound (give it one).
    """
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_cpu_pool, functools.partial(func, *args, **kwargs))


__all__ = ["MAX_PATTERN_CHARS", "PatternError", "compiled", "off_loop", "search"]
