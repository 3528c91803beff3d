"""The REST endpoints of a definition kind, built for each app's kinds.

:func:`add_definition_routes` builds the ten endpoints of one definition kind;
agents_app, tools_app and workflows_app call it for their kinds. Endpoints stay thin:
the authenticators resolve the team and check the role before the body is
read, the definition services validate and save, ``mas_core.api_errors``
maps their errors. Every query is scoped to the actor's team, so another
team's slug is a 404 like a slug that does not exist.
"""

# No `from __future__ import annotations` here: ninja reads the endpoint
# annotations at import time, and the per-kind schemas are closure variables.

from typing import Any

import pydantic
from django.conf import settings
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from ninja import Path, Query, Router, Status
from ninja.errors import HttpError
from ninja.errors import ValidationError as NinjaValidationError

from mas_core.definitions.dependents import DefinitionInUse
from mas_core.definitions.kinds import Kind
from mas_core.definitions.selectors import definition_get, definition_sync_status
from mas_core.definitions.markdown import DefinitionError, ParsedDefinition
from mas_core.definitions.services import (
    SaveResult,
    definition_delete,
    definition_parse,
    definition_save,
    definition_slug,
    definition_validate,
    definition_versions,
    row_files,
)
from mas_core.models import Definition, Team
from mas_core.permissions import Actor
from mas_core.schemas import (
    DeletedOut,
    InUseOut,
    KindSchemas,
    MarkdownIn,
    VersionDetailOut,
    VersionOut,
    error_responses,
)
from mas_core.api_auth import api_auth
from mas_core.api_errors import PayloadTooLarge, UnsupportedMediaType, check_storable, load_json

MARKDOWN_TYPES = ("text/markdown", "text/x-markdown", "text/plain")
NOT_FRONTMATTER = {"body", "extra", "references"}


# -- reading rows --------------------------------------------------------------


def definition_out(*, kind: Kind, team: Team, row: Definition, result: SaveResult | None = None) -> dict[str, Any]:
    """The response body of one definition. MCP secrets appear only as the names of their keys."""
    data: dict[str, Any] = {
        **row.spec,
        "slug": row.slug,
        "version": row.version,
        "body": row.body,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "sync_status": definition_sync_status(kind=kind, row=row),
        "file_status": result.file_status if result else None,
        "warnings": result.warnings if result else [],
    }
    if kind.keeps_unknown_keys:
        data["extra"] = row.extra
    if kind.name == "skill":
        data["references"] = row.references
    if kind.name == "mcp":
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
            text = request.body.decode("utf-8")
            check_storable(text)
            return text
        if content_type == "application/json" or content_type.endswith("+json"):
            return MarkdownIn.model_validate(load_json(request.body)).markdown
    except pydantic.ValidationError as error:
        raise NinjaValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in error.errors(include_url=False)]
        ) from None
    except ValueError as error:
        # Bad JSON, bad UTF-8, NUL characters: worded by the HttpError handler.
        raise HttpError(400, "Cannot parse request body") from error
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
        200: {
            "description": "The definition's markdown file.",
            "content": {"text/markdown": {"schema": {"type": "string"}}},
        }
    }
}


LIST_ERRORS = error_responses(401, 403)
READ_ERRORS = error_responses(401, 403, 404)
WRITE_ERRORS = error_responses(400, 401, 403, 404, 413, 415, 422)
CREATE_ERRORS = error_responses(400, 401, 403, 409, 413, 415, 422)


def add_definition_routes(router: Router, *, kind: Kind, plural: str) -> KindSchemas:
    """Add list/create/get/replace/patch/delete, versions and markdown endpoints of ``kind`` at ``/<plural>``."""
    schemas = KindSchemas(kind)
    In, Patch, Out = schemas.input, schemas.patch, schemas.output
    label = kind.label.lower()
    a_label = f"{'an' if label[0] in 'aeiou' else 'a'} {label}"
    read, write = api_auth("view"), api_auth("edit")
    item = f"/{plural}/{{slug}}"

    def op(action: str, summary: str, **options: Any) -> dict[str, Any]:
        name = f"{kind.name}_{action}"
        return {"operation_id": name, "url_name": name, "tags": [plural], "summary": summary, **options}

    def out(actor: Actor, row: Definition, result: SaveResult | None = None) -> dict[str, Any]:
        return definition_out(kind=kind, team=actor.team, row=row, result=result)

    def save(actor: Actor, parsed: ParsedDefinition, slug: str, **options: Any) -> SaveResult:
        return definition_save(
            kind=kind,
            team=actor.team,
            parsed=parsed,
            slug=slug,
            author=actor.user,
            source="api",
            allow_stdio=actor.can_manage_stdio,
            **options,
        )

    @router.get(f"/{plural}", **op("list", f"List the team's {plural}", auth=read, response={200: list[Out], **LIST_ERRORS}))
    def list_definitions(request):
        actor = request.auth
        return [out(actor, row) for row in kind.model.objects.filter(team=actor.team).order_by("slug")]

    @router.post(
        f"/{plural}",
        **op("create", f"Create {a_label} (its slug comes from its name)", auth=write, response={201: Out, **CREATE_ERRORS}),
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

    @router.get(item, **op("get", f"Get {a_label}", auth=read, response={200: Out, **READ_ERRORS}))
    def get_definition(request, slug: str):
        actor = request.auth
        return out(actor, definition_get(kind=kind, team=actor.team, slug=slug))

    @router.put(
        item,
        **op("replace", f"Replace {a_label}: fields left out take their defaults", auth=write,
             response={200: Out, **WRITE_ERRORS}),
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
        item,
        **op("patch", f"Change some fields of {a_label}; null resets one", auth=write,
             response={200: Out, **WRITE_ERRORS}),
    )
    def patch_definition(request, slug: str, payload: Patch):
        actor = request.auth
        _check_size(request)
        with transaction.atomic():
            row = definition_get(kind=kind, team=actor.team, slug=slug, lock=True)
            parsed = _parse_patch(kind, actor.team, row, payload)
            result = save(actor, parsed, slug, references=getattr(payload, "references", None))
        return out(actor, result.row, result)

    @router.delete(
        item,
        **op("delete", f"Delete {a_label}; 409 lists what uses it, unless force=true", auth=write,
             response={200: DeletedOut, 409: InUseOut, **READ_ERRORS}),
    )
    def delete_definition(request, slug: str, force: bool = Query(False, description=(
            "Delete it even though other definitions use it (they fail until changed)."))):
        actor = request.auth
        definition_get(kind=kind, team=actor.team, slug=slug)
        try:
            warnings = definition_delete(kind=kind, team=actor.team, slug=slug, allow_stdio=actor.can_manage_stdio,
                                         force=force)
        except DefinitionInUse as error:
            return Status(409, {"detail": str(error), "dependents": [vars(d) for d in error.dependents]})
        return {"slug": slug, "deleted": True, "warnings": warnings}

    @router.get(
        f"{item}/versions",
        **op("versions", f"Versions of {a_label}, newest first (kept after a delete)", auth=read,
             response={200: list[VersionOut], **READ_ERRORS}),
    )
    def list_versions(request, slug: str):
        actor = request.auth
        versions = list(definition_versions(kind=kind, team=actor.team, slug=slug).select_related("author"))
        if not versions:
            definition_get(kind=kind, team=actor.team, slug=slug)
        return [_version_out(version) for version in versions]

    @router.get(
        f"{item}/versions/{{number}}",
        **op("version", f"One version of {a_label}, with its markdown", auth=read,
             response={200: VersionDetailOut, **READ_ERRORS, **error_responses(422)}),
    )
    def get_version(request, slug: str, number: int = Path(..., ge=1, le=2**31 - 1)):
        actor = request.auth
        versions = definition_versions(kind=kind, team=actor.team, slug=slug).select_related("author")
        version = versions.filter(number=number).first()
        if version is None:
            raise Http404(f"no version {number} of {label} {slug!r}")
        return {**_version_out(version), "markdown": version.content}

    @router.get(
        f"{item}/markdown",
        # The 200 is text/markdown, described in MARKDOWN_RESPONSE.
        **op("markdown_get", f"The markdown file of {a_label}", auth=read, response=READ_ERRORS,
             openapi_extra=MARKDOWN_RESPONSE),
    )
    def get_markdown(request, slug: str):
        actor = request.auth
        row = definition_get(kind=kind, team=actor.team, slug=slug)
        return HttpResponse(row_files(kind, row).text, content_type="text/markdown; charset=utf-8")

    @router.put(
        f"{item}/markdown",
        **op("markdown_put", f"Replace {a_label} with markdown (text/markdown, or JSON {{\"markdown\": …}})",
             auth=write, response={200: Out, **WRITE_ERRORS}, openapi_extra=MARKDOWN_REQUEST),
    )
    def put_markdown(request, slug: str):
        actor = request.auth
        _check_size(request)
        text = _markdown_text(request)
        with transaction.atomic():
            definition_get(kind=kind, team=actor.team, slug=slug, lock=True)
            parsed = definition_parse(kind=kind, team=actor.team, text=text, path=str(kind.relative_path(slug)))
            # YAML escapes ("\ud800") can produce what the raw text did not hold.
            check_storable([parsed.spec_data(), parsed.extra, parsed.body])
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
