"""A detector as :func:`~mas_core.guardrails.detector_build` returns it (:class:`Detector`), the error its settings
may raise (:class:`DetectorError`), and how a builder reads those settings (:class:`DetectorSettings`).

Each detector type has a builder, ``<type>_build(settings) -> Detector``, in the module of its concept (the
package's docstring lists them): it reads its settings key by key, compiles its patterns once and returns a
Detector around its scan, a function from a text and a :class:`Context` to spans.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from mas_core.guardrails.actions import EXCERPT_CHARS, span_excerpts
from mas_core.guardrails.findings import MAX_TEXT_CHARS, WHOLE_TEXT_LABELS, Context, Finding, Span


class DetectorError(ValueError):
    """A detector's settings that cannot be used; .field names the setting (e.g. "detector.patterns[1]"), str() says
    why."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, eq=False)
class Detector:
    """A detector built by :func:`detector_build`: immutable, and safe to share between threads (each check keeps
    its state to itself; RE2's compiled patterns may be used by many threads at once)."""

    type: str
    _scan: Callable[[str, Context], list[Span]] = field(repr=False, compare=False)
    # A detector that asks a model or a service (mas_core.guardrails.remote): its checked settings. The session
    # asks; find() refuses it.
    remote: dict[str, Any] | None = None

    def find(self, text: str, context: Context = Context()) -> list[Finding]:
        """Findings in ``text`` (its first MAX_TEXT_CHARS characters), ordered by where they start."""
        if not isinstance(text, str):
            raise TypeError(f"a detector looks at text (str), not {type(text).__name__}")
        if not isinstance(context, Context):
            raise TypeError(f"the context is a Context, not {type(context).__name__}")
        looked = text if self.type in WHOLE_TEXT_LABELS else text[:MAX_TEXT_CHARS]
        return self.findings(looked, self._scan(looked, context))

    @staticmethod
    def findings(looked: str, spans: list[Span]) -> list[Finding]:
        """Findings of ``spans`` found in ``looked``, ordered by where they start, with their excerpts."""
        spans = sorted(set(spans))
        # The excerpts show only what was looked at: past it, a value no check has seen may lie.
        return [Finding(label, start, end, shown)
                for (start, end, label), shown in zip(spans, span_excerpts(looked, spans, EXCERPT_CHARS))]


class DetectorSettings:
    """One detector's settings, read key by key; a key that no read asked for is refused by :meth:`done`."""

    def __init__(self, kind: str, settings: dict):
        self.kind = kind
        self.settings = settings
        self.read = {"type"}

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return self.settings.get(key, default)

    def field(self, key: str) -> str:
        return f"detector.{key}"

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise DetectorError(self.field(key), f"must be true or false, not {value!r}")
        return value

    def strings(self, key: str, *, most: int, longest: int, default: tuple[str, ...] | None = None) -> list[str]:
        value = self.get(key)
        if value is None and default is not None:
            return list(default)
        if not isinstance(value, (list, tuple)) or not value:
            raise DetectorError(self.field(key), "must be a non-empty list of strings")
        if len(value) > most:
            raise DetectorError(self.field(key), f"has {len(value)} items; at most {most} are allowed")
        for position, item in enumerate(value):
            if not isinstance(item, str) or not item.strip():
                raise DetectorError(f"{self.field(key)}[{position}]", f"must be a non-empty string, not {item!r}")
            if len(item) > longest:
                raise DetectorError(f"{self.field(key)}[{position}]",
                                    f"is {len(item)} characters long; at most {longest} are allowed")
        return list(value)

    def kinds(self, known: tuple[str, ...]) -> tuple[str, ...]:
        kinds = self.strings("kinds", most=len(known) * 2, longest=40, default=known)
        for position, kind in enumerate(kinds):
            if kind not in known:
                raise DetectorError(f"detector.kinds[{position}]", f"{kind!r} is not one of {', '.join(known)}")
        return tuple(dict.fromkeys(kinds))

    def done(self) -> None:
        for key in self.settings:
            if key not in self.read:
                name = key if isinstance(key, str) else repr(key)
                known = ", ".join(sorted(self.read - {"type"}))
                raise DetectorError(f"detector.{name}", f"is not a setting of a {self.kind} detector"
                                                         + (f" (it has: {known})" if known else " (it has none)"))
