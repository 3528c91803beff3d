"""Saving and deleting definitions: one code path for the API, admin and sync.

A save validates, updates the row, keeps a version when the content changed,
and writes the markdown file — unless the file changed on disk since the last
sync, in which case nothing is overwritten and the conflict is reported.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.http import Http404
from django.utils.text import slugify

from mas_core.definitions import storage
from mas_core.definitions.dependents import DefinitionInUse, definition_dependents, dependents_summary
from mas_core.definitions.kinds import Kind, kind_named
from mas_core.definitions.markdown import (
    DefinitionError,
    ParsedDefinition,
    parse_definition,
    render_definition,
    validate_definition,
)
from mas_core.models import Definition, DefinitionVersion, Team

logger = logging.getLogger(__name__)


class DefinitionPermissionError(PermissionError):
    pass


@dataclass
class SaveResult:
    row: Definition
    created: bool
    changed: bool
    file_status: str  # written | unchanged | conflict | skipped
    warnings: list[str] = field(default_factory=list)


def definition_slug(name: str) -> str:
    slug = slugify(name)[:100]
    if not slug:
        raise DefinitionError("must contain at least one letter or digit", field="name")
    return slug


def validation_context(
    *, kind: Kind, team: Team, extra_agents: set[str] = frozenset(), extra_workflows: set[str] = frozenset(),
    extra_providers: set[str] = frozenset(), extra_guardrails: set[str] = frozenset(),
) -> dict[str, Any] | None:
    """What a definition of ``kind`` is checked against when ``team`` saves it: the names it may refer to.

    ``extra_*``: names a markdown sync imports (or, checking, would import) in the same run.
    """

    def guardrails() -> set[str]:  # an agent's and a workflow step's guardrails
        return set(kind_named("guardrail").model.objects.filter(team=team).values_list("slug", flat=True)) | set(
            extra_guardrails)

    def slugs(name: str) -> set[str]:
        return set(kind_named(name).model.objects.filter(team=team).values_list("slug", flat=True))

    if kind.name == "workflow":  # a step names an agent of the team or a remote agent
        return {"known_agents": slugs("agent") | slugs("remote_agent") | set(extra_agents),
                "known_guardrails": guardrails()}
    if kind.name == "agent":
        return {"known_tools": set(kind_named("tool").model.objects.filter(team=team).values_list("name", flat=True)),
                "known_guardrails": guardrails(), "remote_agents": slugs("remote_agent")}
    if kind.name == "remote_agent":  # its secrets and address as for an MCP server; a name no agent has
        return {"team": team.slug, "known_agents": slugs("agent")}
    if kind.name == "provider" or kind.name == "mcp":
        # The environment variables the team may name and the addresses its URLs may reach are checked on
        # save for this team (mas_core.secrets, mas_core.netpolicy).
        return {"team": team.slug}
    if kind.name == "eval":
        # A dataset tests one of the team's agents or workflows, judged by a model of one of its providers.
        return {"known_agents": slugs("agent") | set(extra_agents),
                "known_workflows": slugs("workflow") | set(extra_workflows),
                "known_providers": slugs("provider") | set(extra_providers)}
    return None


def definition_parse(
    *, kind: Kind, team: Team, text: str, path: str = "", extra_agents: set[str] = frozenset(),
    extra_workflows: set[str] = frozenset(), extra_providers: set[str] = frozenset(),
    extra_guardrails: set[str] = frozenset(),
) -> ParsedDefinition:
    """Parse markdown for ``team``: workflows are checked against the team's agents and guardrails, agents
    against its custom tools and guardrails, datasets against its agents, workflows and providers."""
    context = validation_context(kind=kind, team=team, extra_agents=extra_agents, extra_workflows=extra_workflows,
                                 extra_providers=extra_providers, extra_guardrails=extra_guardrails)
    return parse_definition(kind, text, path=path, context=context)


def definition_validate(*, kind: Kind, team: Team, data: dict[str, Any], body: str = "") -> ParsedDefinition:
    """Validate API data (frontmatter fields as JSON) for ``team``."""
    return validate_definition(kind, data, body=body, context=validation_context(kind=kind, team=team))


def row_files(kind: Kind, row: Definition) -> storage.ItemFiles:
    """The files of ``row`` as its markdown mirror holds them."""
    return storage.ItemFiles(text=row.content, references=dict(getattr(row, "references", {}) or {}))


def _apply_columns(kind: Kind, row: Definition, parsed: ParsedDefinition) -> list[str]:
    """Copy kind-specific columns from the spec; returns warnings."""
    spec = parsed.spec
    warnings: list[str] = []
    if kind.name == "agent":
        row.model = spec.model or ""
        row.tier = spec.tier or ""
    elif kind.name == "workflow":
        row.trigger = spec.trigger
    elif kind.name == "guardrail":
        row.action = spec.action
        row.default = spec.default
    elif kind.name == "provider":
        row.provider_type = spec.type
        row.base_url = spec.base_url or ""
        row.api_key_env = spec.api_key_env or ""
    elif kind.name == "mcp":
        row.transport = spec.transport
        row.enabled = spec.enabled
        env_secrets, header_secrets = spec.secret_values()
        for column, values, secrets in (("env", spec.env, env_secrets), ("headers", spec.headers, header_secrets)):
            stored = dict(getattr(row, f"secret_{column}") or {})
            for key, value in values.items():
                if key in secrets:
                    if value == "":
                        stored.pop(key, None)
                    else:
                        stored[key] = value
                else:
                    stored.pop(key, None)  # now a ${NAME} reference
            setattr(row, f"secret_{column}", stored)
            if secrets:
                # Literal secrets are kept in the database only, never in the
                # spec, the markdown or a version.
                setattr(spec, column, {k: v for k, v in values.items() if k not in secrets})
                warnings.append(f"{column}: literal values of {', '.join(sorted(secrets))} are stored as secrets")
    return warnings


STDIO_NEEDS_PERMISSION = ("stdio MCP servers run a command on the server: this needs the team admin role (or the "
                          "stdio permission) in a team the operator granted stdio MCP servers")


def stdio_not_granted(team: str) -> str:
    """Why a stdio MCP server of team ``team`` (a slug) is refused, saved or started, without the operator's grant."""
    return (f"team {team} may not have stdio MCP servers (a command run on the server): only the operator "
            f"grants it (a superuser in the team's admin page, or `manage.py create_team {team} --allow-stdio`)")


@transaction.atomic
def definition_save(
    *,
    kind: Kind,
    team: Team,
    parsed: ParsedDefinition,
    slug: str | None = None,
    author=None,
    source: str = "api",
    references: dict[str, str] | None = None,
    allow_stdio: bool = True,
    write_file: bool = True,
    create_only: bool = False,
) -> SaveResult:
    """Create or update the ``kind`` definition ``slug`` of ``team`` from ``parsed``.

    The row is locked for the update; a new :class:`DefinitionVersion` is kept
    when the rendered content changed. With ``write_file`` the markdown mirror
    is written in the same transaction (a write error rolls the row back).
    """
    slug = slug or definition_slug(parsed.spec.name)
    if kind.name == "mcp" and parsed.spec.transport == "stdio":
        if not team.stdio_mcp_allowed:  # whoever saves, from wherever (API, admin, markdown sync)
            raise DefinitionPermissionError(stdio_not_granted(team.slug))
        if not allow_stdio:
            raise DefinitionPermissionError(STDIO_NEEDS_PERMISSION)
    model = kind.model
    row = model.objects.select_for_update().filter(team=team, slug=slug).first()
    created = row is None
    if created:
        # A slug deleted earlier keeps its versions: numbering continues.
        last = definition_versions(kind=kind, team=team, slug=slug).values_list("number", flat=True).first()
        row = model(team=team, slug=slug, version=last or 0)
    elif create_only:
        raise DefinitionError(f"a {kind.label.lower()} with slug {slug!r} already exists", field="name")
    elif kind.name == "mcp" and row.transport == "stdio" and not allow_stdio:
        raise DefinitionPermissionError(STDIO_NEEDS_PERMISSION)

    warnings = list(parsed.warnings)
    warnings += _apply_columns(kind, row, parsed)
    if kind.name == "agent":
        for tool in parsed.spec.custom_tools:
            warnings += [f"custom_tools.{tool.name}: {w}" for w in tool.template_warnings()]
    elif kind.name == "tool":
        warnings += parsed.spec.template_warnings()
    row.name = parsed.spec.name
    row.description = parsed.spec.description
    row.body = parsed.body
    row.spec = parsed.spec_data()
    row.extra = parsed.extra
    if kind.name == "skill" and references is not None:
        row.references = references
    row.content = render_definition(spec=row.spec, extra=row.extra, body=row.body)
    files = row_files(kind, row)
    new_hash = files.hash
    changed = created or new_hash != row.content_hash
    if changed:
        row.version += 1
        row.content_hash = new_hash
    row.full_clean(exclude=["team"], validate_unique=False, validate_constraints=False)
    row.save()
    if kind.after_save is not None:
        kind.after_save(row, parsed)
    if changed:
        DefinitionVersion.objects.create(
            team=team,
            kind=kind.name,
            slug=slug,
            number=row.version,
            content=files.text,
            references=files.references,
            content_hash=new_hash,
            author=author if getattr(author, "pk", None) else None,
            source=source,
        )
    file_status = "skipped"
    if write_file:
        file_status = _write_mirror(kind, team, row, files, warnings)
    logger.debug(
        "definition saved",
        extra={"team": team.slug, "kind": kind.name, "slug": slug, "version": row.version, "file": file_status},
    )
    return SaveResult(row=row, created=created, changed=changed, file_status=file_status, warnings=warnings)


def _write_mirror(kind: Kind, team: Team, row: Definition, files: storage.ItemFiles, warnings: list[str]) -> str:
    root = storage.team_defs_dir(team)
    on_disk = storage.read_item(kind, root, row.slug)
    if on_disk is not None:
        if on_disk.hash == files.hash:
            if row.synced_hash != files.hash:
                row.synced_hash = files.hash
                row.save(update_fields=["synced_hash"])
            return "unchanged"
        if on_disk.hash != row.synced_hash:
            warnings.append(
                f"{kind.relative_path(row.slug)} changed on disk since the last sync: not overwritten "
                "(run `manage.py sync_markdown` to resolve)"
            )
            return "conflict"
    storage.write_item(kind, root, row.slug, files)
    row.synced_hash = files.hash
    row.save(update_fields=["synced_hash"])
    return "written"


@transaction.atomic
def definition_delete(
    *, kind: Kind, team: Team, slug: str, allow_stdio: bool = True, force: bool = False
) -> list[str]:
    """Delete a definition and its file (unless the file changed on disk). Versions stay.

    A definition that others use (a workflow's agent, an agent's tool, MCP
    server, skill or provider) is not deleted: :class:`DefinitionInUse` lists
    them, unless ``force`` (then the list comes back as warnings).
    """
    row = kind.model.objects.select_for_update().get(team=team, slug=slug)
    if kind.name == "mcp" and row.transport == "stdio" and not allow_stdio and team.stdio_mcp_allowed:
        # Without the grant the server cannot start anyway: whoever may delete definitions removes it.
        raise DefinitionPermissionError(STDIO_NEEDS_PERMISSION)
    warnings: list[str] = []
    dependents = definition_dependents(kind=kind, team=team, row=row)
    if dependents and not force:
        raise DefinitionInUse(kind, slug, dependents)
    if dependents:
        warnings.append(f"{dependents_summary(kind, slug, dependents)}: they fail until they are changed")
    root = storage.team_defs_dir(team)
    on_disk = storage.read_item(kind, root, slug)
    row.delete()
    if on_disk is not None:
        if on_disk.hash in {row.synced_hash, row.content_hash}:
            storage.delete_item(kind, root, slug)
        else:
            warnings.append(f"{kind.relative_path(slug)} changed on disk since the last sync: left in place")
    return warnings


def definition_versions(*, kind: Kind, team: Team, slug: str):
    return DefinitionVersion.objects.filter(team=team, kind=kind.name, slug=slug).order_by("-number")


@dataclass(frozen=True)
class DiffLine:
    kind: str  # "hunk" | "add" | "del" | "same" | "file"
    text: str


MAX_DIFF_LINES = 5000  # a diff longer than this is cut, with a last line saying so


def definition_version_diff(*, kind: Kind, team: Team, slug: str, old: int, new: int) -> list[DiffLine]:
    """Unified diff of versions ``old`` → ``new`` of one definition (404 when either does not exist)."""
    versions = {v.number: v for v in definition_versions(kind=kind, team=team, slug=slug).filter(number__in=[old, new])}
    for number in (old, new):
        if number not in versions:
            raise Http404(f"no version {number} of {kind.label.lower()} {slug!r}")
    lines: list[DiffLine] = []
    diff = difflib.unified_diff(
        versions[old].content.splitlines(), versions[new].content.splitlines(),
        fromfile=f"v{old}", tofile=f"v{new}", lineterm="", n=3,
    )
    for text in diff:
        if len(lines) >= MAX_DIFF_LINES:
            lines.append(DiffLine("hunk", f"… cut after {MAX_DIFF_LINES} lines"))
            break
        if text.startswith(("---", "+++")):
            lines.append(DiffLine("file", text))
        elif text.startswith("@@"):
            lines.append(DiffLine("hunk", text))
        elif text.startswith("+"):
            lines.append(DiffLine("add", text))
        elif text.startswith("-"):
            lines.append(DiffLine("del", text))
        else:
            lines.append(DiffLine("same", text))
    return lines


def definition_restore(
    *, kind: Kind, team: Team, slug: str, number: int, author=None, source: str = "admin", allow_stdio: bool = True
) -> SaveResult:
    """Make version ``number`` the current content again: saved as a new version, older ones stay.

    The old markdown is validated as of now (a workflow's agent may be gone since); a skill gets its
    reference files of that version back when the version kept them.
    """
    version = definition_versions(kind=kind, team=team, slug=slug).filter(number=number).first()
    if version is None:
        raise Http404(f"no version {number} of {kind.label.lower()} {slug!r}")
    parsed = definition_parse(kind=kind, team=team, text=version.content, path=str(kind.relative_path(slug)))
    return definition_save(
        kind=kind, team=team, parsed=parsed, slug=slug, author=author, source=source, allow_stdio=allow_stdio,
        references=version.references if kind.name == "skill" else None,
    )
