"""Frontmatter schema of MCP server configs (custom tools share agents_app.specs)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from agents_app.specs import CustomToolSpec, Name, Strict
from mas_project.netpolicy import private_url_refusal
from mas_project.secrets import ENV_REFERENCE_RE, env_refusal, references

__all__ = ["CustomToolSpec", "MCPServerSpec", "ENV_REFERENCE_RE"]

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
