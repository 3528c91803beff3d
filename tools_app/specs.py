"""Frontmatter schema of MCP server configs (custom tools share agents_app.specs)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from agents_app.specs import CustomToolSpec, Name, Strict, server_env_refusal

__all__ = ["CustomToolSpec", "MCPServerSpec", "ENV_REFERENCE_RE"]

# Markdown never holds a secret: env values and headers there refer to
# environment variables of the server, written ${NAME} (``Bearer ${TOKEN}``).
# A value with no reference is a literal secret: stored, never shown.
ENV_REFERENCE_RE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


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

    @model_validator(mode="after")
    def _no_server_settings_in_headers(self) -> "MCPServerSpec":
        # A header goes to whatever url the row names: ${DJANGO_SECRET_KEY} there would hand it over.
        for key, value in self.headers.items():
            for ref in ENV_REFERENCE_RE.findall(value):
                refusal = server_env_refusal(ref[2:-1])
                if refusal:
                    raise ValueError(f"headers.{key}: {refusal}")
        return self

    def secret_values(self) -> tuple[dict[str, str], dict[str, str]]:
        """Env values and headers that are literals (secrets), not ${NAME} references."""
        return (
            {k: v for k, v in self.env.items() if not ENV_REFERENCE_RE.search(v)},
            {k: v for k, v in self.headers.items() if not ENV_REFERENCE_RE.search(v)},
        )
