"""The detectors whose finding is about the whole text, not a part of it (:data:`WHOLE_TEXT_LABELS`: mask leaves the
text as it is).

``json_schema`` (``schema``)
    The text must be a JSON document valid against the schema, read as an
    agent's typed output is read (:mod:`mas_core.outputs`: a ```json fence is
    allowed, a schema that asks for a string takes the text as it is). A text
    longer than :data:`MAX_TEXT_CHARS` is invalid, unread.
``length`` (``max_chars``, ``min_chars``: at least one)
    The text's length in characters (the whole text's, however long).
"""

from __future__ import annotations

from mas_core.guardrails.detector import Detector, DetectorError, DetectorSettings
from mas_core.guardrails.findings import MAX_TEXT_CHARS, Context, Span


def json_schema_build(settings: DetectorSettings) -> Detector:
    """The ``json_schema`` detector (see the module)."""
    from mas_core.outputs import schema_problem, value_errors  # jsonschema: imported by the first such guardrail

    schema = settings.get("schema")
    settings.done()
    if schema is None:
        raise DetectorError("detector.schema", "is required: the JSON Schema the text must match")
    problem = schema_problem(schema)
    if problem:
        raise DetectorError("detector.schema", problem)

    def scan(text: str, context: Context) -> list[Span]:
        if len(text) > MAX_TEXT_CHARS or value_errors(schema, text):
            return [(0, len(text), "json_schema")]
        return []

    return Detector("json_schema", scan)


def length_build(settings: DetectorSettings) -> Detector:
    """The ``length`` detector (see the module)."""
    bounds = {}
    for key in ("max_chars", "min_chars"):
        value = settings.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise DetectorError(f"detector.{key}", f"must be a whole number, 0 or more, not {value!r}")
        bounds[key] = value
    settings.done()
    most, least = bounds["max_chars"], bounds["min_chars"]
    if most is None and least is None:
        raise DetectorError("detector.max_chars", "a length detector needs max_chars, min_chars or both")
    if most is not None and least is not None and least > most:
        raise DetectorError("detector.min_chars", f"is {least}, above max_chars ({most})")

    def scan(text: str, context: Context) -> list[Span]:
        size = len(text)
        if (most is not None and size > most) or (least is not None and size < least):
            return [(0, size, "length")]
        return []

    return Detector("length", scan)
