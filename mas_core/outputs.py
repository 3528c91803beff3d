"""Typed outputs: JSON Schemas that an agent's answer or a step's output must match.

Plain Python over ``jsonschema``. A schema is checked when the definition is
saved (:func:`schema_problem`: the draft's meta-schema, size, depth, local
``$ref`` only); a value is checked when it is produced
(:func:`value_errors`). A text value is read as JSON unless the schema asks
for text (``type: string``, or an ``enum``/``const`` of strings), so a model
may answer ``{"score": 3}`` or ``approve`` as the schema wants.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import jsonschema
from referencing.exceptions import Unresolvable
from jsonschema.exceptions import ValidationError
from jsonschema.validators import extend, validator_for

from mas_core.patterns import PatternError
from mas_core.patterns import compiled as compiled_pattern
from mas_core.patterns import search as pattern_search

MAX_SCHEMA_CHARS = 16_000
MAX_SCHEMA_DEPTH = 20
MAX_ERRORS = 8  # listed to the model; the rest are counted
MAX_ERROR_CHARS = 300
FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)

# The tool error kind of a set_output value its schema refuses (the kernel counts corrective turns by it).
INVALID_OUTPUT = "invalid_output"


def _too_deep(value: Any, limit: int) -> bool:
    """Whether ``value`` nests mappings and lists more than ``limit`` levels (iterative: any depth is safe)."""
    todo = [(value, 0)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, (dict, list)):
            if depth >= limit:
                return True
            todo.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def _refs(value: Any) -> list[str]:
    if isinstance(value, dict):
        found = [value["$ref"]] if isinstance(value.get("$ref"), str) else []
        return found + [ref for item in value.values() for ref in _refs(item)]
    if isinstance(value, list):
        return [ref for item in value for ref in _refs(item)]
    return []


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` cannot be used as an output schema, or None."""
    if not isinstance(schema, dict):
        return "must be a JSON Schema object (a mapping such as {type: object, properties: …})"
    if _too_deep(schema, MAX_SCHEMA_DEPTH):
        return f"is nested more than {MAX_SCHEMA_DEPTH} levels deep"
    size = len(json.dumps(schema, ensure_ascii=False, default=str))
    if size > MAX_SCHEMA_CHARS:
        return f"is {size} characters long as JSON; at most {MAX_SCHEMA_CHARS} are allowed"
    if "$schema" in schema and validator_for(schema, default=None) is None:
        return f"$schema {schema['$schema']!r} is not a JSON Schema draft this server knows"
    validator = validator_for(schema)
    try:
        validator.check_schema(schema)
    except jsonschema.SchemaError as error:
        return f"is not a valid JSON Schema: {_short(error.message)} (at {error.json_path})"
    for pattern in _patterns(schema):
        try:
            compiled_pattern(pattern)
        except PatternError as error:
            return f"pattern {_short(pattern, 100)!r} cannot be used: {error}"
    for ref in _refs(schema):
        if not ref.startswith("#"):
            return f"$ref {ref!r} points outside the schema: only local references (#/…) are resolved"
        if not _resolves(schema, ref):
            return f"$ref {ref!r} points to nothing in the schema"
    return None


def _patterns(schema: Any) -> list[str]:
    """Every ``pattern`` keyword's text in ``schema`` (a property that is itself named "pattern" has a mapping)."""
    found, todo = [], [schema]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            if isinstance(item.get("pattern"), str):
                found.append(item["pattern"])
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return found


def _anchors(value: Any) -> set[str]:
    if isinstance(value, dict):
        own = {value[key] for key in ("$anchor", "$dynamicAnchor") if isinstance(value.get(key), str)}
        return own.union(*(_anchors(item) for item in value.values()))
    if isinstance(value, list):
        return set().union(*(_anchors(item) for item in value))
    return set()


def _resolves(schema: dict[str, Any], ref: str) -> bool:
    """Whether a local ``$ref`` (``#``, ``#/json/pointer`` or ``#anchor``) names a part of ``schema``."""
    fragment = ref[1:]
    if not fragment.startswith("/"):
        return fragment == "" or fragment in _anchors(schema)
    node: Any = schema
    for part in fragment[1:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def is_text_schema(schema: dict[str, Any]) -> bool:
    """True when the schema wants text as it is (not JSON to parse)."""
    if schema.get("type") == "string":
        return True
    if "type" in schema:
        return False
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return all(isinstance(item, str) for item in schema["enum"])
    return isinstance(schema.get("const"), str)


def _pattern(validator, pattern, instance, schema):
    # A team's (or an MCP server's) `pattern` meets a model's text: RE2, linear whatever the pattern.
    if not validator.is_type(instance, "string"):
        return
    try:
        found = pattern_search(pattern, instance)
    except PatternError as error:
        yield ValidationError(f"the schema's pattern {pattern!r} cannot be used: {error}")
        return
    if not found:
        yield ValidationError(f"{_short(repr(instance), 100)} does not match {pattern!r}")


_validators: dict[type, type] = {}


def validator(schema: dict[str, Any]):
    """A jsonschema validator for ``schema`` whose ``pattern`` keyword matches with RE2 (mas_core.patterns)."""
    base = validator_for(schema)
    if base not in _validators:
        _validators[base] = extend(base, {"pattern": _pattern})
    return _validators[base](schema)



def _short(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def value_of(schema: dict[str, Any], value: Any) -> tuple[Any, str]:
    """The value to check: text read as JSON unless the schema wants text; and a note when it is not JSON."""
    if not isinstance(value, str):
        return value, ""
    text = value.strip()
    if is_text_schema(schema):
        return text, ""
    fenced = FENCE.match(text)
    try:
        return json.loads(fenced[1] if fenced else text), ""
    except RecursionError:
        return text, "it is JSON nested too deeply to read, so it was checked as text"
    except ValueError as error:
        reason = getattr(error, "msg", str(error))
        where = f" at line {error.lineno} column {error.colno}" if hasattr(error, "lineno") else ""
        return text, f"it is not JSON ({reason}{where}), so it was checked as text"


def value_errors(schema: dict[str, Any], value: Any) -> list[str]:
    """What is wrong with ``value`` under ``schema``: one line per error, with its path (``$.a[0]``)."""
    candidate, note = value_of(schema, value)
    try:
        found = list(itertools.islice(validator(schema).iter_errors(candidate), 50))
    except Unresolvable as error:  # a local $ref that leads nowhere
        return [f"$: the schema cannot be applied: {_short(str(error))}"]
    except RecursionError:  # a value (or a recursive $ref) deeper than Python's stack
        return ["$: the value is nested too deeply to check"]
    errors = [f"{error.json_path}: {_short(error.message)}" for error in sorted(found, key=lambda e: e.json_path)]
    if errors and note:
        errors.insert(0, f"$: {note}")
    return errors


def describe(errors: list[str]) -> str:
    """The errors as a bullet list, at most :data:`MAX_ERRORS` of them."""
    lines = [f"- {error}" for error in errors[:MAX_ERRORS]]
    if len(errors) > MAX_ERRORS:
        lines.append(f"- … and {len(errors) - MAX_ERRORS} more")
    return "\n".join(lines)


def answer_check(*, schema: dict[str, Any] | None, step_schemas: dict[str, Any] | None = None,
                 answer_output: str | None = None, outputs_set: set[str] | frozenset = frozenset()):
    """The loop's ``output_check`` for a session: the agent's output schema, and a workflow step's schema
    for the output its final answer fills (its only declared output, unless set_output set it —
    ``outputs_set`` grows as it does). None when there is nothing to check."""
    step_schemas = step_schemas or {}
    if schema is None and answer_output not in step_schemas:
        return None

    def check(answer: str) -> str | None:
        errors = value_errors(schema, answer) if schema is not None else []
        if answer_output in step_schemas and answer_output not in outputs_set:
            errors += [f"output {answer_output}: {error}" for error in value_errors(step_schemas[answer_output], answer)]
        return describe(errors) if errors else None

    return check


def schema_text(schema: dict[str, Any]) -> str:
    return json.dumps(schema, ensure_ascii=False, indent=2)


def answer_format(schema: dict[str, Any]) -> str:
    """What the system prompt tells an agent that declares an output schema."""
    what = "text" if is_text_schema(schema) else "JSON only (no prose around it)"
    return (f"Your final answer (the message you end with, without tool calls) must be {what}, matching this "
            f"JSON Schema:\n\n```json\n{schema_text(schema)}\n```")


def correction(errors: str) -> str:
    """The corrective turn: the user message that tells the model what its answer got wrong."""
    return ("Your answer does not match the output schema it must follow:\n"
            f"{errors}\n\n"
            "Answer again with only the corrected answer. This is your one chance to correct it: "
            "an answer that still does not match fails the task.")


__all__ = ["INVALID_OUTPUT", "answer_check", "validator", "answer_format", "correction", "describe", "is_text_schema", "schema_problem",
           "schema_text", "value_errors", "value_of"]
