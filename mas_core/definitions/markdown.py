"""Markdown with YAML frontmatter ⇄ validated definitions.

``parse_definition`` never half-accepts a file: it returns a complete
:class:`ParsedDefinition` or raises :class:`DefinitionError` naming the file,
the line and the field. ``render_definition`` is canonical, so
render → parse → render is byte-identical.
"""

from __future__ import annotations

import datetime
import hashlib
import math
import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from mas_core.definitions.kinds import Kind
from mas_core.definitions.yaml_loader import YamlLimitError, YamlLimits, data_limit_problem, yaml_load

FRONTMATTER_FENCE = "---"

# Claude Code subagent files: tool names and model aliases mapped to MAS.
CLAUDE_TOOL_MAP: dict[str, str] = {
    "Read": "vfs_read",
    "Write": "vfs_write",
    "Edit": "vfs_edit",
    "MultiEdit": "vfs_edit",
    "Grep": "vfs_search",
    "Glob": "vfs_list",
    "LS": "vfs_list",
    "Bash": "code_exec",
    "WebFetch": "web_fetch",
    "WebSearch": "web_search",
    "Task": "spawn_agent",
}
CLAUDE_MODEL_TIERS: dict[str, str | None] = {"haiku": "small", "sonnet": "medium", "opus": "large", "inherit": None}


class DefinitionError(ValueError):
    """A definition that cannot be accepted; says where and why."""

    def __init__(self, message: str, *, path: str = "", line: int | None = None, field: str = "") -> None:
        self.path, self.line, self.field, self.message = path, line, field, message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.path or "<definition>"
        if self.line:
            where += f":{self.line}"
        return f"{where}: {self.field + ': ' if self.field else ''}{self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "field": self.field, "message": self.message}


@dataclass
class ParsedDefinition:
    kind: Kind
    spec: BaseModel
    extra: dict[str, Any]
    body: str
    warnings: list[str] = field(default_factory=list)

    @property
    def slug_name(self) -> str:
        return self.spec.name  # type: ignore[attr-defined]

    def spec_data(self) -> dict[str, Any]:
        return spec_to_data(self.spec)


def spec_to_data(spec: BaseModel) -> dict[str, Any]:
    """The canonical JSON form of a spec: defaults left out, field order kept."""
    return spec.model_dump(mode="json", exclude_defaults=True)


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def normalize_body(body: str) -> str:
    body = body.replace("\r\n", "\n").replace("\r", "\n")
    return body.strip("\n").rstrip()


# -- rendering ---------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        # The loader counts what aliases repeat; the canonical form has none.
        return True


_YAML_ONLY_BREAKS = "\x85\u2028\u2029"


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Multi-line text (contexts, prompts) reads best as a literal block; the
    # emitter falls back to a quoted style when a block cannot hold the value.
    style = "|" if "\n" in value else None
    if any(ch in value for ch in _YAML_ONLY_BREAKS):
        # YAML reads NEL/LS/PS as line breaks and folds them in block and
        # single-quoted scalars; only the escapes of a double-quoted one
        # (\N, \L, \P) bring them back.
        style = '"'
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


def dump_yaml(data: dict[str, Any]) -> str:
    if not data:
        return ""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=10_000)


def render_definition(*, spec: dict[str, Any], extra: dict[str, Any], body: str) -> str:
    frontmatter = dump_yaml({**spec, **{k: v for k, v in extra.items() if k not in spec}})
    text = f"{FRONTMATTER_FENCE}\n{frontmatter}{FRONTMATTER_FENCE}\n"
    body = normalize_body(body)
    if body:
        text += f"\n{body}\n"
    return text


# -- parsing -----------------------------------------------------------------


def split_frontmatter(text: str, *, path: str) -> tuple[str, str]:
    """Return (frontmatter YAML, body). The YAML starts on line 2 of the file."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != FRONTMATTER_FENCE:
        raise DefinitionError("must start with a '---' line opening the YAML frontmatter", path=path, line=1)
    for index in range(1, len(lines)):
        # Only an unindented fence closes: "  ---" inside a literal block
        # (a context or prompt with a horizontal rule) is part of the value.
        if lines[index].rstrip() == FRONTMATTER_FENCE:
            return "\n".join(lines[1:index]) + "\n", "\n".join(lines[index + 1 :])
    raise DefinitionError("frontmatter opened with '---' is never closed", path=path, line=1)


_PLAIN_KEY_LINE = re.compile(r"^(?P<key>[A-Za-z_][\w-]*):[ \t]+(?P<value>[^\s'\"\[{|>&*!#].*:\s.*)$")


def _relaxed_yaml(yaml_text: str) -> tuple[str, list[int]]:
    """Quote plain top-level values that contain ': ', as other agent tools read them."""
    fixed, changed = [], []
    for number, line in enumerate(yaml_text.split("\n"), start=2):
        match = _PLAIN_KEY_LINE.match(line)
        if match:
            value = match["value"].rstrip()
            fixed.append(f"{match['key']}: {yaml.safe_dump(value, width=10_000, allow_unicode=True).strip()}")
            fixed[-1] = fixed[-1].removesuffix("\n...")
            changed.append(number)
        else:
            fixed.append(line)
    return "\n".join(fixed), changed


def _yaml_error(error: yaml.YAMLError, yaml_text: str, *, path: str) -> DefinitionError:
    problem_mark = getattr(error, "problem_mark", None)
    context_mark = getattr(error, "context_mark", None)
    mark = problem_mark or context_mark
    if context_mark is not None and problem_mark is not None and problem_mark.index >= len(yaml_text.rstrip()):
        # Ran off the end (an unclosed bracket or quote): where it was opened
        # says more than the closing '---' does.
        mark = context_mark
    line = mark.line + 2 if mark is not None else None
    problem = getattr(error, "problem", None) or str(error)
    context = getattr(error, "context", None)
    if context and context_mark is not None:
        problem += f" ({context} on line {context_mark.line + 2})"
    return DefinitionError(f"invalid YAML: {problem}", path=path, line=line)


def _limit_error(error: YamlLimitError, *, path: str) -> DefinitionError:
    mark = error.problem_mark
    return DefinitionError(error.problem, path=path, line=mark.line + 2 if mark is not None else None)


def load_frontmatter(yaml_text: str, *, path: str) -> tuple[dict[str, Any], yaml.Node | None, list[str]]:
    warnings: list[str] = []
    try:
        data, node = yaml_load(yaml_text)
    except YamlLimitError as error:
        raise _limit_error(error, path=path) from None
    except yaml.YAMLError as error:
        relaxed, changed = _relaxed_yaml(yaml_text)
        if not changed:
            raise _yaml_error(error, yaml_text, path=path) from None
        try:
            data, node = yaml_load(relaxed)
        except YamlLimitError as relaxed_error:
            raise _limit_error(relaxed_error, path=path) from None
        except yaml.YAMLError as relaxed_error:
            # The lenient reading keeps every line where it was, and what it
            # still cannot read is the error worth showing.
            raise _yaml_error(relaxed_error, relaxed, path=path) from None
        warnings.extend(
            f"{path}:{number}: value contains ': ' and was read as plain text to the end of the line"
            for number in changed
        )
    if data is None:
        data, node = {}, None
    if not isinstance(data, dict):
        raise DefinitionError("frontmatter must be a mapping of keys to values", path=path, line=2)
    return data, node, warnings


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """The file line of the deepest node on ``loc`` that exists."""
    line = None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if key_node.value == str(part):
                    line, node = key_node.start_mark.line + 2, value_node
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 2
        else:
            return line
    return line


def _claude_agent(data: dict[str, Any], *, path: str, warnings: list[str]) -> dict[str, Any]:
    """Map a Claude Code subagent's frontmatter to MAS fields; keep what is unknown."""
    data = dict(data)
    tools = data.get("tools")
    if isinstance(tools, str):
        names = [name.strip() for name in tools.split(",") if name.strip()]
        mapped: list[str] = []
        unknown: list[str] = []
        for name in names:
            target = CLAUDE_TOOL_MAP.get(name)
            if target is None:
                unknown.append(name)
            elif target not in mapped:
                mapped.append(target)
        data["tools"] = mapped
        if unknown:
            data["unmapped_tools"] = unknown
            warnings.append(f"{path}: tools {', '.join(unknown)} have no MAS equivalent; kept in unmapped_tools")
    model = data.get("model")
    if isinstance(model, str) and model in CLAUDE_MODEL_TIERS:
        del data["model"]
        tier = CLAUDE_MODEL_TIERS[model]
        if tier and "tier" not in data:
            data["tier"] = tier
        warnings.append(f"{path}: model alias {model!r} read as tier {tier or 'default'}")
    return data


def is_foreign_agent(data: dict[str, Any]) -> bool:
    """True for agent files written for other tools (comma-string tools, model aliases)."""
    model = data.get("model")
    return isinstance(data.get("tools"), str) or (isinstance(model, str) and model in CLAUDE_MODEL_TIERS)


def parse_definition(
    kind: Kind, text: str, *, path: str = "", context: dict[str, Any] | None = None
) -> ParsedDefinition:
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise DefinitionError("contains a NUL character: this is not a text file MAS can store", path=path, line=line)
    yaml_text, body = split_frontmatter(text, path=path)
    data, node, warnings = load_frontmatter(yaml_text, path=path)
    if kind.name == "agent" and is_foreign_agent(data):
        data = _claude_agent(data, path=path, warnings=warnings)
    return validate_definition(kind, data, body=body, path=path, node=node, warnings=warnings, context=context)


def validate_definition(
    kind: Kind,
    data: dict[str, Any],
    *,
    body: str = "",
    path: str = "",
    node: yaml.Node | None = None,
    warnings: list[str] | None = None,
    context: dict[str, Any] | None = None,
) -> ParsedDefinition:
    """Validate frontmatter ``data`` against the kind's schema; split off unknown keys."""
    warnings = list(warnings or [])
    # Data from JSON meets the limits of the YAML it is stored as (from YAML it already did).
    problem = data_limit_problem(data)
    if problem is not None:
        loc, message = problem
        raise DefinitionError(message, path=path, line=_line_of(node, loc), field=".".join(map(str, loc)))
    # PostgreSQL text and jsonb cannot hold NUL, and UTF-8 no lone surrogate;
    # YAML escapes can make both ("\0", "\ud800"): refuse them here.
    if _UNSTORABLE.search(body):
        raise DefinitionError(_UNSTORABLE_MESSAGE, path=path, field="body")
    bad_at = _unstorable_location(data, ())
    if bad_at is not None:
        raise DefinitionError(
            _UNSTORABLE_MESSAGE, path=path, line=_line_of(node, bad_at), field=".".join(map(str, bad_at))
        )
    known = set(kind.spec.model_fields)
    unknown = [key for key in data if key not in known]
    extra: dict[str, Any] = {}
    if unknown:
        if not kind.keeps_unknown_keys:
            key = unknown[0]
            raise DefinitionError(
                f"unknown field (allowed: {', '.join(kind.spec.model_fields)})",
                path=path,
                line=_line_of(node, (key,)),
                field=str(key),
            )
        for key in unknown:
            try:
                extra[str(key)] = _json_value(data[key])
            except ValueError as error:
                raise DefinitionError(str(error), path=path, line=_line_of(node, (key,)), field=str(key)) from None
            if extra[str(key)] != data[key]:
                warnings.append(f"{path or kind.name}: {key}: kept as JSON text: {extra[str(key)]!r}")
        warnings.append(f"{path or kind.name}: unknown keys kept as they are: {', '.join(map(str, unknown))}")
    try:
        spec = kind.spec.model_validate({k: v for k, v in data.items() if k in known}, context=context)
    except ValidationError as error:
        first = error.errors()[0]
        loc = tuple(first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "missing":
            message = "required field is missing"
        return_field = ".".join(str(part) for part in loc)
        line = _line_of(node, loc) if loc else None
        if not loc:
            # A whole-model check; its message starts with the field it
            # concerns ("steps[1].agent: …", "url: …", "command/args/env: …").
            head = _MESSAGE_FIELD.match(message)
            if head and re.split(r"[\[./]", head["path"], maxsplit=1)[0] in known:
                return_field, message = head["path"], head["rest"]
                line = _line_of(node, _field_loc(return_field.split("/", 1)[0]))
        raise DefinitionError(message, path=path, line=line, field=return_field) from None
    parsed = ParsedDefinition(kind=kind, spec=spec, extra=extra, body=normalize_body(body), warnings=warnings)
    # Block style indents: a small JSON body nested deep can render to megabytes
    # of YAML, which no later import or edit of the file could load.
    size, limit = len(dump_yaml({**parsed.spec_data(), **extra})), YamlLimits.from_settings().max_chars
    if size > limit:
        raise DefinitionError(
            f"the YAML frontmatter is {size} characters in canonical form; YAML is limited to {limit} "
            "(limit MAS_MAX_DEFINITION_BYTES)", path=path)
    return parsed


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_UNSTORABLE_MESSAGE = "contains a NUL character or a lone surrogate, which cannot be stored"


def _unstorable_location(value: Any, loc: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """Where in ``value`` the first string is that the database cannot store."""
    if isinstance(value, str):
        return loc if _UNSTORABLE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and _UNSTORABLE.search(key):
                return (*loc, key)
            found = _unstorable_location(item, (*loc, key))
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _unstorable_location(item, (*loc, index))
            if found is not None:
                return found
    return None


def _json_value(value: Any) -> Any:
    """An unknown key's value as the JSON column stores it.

    YAML reads ``2024-01-01`` as a date and ``.inf`` as a float JSON cannot
    hold: dates become their ISO text, the rest is refused here rather than
    by the database.
    """
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value!r} cannot be kept: only finite numbers fit in JSON")
    if isinstance(value, dict):
        return {str(key): _json_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_value(item) for item in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise ValueError(
        f"a value of YAML type {type(value).__name__} cannot be kept: use text, numbers, lists or mappings"
    )


_MESSAGE_FIELD = re.compile(r"^(?P<path>[A-Za-z_][\w\[\]./]*): (?P<rest>.+)$", re.DOTALL)


def _field_loc(path: str) -> tuple[Any, ...]:
    """``steps[1].agent`` → ``("steps", 1, "agent")``, the form of pydantic's ``loc``."""
    loc: list[Any] = []
    for part in path.split("."):
        name, *indexes = part.split("[")
        loc.append(name)
        loc.extend(int(index.rstrip("]")) for index in indexes if index.rstrip("]").isdigit())
    return tuple(loc)


def render_parsed(parsed: ParsedDefinition) -> str:
    return render_definition(spec=parsed.spec_data(), extra=parsed.extra, body=parsed.body)
