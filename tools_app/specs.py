"""Frontmatter schemas of custom tools and MCP server configs."""

from __future__ import annotations

import re
from typing import Literal

from typing import Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from mas_core.specs import ModelRef, Name, Strict
from mas_core.netpolicy import private_url_refusal
from mas_core.secrets import ENV_REFERENCE_RE, env_refusal, references
from tools_app.catalog import TOOL_NAME_RE

__all__ = ["CustomToolSpec", "MCPServerSpec", "ENV_REFERENCE_RE"]

class ToolParameter(Strict):
    type: Literal["string", "integer", "number", "boolean", "array", "object"] = "string"
    description: str = ""
    required: bool = True
    enum: list[Any] | None = None


class CustomToolSpec(Strict):
    """A tool that runs a worker agent on a filled prompt template (SPEC §3.2)."""

    name: Name
    description: str = ""
    parameters: dict[str, ToolParameter] = Field(default_factory=dict)
    prompt: str
    model: ModelRef | None = None
    result_schema: dict[str, Any] | None = None

    @field_validator("name")
    @classmethod
    def _tool_name(cls, value: str) -> str:
        if not TOOL_NAME_RE.match(value):
            raise ValueError("must match ^[a-zA-Z0-9_-]{1,64}$ to be valid for every model provider")
        return value

    def template_warnings(self) -> list[str]:
        """Template variables ``{{x}}`` with no parameter of that name."""
        import re

        used = set(re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", self.prompt))
        return [f"prompt uses {{{{{name}}}}} but no parameter is named {name!r}" for name in sorted(used - set(self.parameters))]



# Markdown never holds a secret: env values and headers there refer to
# environment variables of the server, written ${NAME} (``Bearer ${TOKEN}``),
# which the operator declared for the team (MAS_TEAM_SECRETS).
# A value with no reference is a literal secret: stored, never shown.


class MCPServerSpec(Strict):
    name: Name
    description: str = ""
    transport: Literal["stdio", "streamable-http", "sse"]
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: int = Field(default=30, ge=1, le=600)
    tools: list[str] | None = None
    enabled: bool = True

    @model_validator(mode="after")
    def _transport_fields(self) -> "MCPServerSpec":
        if self.transport == "stdio":
            if not self.command:
                raise ValueError("command: required for the stdio transport")
            if self.url or self.headers:
                raise ValueError("url/headers: only for the streamable-http and sse transports")
        else:
            if not self.url:
                raise ValueError(f"url: required for the {self.transport} transport")
            if not re.match(r"^https?://", self.url):
                raise ValueError("url: must start with http:// or https://")
            if self.command or self.args or self.env:
                raise ValueError("command/args/env: only for the stdio transport")
        return self

    # On save only (see ProviderSpec): a row saved before the operator changed the policy is refused when used.
    @field_validator("env", "headers")
    @classmethod
    def _declared_for_the_team(cls, values: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        # A header goes to whatever url the row names, an env value to whatever command it runs.
        team = (info.context or {}).get("team")  # set when saving for a team (see ProviderSpec)
        if team is not None:
            for key, value in values.items():
                for name in references(value):
                    refusal = env_refusal(name, team=team)
                    if refusal:
                        raise ValueError(f"{key}: {refusal}")
        return values

    @field_validator("url")
    @classmethod
    def _address_allowed(cls, value: str | None, info: ValidationInfo) -> str | None:
        saving = (info.context or {}).get("team") is not None
        refusal = private_url_refusal(value) if value and saving else None
        if refusal:
            raise ValueError(refusal)
        return value

    def secret_values(self) -> tuple[dict[str, str], dict[str, str]]:
        """Env values and headers that are literals (secrets), not ${NAME} references."""
        return (
            {k: v for k, v in self.env.items() if not ENV_REFERENCE_RE.search(v)},
            {k: v for k, v in self.headers.items() if not ENV_REFERENCE_RE.search(v)},
        )
