"""Request and response schemas of the definition API, one set per kind.

The fields come from the kind's frontmatter spec, so the API, the markdown
files and the admin accept exactly the same definitions and OpenAPI shows
each field with its type and bounds. Only the spec's *whole-model* checks are
left out of the request schemas: they need the team (its agents, its custom
tools), so the definition services run them — with the same error shape.
"""

from __future__ import annotations

import copy
import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from mas_core.definitions.kinds import Kind

SyncStatus = Literal["in_sync", "file_missing", "deleted_on_disk", "db_changed", "disk_changed", "conflict"]
FileStatus = Literal["written", "unchanged", "conflict", "skipped"]

SCHEMA_PREFIX = {
    "agent": "Agent",
    "tool": "CustomTool",
    "mcp": "MCPServer",
    "workflow": "Workflow",
    "skill": "Skill",
    "provider": "ModelProvider",
    "guardrail": "Guardrail",
}

# A skill's reference files live beside its SKILL.md: plain relative paths only.
REFERENCE_PATH = re.compile(r"^(?!.*(?:^|/)\.)[A-Za-z0-9_][A-Za-z0-9_./-]{0,199}$")


def _spec_fields(kind: Kind, *, optional: bool) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name, info in kind.spec.model_fields.items():
        info = copy.copy(info)
        annotation = info.annotation
        if optional:
            # PATCH: a field left out is unchanged; null resets it to its default.
            info.default, info.default_factory = None, None
            annotation = annotation | None
        fields[name] = (annotation, info)
    return fields


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("references", check_fields=False)
    @classmethod
    def _reference_paths(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for path in value or {}:
            if not REFERENCE_PATH.match(path) or path == "SKILL.md" or ".." in path.split("/"):
                raise ValueError(f"{path!r}: a relative path inside the skill folder, not SKILL.md or a hidden file")
        return value


def _input_extras(kind: Kind, *, optional: bool) -> dict[str, Any]:
    body_default = None if optional else ""
    extras: dict[str, Any] = {
        "body": (
            str | None if optional else str,
            Field(default=body_default, max_length=1_000_000, description="The markdown body (an agent's system prompt)."),
        )
    }
    if kind.keeps_unknown_keys:
        extras["extra"] = (
            dict[str, Any] | None,
            Field(
                default=None,
                description="Frontmatter keys MAS does not know, kept as they are"
                + ("; a key set to null is removed." if optional else "."),
            ),
        )
    if kind.name == "skill":
        extras["references"] = (
            dict[str, str] | None,
            Field(default=None, description="Files beside SKILL.md (path → text); left out: unchanged."),
        )
    return extras


def _output_extras(kind: Kind) -> dict[str, Any]:
    extras: dict[str, Any] = {
        "slug": (str, ...),
        "version": (int, ...),
        "body": (str, ""),
        "created_at": (datetime, ...),
        "updated_at": (datetime, ...),
        "sync_status": (SyncStatus, Field(description="The row compared with its markdown file.")),
        "file_status": (
            FileStatus | None,
            Field(default=None, description="What the save did to the markdown file (writes only)."),
        ),
        "warnings": (list[str], Field(default_factory=list, description="Warnings of the save (writes only).")),
    }
    if kind.keeps_unknown_keys:
        extras["extra"] = (dict[str, Any], Field(default_factory=dict))
    if kind.name == "skill":
        extras["references"] = (dict[str, str], Field(default_factory=dict))
    if kind.name == "mcp":
        extras["secret_env_keys"] = (
            list[str],
            Field(default_factory=list, description="env keys whose literal values are stored as secrets (never shown)."),
        )
        extras["secret_header_keys"] = (
            list[str],
            Field(default_factory=list, description="headers whose literal values are stored as secrets (never shown)."),
        )
    return extras


class KindSchemas:
    """The create/replace body, the PATCH body and the response of one kind."""

    def __init__(self, kind: Kind) -> None:
        prefix = SCHEMA_PREFIX.get(kind.name) or kind.label.title().replace(" ", "")
        self.input: type[BaseModel] = create_model(
            f"{prefix}In",
            __base__=_Input,
            __doc__=f"A {kind.label.lower()}: its frontmatter fields, and its body.",
            **_spec_fields(kind, optional=False),
            **_input_extras(kind, optional=False),
        )
        self.patch: type[BaseModel] = create_model(
            f"{prefix}Patch",
            __base__=_Input,
            __doc__=f"Fields of a {kind.label.lower()} to change; the others stay.",
            **_spec_fields(kind, optional=True),
            **_input_extras(kind, optional=True),
        )
        extras = _output_extras(kind)
        self.output: type[BaseModel] = create_model(
            f"{prefix}Out",
            __doc__=f"A {kind.label.lower()} as stored.",
            slug=extras.pop("slug"),
            version=extras.pop("version"),
            **_spec_fields(kind, optional=False),
            **extras,
        )


class VersionOut(BaseModel):
    number: int
    content_hash: str
    author: str | None = Field(description="Username of the author, if any.")
    source: str = Field(description="Where the change came from: api, admin, sync, …")
    created_at: datetime


class VersionDetailOut(VersionOut):
    markdown: str


class ErrorOut(BaseModel):
    detail: str


class ValidationItem(BaseModel):
    loc: list[str | int] = Field(description='Where: "body", "path" or "query", then the field path.')
    msg: str
    type: str
    line: int | None = Field(default=None, description="Line of the submitted markdown, when it came from there.")


class ValidationErrorOut(BaseModel):
    detail: list[ValidationItem]


def error_responses(*codes: int) -> dict[int, type[BaseModel]]:
    """OpenAPI entries of the errors an operation can answer (bodies from ``mas_core.api_errors``)."""
    return {code: ValidationErrorOut if code == 422 else ErrorOut for code in codes}


class DeletedOut(BaseModel):
    slug: str
    deleted: bool
    warnings: list[str] = Field(default_factory=list)


class DependentOut(BaseModel):
    kind: str = Field(description='"workflow" or "agent".')
    slug: str
    name: str
    where: str = Field(description='What names the definition: "step draft", "tools", "mcp_servers", "skills", …')


class InUseOut(BaseModel):
    """409 of a delete: the definitions that use this one. ``?force=true`` deletes it anyway."""

    detail: str
    dependents: list[DependentOut]


class MarkdownIn(BaseModel):
    markdown: str


class TeamOut(BaseModel):
    slug: str
    name: str


class UserOut(BaseModel):
    id: int
    username: str


class MeOut(BaseModel):
    user: UserOut
    team: TeamOut
    role: str
    capabilities: list[str] = Field(description="What the role allows: view, edit, run, manage.")
    can_manage_stdio: bool = Field(description="May create, edit and delete stdio MCP servers.")
    auth: Literal["token", "session"]
