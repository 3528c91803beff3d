"""Custom tools (SPEC §3.2): a prompt template that a worker agent answers.

Calling one fills ``{{param}}`` in its prompt, runs a worker agent on it
through the kernel service ``run_custom_tool`` and returns the worker's
result — validated against ``result_schema`` when the tool has one.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import jsonschema
from pydantic import Field, create_model

from tools_app.specs import CustomToolSpec
from tools_app.plugin import Params, Tool, ToolContext, ToolError
from tools_app.registry import require_service

TEMPLATE_VARIABLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list,
                              "object": dict}


def fill_template(template: str, values: dict[str, Any]) -> str:
    def value(match: re.Match) -> str:
        found = values.get(match[1])
        if found is None:
            return ""
        return found if isinstance(found, str) else json.dumps(found, ensure_ascii=False)

    return TEMPLATE_VARIABLE.sub(value, template)


def _parameters_model(spec: CustomToolSpec) -> type[Params]:
    fields: dict[str, Any] = {}
    for name, parameter in spec.parameters.items():
        annotation: Any = JSON_TYPES[parameter.type]
        if parameter.enum:
            annotation = Literal[tuple(parameter.enum)]  # type: ignore[misc]
        default = ... if parameter.required else None
        if not parameter.required:
            annotation = annotation | None
        fields[name] = (annotation, Field(default, description=parameter.description or None))
    return create_model(f"{spec.name}_Parameters", __base__=Params, **fields)


def custom_tool(spec: CustomToolSpec) -> Tool:
    """A Tool instance for one custom tool definition."""

    class CustomTool(Tool):
        name = spec.name
        description = spec.description or f"Custom tool {spec.name}"
        Parameters = _parameters_model(spec)

        async def run(self, args: Params, ctx: ToolContext) -> Any:
            run_worker = require_service(ctx, "run_custom_tool", self.name)
            prompt = fill_template(spec.prompt, args.model_dump())
            result = await run_worker(tool=spec, prompt=prompt)
            if spec.result_schema is None:
                return result
            return validated_result(spec, result)

    CustomTool.__name__ = f"CustomTool_{spec.name}"
    return CustomTool()


def validated_result(spec: CustomToolSpec, result: str) -> Any:
    """The worker's answer as JSON that matches ``result_schema``, or a ToolError saying why not."""
    text = result.strip()
    fenced = re.match(r"^```(?:json)?\s*(.*?)\s*```$", text, re.DOTALL)
    if fenced:
        text = fenced[1]
    try:
        value = json.loads(text)
    except ValueError:
        error = ToolError(f"{spec.name}: the worker's result is not JSON, but the tool's result_schema "
                          f"requires it: {result[:300]!r}")
        error.kind = "validation_failed"
        raise error from None
    try:
        jsonschema.validate(value, spec.result_schema)
    except jsonschema.ValidationError as invalid:
        where = "/".join(str(part) for part in invalid.absolute_path) or "(root)"
        error = ToolError(f"{spec.name}: the worker's result does not match result_schema at {where}: "
                          f"{invalid.message}")
        error.kind = "validation_failed"
        raise error from None
    return value


WORKER_BODY = (
    "You are the worker behind the tool `{name}`: {description}\n\n"
    "Do exactly what the request asks and answer with the result only — no preamble."
)


def worker_definition(spec: CustomToolSpec) -> dict[str, Any]:
    """The agent that answers a custom tool's prompt (kept with its activation)."""
    body = WORKER_BODY.format(name=spec.name, description=spec.description or "(no description)")
    if spec.result_schema is not None:
        body += ("\n\nAnswer with JSON only, matching this JSON schema:\n"
                 + json.dumps(spec.result_schema, indent=2, ensure_ascii=False))
    return {"name": spec.name, "model": spec.model, "body": body}
