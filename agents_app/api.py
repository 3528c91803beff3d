"""REST endpoints of agents, skills, model providers and the caller (``/api/me``).

:func:`add_definition_routes` builds the ten endpoints of one definition kind;
the tools and workflows apps call it for their kinds. Endpoints stay thin:
the authenticators resolve the team and check the role before the body is
read, the definition services validate and save, ``mas_project.api_errors``
maps their errors. Every query is scoped to the actor's team, so another
team's slug is a 404 like a slug that does not exist.
"""

# No `from __future__ import annotations` here: ninja reads the endpoint
# annotations at import time, and the per-kind schemas are closure variables.

import json
from typing import Any

import pydantic
from django.conf import settings
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from ninja import Path, Router, Status
from ninja.errors import HttpError
from ninja.errors import ValidationError as NinjaValidationError

from agents_app.definitions import storage
from agents_app.definitions.kinds import AGENT, MCP, PROVIDER, SKILL, Kind
from agents_app.definitions.markdown import DefinitionError, ParsedDefinition
from agents_app.definitions.services import (
    SaveResult,
    definition_delete,
    definition_parse,
    definition_save,
    definition_slug,
    definition_validate,
    definition_versions,
    row_files,
)
from agents_app.models import ROLE_CAPABILITIES, Definition, Team
from agents_app.permissions import Actor
from agents_app.schemas import (
    DeletedOut,
    ErrorOut,
    KindSchemas,
    MarkdownIn,
    MeOut,
    VersionDetailOut,
    VersionOut,
)
from mas_project.api_auth import api_auth
from mas_project.api_errors import PayloadTooLarge, UnsupportedMediaType

MARKDOWN_TYPES = ("text/markdown", "text/x-markdown", "text/plain")
NOT_FRONTMATTER = {"body", "extra", "references"}


# -- reading rows --------------------------------------------------------------


def definition_get(*, kind: Kind, team: Team, slug: str, lock: bool = False) -> Definition:
    """The ``kind`` definition ``slug`` of ``team``; 404 when it does not exist *in this team*."""
    rows = kind.model.objects.filter(team=team, slug=slug)
    row = (rows.select_for_update() if lock else rows).first()
    if row is None:
        raise Http404(f"no {kind.label.lower()} {slug!r}")
    return row


def definition_sync_status(*, kind: Kind, team: Team, row: Definition) -> str:
    """The row compared with its markdown file, by the hashes ``sync_markdown`` keeps."""
    on_disk = storage.read_item(kind, storage.team_defs_dir(team), row.slug)
    if on_disk is None:
        return "file_missing"
    if on_disk.hash == row.content_hash:
        return "in_sync"
    db_changed = row.content_hash != row.synced_hash
    disk_changed = on_disk.hash != row.synced_hash
    if db_changed and disk_changed:
        return "conflict"
    return "disk_changed" if disk_changed else "db_changed"


def definition_out(*, kind: Kind, team: Team, row: Definition, result: SaveResult | None = None) -> dict[str, Any]:
    """The response body of one definition. MCP secrets appear only as the names of their keys."""
    data: dict[str, Any] = {
        **row.spec,
        "slug": row.slug,
        "version": row.version,
        "body": row.body,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "sync_status": definition_sync_status(kind=kind, team=team, row=row),
        "file_status": result.file_status if result else None,
        "warnings": result.warnings if result else [],
    }
    if kind.keeps_unknown_keys:
        data["extra"] = row.extra
    if kind is SKILL:
        data["references"] = row.references
    if kind is MCP:
        data["secret_env_keys"] = sorted(row.secret_env or {})
        data["secret_header_keys"] = sorted(row.secret_headers or {})
    return data


# -- reading requests ----------------------------------------------------------


def _check_size(request: HttpRequest) -> None:
    limit = settings.MAS_MAX_DEFINITION_BYTES
    if len(request.body) > limit:
        raise PayloadTooLarge(len(request.body), limit)


def _extra_keys(kind: Kind, extra: dict[str, Any]) -> None:
    for key in extra:
        if key in kind.spec.model_fields:
            raise DefinitionError(f"{key!r} is a field of its own: set it outside extra", field=f"extra.{key}")


def _parse_payload(kind: Kind, team: Team, payload: pydantic.BaseModel) -> ParsedDefinition:
    """A create/replace body → a definition validated for ``team``."""
    extra = getattr(payload, "extra", None) or {}
    _extra_keys(kind, extra)
    fields = payload.model_dump(exclude_unset=True, exclude=NOT_FRONTMATTER)
    return definition_validate(kind=kind, team=team, data={**extra, **fields}, body=payload.body)


def _parse_patch(kind: Kind, team: Team, row: Definition, payload: pydantic.BaseModel) -> ParsedDefinition:
    """A PATCH body merged over the stored frontmatter: top-level fields replace, null resets."""
    data = {**row.extra, **row.spec}
    changes = payload.model_dump(exclude_unset=True, exclude=NOT_FRONTMATTER)
    extra_changes = payload.model_dump(exclude_unset=True).get("extra") or {}
    _extra_keys(kind, extra_changes)
    for key, value in [*changes.items(), *extra_changes.items()]:
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    body = row.body if payload.body is None else payload.body
    return definition_validate(kind=kind, team=team, data=data, body=body)


def _markdown_text(request: HttpRequest) -> str:
    """The markdown of a PUT …/markdown: the raw body, or JSON ``{"markdown": …}``."""
    content_type = request.content_type or ""
    try:
        if content_type in MARKDOWN_TYPES:
            return request.body.decode("utf-8")
        if content_type == "application/json" or content_type.endswith("+json"):
            data = json.loads(request.body)
            return MarkdownIn.model_validate(data).markdown
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise HttpError(400, "Cannot parse request body") from error
    except pydantic.ValidationError as error:
        raise NinjaValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in error.errors(include_url=False)]
        ) from None
    raise UnsupportedMediaType(f"send the markdown as text/markdown, or as JSON {{\"markdown\": …}}, not {content_type!r}")


# -- the endpoints of one kind ---------------------------------------------------

MARKDOWN_REQUEST = {
    "requestBody": {
        "required": True,
        "content": {
            "text/markdown": {"schema": {"type": "string"}},
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {"markdown": {"type": "string"}},
                    "required": ["markdown"],
                }
            },
        },
    }
}
MARKDOWN_RESPONSE = {
    "responses": {
        200: {"description": "The definition's markdown file.", "content": {"text/markdown": {"schema": {"type": "string"}}}}
    }
}


def add_definition_routes(router: Router, *, kind: Kind, plural: str) -> KindSchemas:
    """Add list/create/get/replace/patch/delete, versions and markdown endpoints of ``kind`` at ``/<plural>``."""
    schemas = KindSchemas(kind)
    In, Patch, Out = schemas.input, schemas.patch, schemas.output
    label = kind.label.lower()
    a_label = f"{'an' if label[0] in 'aeiou' else 'a'} {label}"
    read, write = api_auth("view"), api_auth("edit")
    tags = [plural]

    def op(action: str) -> dict[str, Any]:
        name = f"{kind.name}_{action}"
        return {"operation_id": name, "url_name": name, "tags": tags}

    def out(actor: Actor, row: Definition, result: SaveResult | None = None) -> dict[str, Any]:
        return definition_out(kind=kind, team=actor.team, row=row, result=result)

    def save(actor: Actor, parsed: ParsedDefinition, slug: str, **kwargs: Any) -> SaveResult:
        return definition_save(
            kind=kind,
            team=actor.team,
            parsed=parsed,
            slug=slug,
            author=actor.user,
            source="api",
            allow_stdio=actor.can_manage_stdio,
            **kwargs,
        )

    @router.get(f"/{plural}", response=list[Out], auth=read, summary=f"List the team's {plural}", **op("list"))
    def list_definitions(request):
        actor = request.auth
        return [out(actor, row) for row in kind.model.objects.filter(team=actor.team).order_by("slug")]

    @router.post(
        f"/{plural}",
        response={201: Out, 409: ErrorOut},
        auth=write,
        summary=f"Create {a_label} (its slug comes from its name)",
        **op("create"),
    )
    def create_definition(request, payload: In):
        actor = request.auth
        _check_size(request)
        parsed = _parse_payload(kind, actor.team, payload)
        slug = definition_slug(parsed.spec.name)
        if kind.model.objects.filter(team=actor.team, slug=slug).exists():
            return Status(409, {"detail": f"a {label} with slug {slug!r} already exists"})
        result = save(actor, parsed, slug, create_only=True, references=getattr(payload, "references", None))
        return Status(201, out(actor, result.row, result))

    @router.get(f"/{plural}/{{slug}}", response=Out, auth=read, summary=f"Get {a_label}", **op("get"))
    def get_definition(request, slug: str):
        actor = request.auth
        return out(actor, definition_get(kind=kind, team=actor.team, slug=slug))

    @router.put(
        f"/{plural}/{{slug}}",
        response=Out,
        auth=write,
        summary=f"Replace {a_label} (fields left out take their defaults)",
        **op("replace"),
    )
    def replace_definition(request, slug: str, payload: In):
        actor = request.auth
        _check_size(request)
        with transaction.atomic():
            definition_get(kind=kind, team=actor.team, slug=slug, lock=True)
            parsed = _parse_payload(kind, actor.team, payload)
            result = save(actor, parsed, slug, references=getattr(payload, "references", None))
        return out(actor, result.row, result)

    @router.patch(
        f"/{plural}/{{slug}}",
        response=Out,
        auth=write,
        summary=f"Change some fields of {a_label}",
        **op("patch"),
    )
    def patch_definition(request, slug: str, payload: Patch):
        actor = request.auth
        _check_size(request)
        with transaction.atomic():
            row = definition_get(kind=kind, team=actor.team, slug=slug, lock=True)
            parsed = _parse_patch(kind, actor.team, row, payload)
            result = save(actor, parsed, slug, references=getattr(payload, "references", None))
        return out(actor, result.row, result)

    @router.delete(f"/{plural}/{{slug}}", response=DeletedOut, auth=write, summary=f"Delete {a_label}", **op("delete"))
    def delete_definition(request, slug: str):
        actor = request.auth
        definition_get(kind=kind, team=actor.team, slug=slug)
        warnings = definition_delete(kind=kind, team=actor.team, slug=slug, allow_stdio=actor.can_manage_stdio)
        return {"slug": slug, "deleted": True, "warnings": warnings}

    @router.get(
        f"/{plural}/{{slug}}/versions",
        response=list[VersionOut],
        auth=read,
        summary=f"Versions of {a_label}, newest first (kept after a delete)",
        **op("versions"),
    )
    def list_versions(request, slug: str):
        actor = request.auth
        versions = list(definition_versions(kind=kind, team=actor.team, slug=slug).select_related("author"))
        if not versions:
            definition_get(kind=kind, team=actor.team, slug=slug)
        return [_version_out(version) for version in versions]

    @router.get(
        f"/{plural}/{{slug}}/versions/{{number}}",
        response=VersionDetailOut,
        auth=read,
        summary=f"One version of {a_label}, with its markdown",
        **op("version"),
    )
    def get_version(request, slug: str, number: int = Path(..., ge=1, le=2**31 - 1)):
        actor = request.auth
        version = (
            definition_versions(kind=kind, team=actor.team, slug=slug).select_related("author").filter(number=number).first()
        )
        if version is None:
            raise Http404(f"no version {number} of {label} {slug!r}")
        return {**_version_out(version), "markdown": version.content}

    @router.get(
        f"/{plural}/{{slug}}/markdown",
        auth=read,
        summary=f"The markdown file of {a_label}",
        openapi_extra=MARKDOWN_RESPONSE,
        **op("markdown_get"),
    )
    def get_markdown(request, slug: str):
        actor = request.auth
        row = definition_get(kind=kind, team=actor.team, slug=slug)
        return HttpResponse(row_files(kind, row).text, content_type="text/markdown; charset=utf-8")

    @router.put(
        f"/{plural}/{{slug}}/markdown",
        response=Out,
        auth=write,
        summary=f"Replace {a_label} with markdown (text/markdown, or JSON {{\"markdown\": …}})",
        openapi_extra=MARKDOWN_REQUEST,
        **op("markdown_put"),
    )
    def put_markdown(request, slug: str):
        actor = request.auth
        _check_size(request)
        text = _markdown_text(request)
        with transaction.atomic():
            definition_get(kind=kind, team=actor.team, slug=slug, lock=True)
            parsed = definition_parse(kind=kind, team=actor.team, text=text, path=str(kind.relative_path(slug)))
            result = save(actor, parsed, slug)
        return out(actor, result.row, result)

    return schemas


def _version_out(version) -> dict[str, Any]:
    return {
        "number": version.number,
        "content_hash": version.content_hash,
        "author": version.author.get_username() if version.author else None,
        "source": version.source,
        "created_at": version.created_at,
    }


# -- this app's router -------------------------------------------------------------

router = Router()


@router.get("/me", response=MeOut, auth=api_auth("view"), tags=["me"], operation_id="me", summary="Who am I, in which team")
def me(request):
    actor: Actor = request.auth
    return {
        "user": {"id": actor.user.pk, "username": actor.user.get_username()},
        "team": {"slug": actor.team.slug, "name": actor.team.name},
        "role": actor.role,
        "capabilities": sorted(ROLE_CAPABILITIES[actor.role]),
        "can_manage_stdio": actor.can_manage_stdio,
        "auth": getattr(request, "mas_auth_method", "token"),
    }


add_definition_routes(router, kind=AGENT, plural="agents")
add_definition_routes(router, kind=SKILL, plural="skills")
add_definition_routes(router, kind=PROVIDER, plural="providers")
