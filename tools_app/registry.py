"""The tools of one session: validated on register, offered as schemas, called safely.

``ToolRegistry.call`` never raises for anything a tool or the model did: an
unknown tool, arguments that fail validation, a :class:`ToolError` or any
other exception all come back as a :class:`ToolOutcome` with ``ok=False`` and
text the model can read and act on (SPEC §3).
"""

from __future__ import annotations

import functools
import dataclasses
import json
import logging
import pickle
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import django.db
import psycopg
from pydantic import BaseModel, ValidationError

from mas_core.llm_types import ToolSchema
from mas_core.looplag import watched
from tools_app.catalog import BUILTIN_TOOLS, SAFE_DEFAULT_TOOLS
from tools_app.plugin import Tool, ToolAborted, ToolContext, ToolError, ToolSuspended

# The database went away under a tool: not the tool's failure, and not for the model to handle. The
# session stops where it is and is resumed from its last checkpoint (see agents_app.execution.session).
DATABASE_ERRORS = (django.db.OperationalError, django.db.InterfaceError, psycopg.OperationalError,
                   psycopg.InterfaceError)

logger = logging.getLogger(__name__)

# Results longer than this are cut (with a marker) before the model sees them.
MAX_RESULT_CHARS = 100_000


@dataclass(frozen=True)
class ToolResult:
    """What a handler may return to give the model text and the kernel structured data."""

    content: str
    data: Any = None


@dataclass(frozen=True)
class ToolOutcome:
    """A call's result as the kernel records it and the model reads it.

    ``error_kind``: None when ok; ``unknown_tool``, ``invalid_arguments``,
    ``tool_error`` (a ToolError, or an unexpected exception — then ``data``
    holds ``{"exception": "<type>"}``), or the ``kind`` attribute of a raised
    ToolError when it carries one (e.g. ``policy_denied`` from a limit).
    """

    ok: bool
    content: str
    data: Any = None
    error_kind: str | None = None


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(_jsonable(value), ensure_ascii=False, default=str)


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[truncated: {len(text) - limit} more characters]"


# --- JSON schema for providers ------------------------------------------------


def _inline_refs(node: Any, defs: dict[str, Any], depth: int = 0) -> Any:
    if depth > 20:
        raise ValueError("parameters schema nests too deeply (recursive model?)")
    if isinstance(node, dict):
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            target = {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
            return _inline_refs(target, defs, depth + 1)
        return {k: _inline_refs(v, defs, depth + 1) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline_refs(item, defs, depth + 1) for item in node]
    return node


def _tidy(node: Any, *, is_properties: bool = False) -> Any:
    """Drop ``title`` clutter and collapse ``X | None = None`` to plain X (the field is optional)."""
    if isinstance(node, list):
        return [_tidy(item) for item in node]
    if not isinstance(node, dict):
        return node
    if is_properties:  # keys are parameter names, any of which may be "title"
        return {name: _tidy(schema) for name, schema in node.items()}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title":
            continue
        out[key] = _tidy(value, is_properties=key == "properties")
    variants = out.get("anyOf")
    if isinstance(variants, list) and out.get("default", ...) is None and {"type": "null"} in variants:
        non_null = [v for v in variants if v != {"type": "null"}]
        del out["default"]
        if len(non_null) == 1:
            del out["anyOf"]
            out = {**non_null[0], **out}
        else:
            out["anyOf"] = non_null
    if out.get("type") == "object" and "properties" in out:
        out.setdefault("additionalProperties", False)
    return out


def _frozen_schema(tool: Tool) -> bytes:
    """The JSON schema of a tool's parameters, cleaned for every provider (or the tool's own, e.g. an MCP tool's),
    pickled: a schema is copied for each registry and again for each list of them (nobody shares a dict a caller
    could change), and a copy is a ``pickle.loads``, several times cheaper than ``copy.deepcopy``."""
    own = getattr(tool, "input_schema", None)
    if own is not None:
        json.dumps(own)  # a schema that is not JSON is a broken plugin, reported at registration
        return pickle.dumps(own)
    return _checked_schema(tool.Parameters)


@functools.lru_cache(maxsize=1024)
def _checked_schema(params: type[BaseModel]) -> bytes:
    # Every session builds a registry: pydantic's schema generation is too slow to repeat.
    schema = _schema_of(params)
    json.dumps(schema)
    return pickle.dumps(schema)


def _schema_of(params: type[BaseModel]) -> dict[str, Any]:
    raw = params.model_json_schema()
    defs = raw.pop("$defs", {})
    schema = _tidy(_inline_refs(raw, defs))
    schema["type"] = "object"
    schema.setdefault("properties", {})
    schema["additionalProperties"] = False
    return schema


def _describe_parameters(schema: dict[str, Any]) -> str:
    required = set(schema.get("required", []))
    parts = []
    for name, prop in schema.get("properties", {}).items():
        kind = prop.get("type") or "/".join(v.get("type", "any") for v in prop.get("anyOf", [])) or "any"
        parts.append(f"{name} ({kind}, {'required' if name in required else 'optional'})")
    return ", ".join(parts) or "none"


def _validation_message(name: str, exc: ValidationError, schema: dict[str, Any]) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        problems.append(f"{where}: {error['msg']}")
    return f"Invalid arguments for {name}: {'; '.join(problems)}. Parameters: {_describe_parameters(schema)}."


# --- the registry -------------------------------------------------------------


@dataclass
class ToolRegistry:
    """Tools by name; ``warnings`` lists what a builder asked for but could not include."""

    max_result_chars: int = MAX_RESULT_CHARS
    warnings: list[str] = field(default_factory=list)
    _tools: dict[str, Tool] = field(default_factory=dict)
    _schemas: dict[str, bytes] = field(default_factory=dict)  # pickled (see _frozen_schema)

    def register(self, tool: Tool | type[Tool]) -> Tool:
        """Add a tool; ValueError when its name, description or parameters are unusable (TypeError: not a Tool)."""
        if isinstance(tool, type):
            tool = tool()
        if not isinstance(tool, Tool):
            raise TypeError(f"{tool!r} is not a Tool")
        tool.check()
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        params = tool.Parameters
        if not (isinstance(params, type) and issubclass(params, BaseModel)):
            raise TypeError(f"tool {tool.name}: Parameters must be a pydantic model")
        if params.model_config.get("extra") != "forbid":
            raise ValueError(f"tool {tool.name}: Parameters must forbid extra arguments (subclass plugin.Params)")
        try:
            frozen = _frozen_schema(tool)
        except Exception as exc:  # any failure here is a broken plugin, reported at registration
            raise ValueError(f"tool {tool.name}: cannot build its JSON schema: {exc}") from exc
        self._tools[tool.name] = tool
        self._schemas[tool.name] = frozen
        return tool

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def schema(self, name: str) -> dict[str, Any]:
        """The JSON schema of one tool's parameters (a copy)."""
        return pickle.loads(self._schemas[name])

    def schemas(self) -> list[ToolSchema]:
        return [
            ToolSchema(name=name, description=tool.description, parameters=pickle.loads(self._schemas[name]))
            for name, tool in self._tools.items()
        ]

    async def call(self, name: str, raw_arguments: Any, ctx: ToolContext) -> ToolOutcome:
        """Validate, run, serialise. Pass ``ToolCall.raw_arguments`` when the model's JSON did not parse.

        The loop-lag watchdog (``mas_core.looplag``) times every slice of the call that holds the loop.
        """
        return await watched(self._call(name, raw_arguments, ctx), tool=name, run_id=ctx.run_id)

    async def _call(self, name: str, raw_arguments: Any, ctx: ToolContext) -> ToolOutcome:
        tool = self._tools.get(name)
        if tool is None:
            available = ", ".join(self._tools) or "none"
            return ToolOutcome(False, f"Unknown tool {name!r}. Available tools: {available}.", error_kind="unknown_tool")
        if not isinstance(raw_arguments, dict):
            shown = raw_arguments if isinstance(raw_arguments, str) else type(raw_arguments).__name__
            return ToolOutcome(
                False,
                f"Invalid arguments for {name}: arguments must be a JSON object, got {_cap(str(shown), 200)!r}. "
                f"Parameters: {_describe_parameters(self.schema(name))}.",
                error_kind="invalid_arguments",
            )
        try:
            args = tool.Parameters.model_validate(raw_arguments)
        except ValidationError as exc:
            return ToolOutcome(False, _validation_message(name, exc, self.schema(name)), error_kind="invalid_arguments")
        try:
            result = await tool.run(args, ctx)
        except ToolError as exc:
            return ToolOutcome(False, str(exc) or f"{name} failed", error_kind=getattr(exc, "kind", None) or "tool_error")
        except (ToolSuspended, ToolAborted, *DATABASE_ERRORS):
            raise
        except Exception as exc:  # a broken tool must not end the session
            logger.exception("tool crashed", extra={"tool": name, "run_id": ctx.run_id, "agent": ctx.agent})
            return ToolOutcome(
                False,
                f"{name} failed: {type(exc).__name__}: {exc}",
                data={"exception": type(exc).__name__},
                error_kind="tool_error",
            )
        if isinstance(result, ToolResult):
            return ToolOutcome(True, _cap(result.content, self.max_result_chars), data=result.data)
        return ToolOutcome(True, _cap(_to_text(result), self.max_result_chars), data=result)


def registry_for_agent(
    allowed: Iterable[str] | None,
    extra_tools: Iterable[Tool] = (),
    *,
    max_result_chars: int = MAX_RESULT_CHARS,
) -> ToolRegistry:
    """A session's registry: the agent's allowed built-ins plus its custom/MCP tools.

    ``allowed=None`` means the safe defaults that exist. Names that are known
    built-ins without a plugin yet, or that no tool answers to, are skipped
    and listed in ``registry.warnings``; ``extra_tools`` are always included.
    A clash of names raises ValueError (a definition error).
    """
    from tools_app.builtin import BUILTIN_TOOL_CLASSES  # the plugins import this module

    registry = ToolRegistry(max_result_chars=max_result_chars)
    extras = list(extra_tools)
    extra_names = {tool.name for tool in extras}
    explicit = allowed is not None
    for name in dict.fromkeys(SAFE_DEFAULT_TOOLS if allowed is None else allowed):
        if name in BUILTIN_TOOL_CLASSES:
            registry.register(BUILTIN_TOOL_CLASSES[name]())
        elif name in extra_names:
            continue
        elif not explicit:
            continue  # a safe default not built yet: nothing was asked for by name
        elif name in BUILTIN_TOOLS:
            registry.warnings.append(f"tool {name} is not available yet; skipped")
        else:
            registry.warnings.append(f"tool {name} is unknown; skipped")
    for tool in extras:
        registry.register(tool)
    if registry.warnings:
        logger.warning("tools skipped", extra={"warnings": registry.warnings})
    return registry


def require_service(ctx: ToolContext, key: str, tool_name: str):
    """The kernel service a tool needs, or a ToolError the model can read."""
    service = ctx.services.get(key)
    if service is None:
        raise ToolError(f"{tool_name} is not available in this context")
    return service
