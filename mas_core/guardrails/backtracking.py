"""Patterns that backtrack catastrophically (:func:`backtracking_problem`), which the ``pattern`` detector refuses.

RE2 never backtracks, but a team's pattern is often copied to an engine that does (Python's ``re``, a JavaScript
validator, a database), and we refuse what is dangerous there.

The check is static, on Python's own parse of the pattern
(``re._parser``): an unbounded repetition that repeats another unbounded
repetition, unless the two cannot share out a run of text — a literal
character that neither can match comes between them on every way round
(``(\\w+\\.)*`` and ``(\\d+, ?)*`` pass; ``(a+)+``, ``(a*)*``,
``(\\w+\\s?)*$``, ``(\\s*,\\s*)*`` do not); and an unbounded repetition
whose alternatives or optional parts can match the same text
(``(a|aa)+``, ``(.|\\s)*``). It is a heuristic: it refuses a few safe
patterns such as ``(ab|ac|d)+``, and does not see an ambiguity that
Python's parser folds into a character class (``(\\w|\\d)+``). A pattern
Python cannot parse (RE2-only syntax such as ``\\Q…\\E``) goes by RE2's
verdict alone.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from re import _constants as sre
from re import _parser as sre_parse
from typing import Any, Callable

_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)
_CHARACTERS = (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN)
_ZERO_WIDTH = (sre.AT, sre.ASSERT, sre.ASSERT_NOT)
# Characters tried when asking whether two character sets share one (with those the sets name themselves).
_PROBES = "aAzZ09_ \t\n.,;:-/@#\"'()[]{}é٣\x00~"
_INLINE_FLAGS = re.compile(r"\(\?[imsU\-]+\)")
_MAX_DEPTH = 100
_NESTED = ("a repetition repeats another repetition with nothing between them that only one of them can match, "
           "as in (a+)+ or (\\w+\\s?)*")
_AMBIGUOUS = "a repetition's alternatives or optional parts can match the same text, as in (a|aa)+"


def backtracking_problem(pattern: str, *, ignore_case: bool = False) -> str | None:
    """Why ``pattern`` backtracks catastrophically in a backtracking engine (see the module), or None: a static look
    at Python's parse of it; None when Python cannot parse it."""
    source, flagged = _python_syntax(pattern)
    if source is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parsed = sre_parse.parse(source)
    except Exception:  # re.error, RecursionError, OverflowError: RE2 has already accepted it, its verdict stands
        return None
    flags = parsed.state.flags
    how = _How(ignore_case or flagged or bool(flags & re.IGNORECASE), flagged or bool(flags & re.DOTALL))
    reason = _walk(list(parsed), how, 0)
    if reason is None:
        return None
    return (f"backtracks catastrophically in a backtracking engine: {reason}. MAS matches with RE2, which does not "
            "backtrack, but a pattern is often copied to engines that do, where such a pattern can hold a "
            "processor for hours on a short text; write it so that each character can be matched in one way only")


def _python_syntax(pattern: str) -> tuple[str | None, bool]:
    """``pattern`` in Python's syntax where RE2's differs (\\pL, \\z, \\C, \\x{…}, inline flags anywhere), and whether
    it had inline flags (then taken as case-insensitive and dot-all, the cautious way); None if it cannot be."""
    flagged = bool(_INLINE_FLAGS.search(pattern))
    out, index = [], 0
    while index < len(pattern):
        char = pattern[index]
        if char == "(" and (inline := _INLINE_FLAGS.match(pattern, index)):
            index = inline.end()
            continue
        if char != "\\" or index + 1 == len(pattern):
            out.append(char)
            index += 1
            continue
        escaped = pattern[index + 1]
        if escaped in "pP":
            if pattern[index + 2:index + 3] == "{":
                close = pattern.find("}", index + 3)
                if close == -1:
                    return None, flagged
                index = close + 1
            else:
                index += 3
            out.append("\\w" if escaped == "p" else "\\W")
        elif escaped == "x" and pattern[index + 2:index + 3] == "{":
            close = pattern.find("}", index + 3)
            try:
                out.append(f"\\U{int(pattern[index + 3:close], 16):08x}")
            except ValueError:
                return None, flagged
            if close == -1:
                return None, flagged
            index = close + 1
        else:
            out.append({"z": "\\Z", "C": "."}.get(escaped, "\\" + escaped))
            index += 2
    return "".join(out), flagged


@dataclass(frozen=True)
class _How:
    ignore_case: bool
    dot_all: bool


def _walk(items: list, how: _How, depth: int) -> str | None:
    if depth > _MAX_DEPTH:
        return f"it nests more than {_MAX_DEPTH} levels deep"
    for op, av in items:
        inner: list[list] = []
        if op in _REPEATS:
            low, high, body = av
            if high == sre.MAXREPEAT and op != sre.POSSESSIVE_REPEAT:
                reason = _repeat_problem(_unwrapped(list(body)), how)
                if reason:
                    return reason
            inner = [list(body)]
        elif op == sre.SUBPATTERN:
            inner = [list(av[3])]
        elif op == sre.BRANCH:
            inner = [list(branch) for branch in av[1]]
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            inner = [list(av[1])]
        elif op == sre.ATOMIC_GROUP:
            inner = [list(av)]
        elif op == sre.GROUPREF_EXISTS:
            inner = [list(part) for part in av[1:] if part is not None]
        for part in inner:
            reason = _walk(part, how, depth + 1)
            if reason:
                return reason
    return None


def _unwrapped(items: list) -> list:
    while len(items) == 1 and items[0][0] == sre.SUBPATTERN:
        items = list(items[0][1][3])
    return items


def _unbounded_count(items: list) -> int:
    count = 0
    for op, av in items:
        if op in _REPEATS:
            count += (av[1] == sre.MAXREPEAT) + _unbounded_count(list(av[2]))
        elif op == sre.SUBPATTERN:
            count += _unbounded_count(list(av[3]))
        elif op == sre.BRANCH:
            count += sum(_unbounded_count(list(branch)) for branch in av[1])
        elif op == sre.ATOMIC_GROUP:
            count += _unbounded_count(list(av))
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            count += _unbounded_count(list(av[1]))
    return count


def _repeat_problem(items: list, how: _How) -> str | None:
    """Why the body ``items`` of an unbounded repetition makes it backtrack catastrophically, or None."""
    unbounded = [index for index, item in enumerate(items) if _unbounded_count([item])]
    if any(_unbounded_count([items[index]]) > 1 for index in unbounded):
        return _NESTED
    # Going round the repetition, from each inner repetition to the next (or to itself, in the next round), the two
    # must not be able to share out a run of text: a literal character that the first cannot match must follow it,
    # and one that the second cannot match must precede it, with nothing they can match in between ((\d+, ?)*
    # passes); or, when they are two, they and what comes between them must match different characters ((a+b+)*).
    for position, index in enumerate(unbounded):
        following = unbounded[(position + 1) % len(unbounded)]
        between = items[index + 1:following] if following > index else items[index + 1:] + items[:following]
        first, second = _characters([items[index]]), _characters([items[following]])
        if _fenced(between, first, how) and _fenced(between[::-1], second, how):
            continue
        inside = _characters(between)
        if following == index or _overlap(first, second, how) or _overlap(inside, first + second, how):
            return _NESTED
    body_first, _ = _first(items)
    for index, (op, av) in enumerate(items):
        if op == sre.BRANCH and _overlapping_branches(av[1], how):
            return _AMBIGUOUS
        first, empty = _first([(op, av)])
        if empty and first:
            after, after_empty = _first(items[index + 1:])
            if _overlap(first, after + (body_first if after_empty else []), how):
                return _AMBIGUOUS
    return None


def _fenced(items: list, nodes: list, how: _How) -> bool:
    """Whether ``items`` hold a literal character that none of ``nodes`` matches, with nothing before it that they
    can match."""
    for op, av in items:
        if op == sre.LITERAL and not _accepts(nodes, chr(av), how):
            return True
        if _overlap(_characters([(op, av)]), nodes, how):
            return False
    return False


def _overlapping_branches(branches, how: _How) -> bool:
    firsts = [_first(list(branch))[0] for branch in branches]
    return any(_overlap(a, b, how) for position, a in enumerate(firsts) for b in firsts[position + 1:])


def _first(items: list) -> tuple[list, bool]:
    """The character nodes a match of ``items`` can start with, and whether it can match nothing."""
    nodes: list = []
    for op, av in items:
        if op in _CHARACTERS:
            return nodes + [(op, av)], False
        if op in _REPEATS:
            inner, empty = _first(list(av[2]))
            nodes += inner
            if not (empty or av[0] == 0):
                return nodes, False
        elif op == sre.SUBPATTERN:
            inner, empty = _first(list(av[3]))
            nodes += inner
            if not empty:
                return nodes, False
        elif op == sre.ATOMIC_GROUP:
            inner, empty = _first(list(av))
            nodes += inner
            if not empty:
                return nodes, False
        elif op == sre.BRANCH:
            results = [_first(list(branch)) for branch in av[1]]
            nodes += [node for inner, _ in results for node in inner]
            if not any(empty for _, empty in results):
                return nodes, False
        elif op not in _ZERO_WIDTH:
            nodes.append((sre.ANY, None))  # a back-reference or the like: anything, to be safe
    return nodes, True


def _characters(items: list) -> list:
    """Every character node inside ``items``, at any depth."""
    nodes = []
    for op, av in items:
        if op in _CHARACTERS:
            nodes.append((op, av))
        elif op in _REPEATS:
            nodes += _characters(list(av[2]))
        elif op == sre.SUBPATTERN:
            nodes += _characters(list(av[3]))
        elif op == sre.BRANCH:
            nodes += [node for branch in av[1] for node in _characters(list(branch))]
        elif op == sre.ATOMIC_GROUP:
            nodes += _characters(list(av))
        elif op not in _ZERO_WIDTH:
            nodes.append((sre.ANY, None))
    return nodes


def _overlap(a: list, b: list, how: _How) -> bool:
    probes = set(_PROBES) | _named(a) | _named(b)
    return any(_accepts(a, char, how) and _accepts(b, char, how) for char in probes)


def _named(nodes: list) -> set[str]:
    """The characters a list of nodes names (literals, ends of ranges): where two sets may meet."""
    chars = set()
    for op, av in nodes:
        if op in (sre.LITERAL, sre.NOT_LITERAL):
            chars.add(chr(av))
        elif op == sre.IN:
            for item_op, item_av in av:
                if item_op in (sre.LITERAL, sre.NOT_LITERAL):
                    chars.add(chr(item_av))
                elif item_op in (sre.RANGE, sre.RANGE_UNI_IGNORE):
                    chars.update((chr(item_av[0]), chr(item_av[1])))
    return {variant for char in chars for variant in (char, char.lower(), char.upper()) if len(variant) == 1}


_CATEGORY_TESTS: dict[Any, Callable[[str], bool]] = {
    sre.CATEGORY_DIGIT: str.isdecimal,
    sre.CATEGORY_NOT_DIGIT: lambda char: not char.isdecimal(),
    sre.CATEGORY_SPACE: str.isspace,
    sre.CATEGORY_NOT_SPACE: lambda char: not char.isspace(),
    sre.CATEGORY_WORD: lambda char: char.isalnum() or char == "_",
    sre.CATEGORY_NOT_WORD: lambda char: not (char.isalnum() or char == "_"),
}


def _accepts(nodes: list, char: str, how: _How) -> bool:
    """Whether any of the character nodes matches ``char`` (in either case when the pattern ignores case)."""
    variants = {char, char.lower(), char.upper()} if how.ignore_case else {char}
    for op, av in nodes:
        if op == sre.LITERAL and chr(av) in variants:
            return True
        if op == sre.NOT_LITERAL and variants != {chr(av)}:
            return True
        if op == sre.ANY and (how.dot_all or char != "\n"):
            return True
        if op == sre.IN and any(_in_set(av, variant) for variant in variants):
            return True
    return False


def _in_set(items: list, char: str) -> bool:
    negate = bool(items) and items[0][0] == sre.NEGATE
    found = False
    for op, av in items[1:] if negate else items:
        if op == sre.LITERAL:
            found = chr(av) == char
        elif op in (sre.RANGE, sre.RANGE_UNI_IGNORE):
            found = av[0] <= ord(char) <= av[1]
        elif op == sre.CATEGORY:
            found = _CATEGORY_TESTS.get(av, lambda _: True)(char)
        else:
            found = True  # something this check does not model: it may match
        if found:
            break
    return found != negate
