"""The definitions a run uses, at the versions it pinned: every session of the run reads the same ones.

A run pins each team definition it uses — agents, the custom tools and MCP servers they name, skills —
at the version that was current when the run started (the last version kept before ``Run.created_at``);
one created after the start is pinned at the version the run first finds. Pins live in ``Run.versions``
(``{"agent:lead": 3, "tool:summarize": 1}``) and never change once written, so every session of the
run, its retries, resumes and escalations read the same definition, and an edit made mid-run changes
later runs only. A pinned definition's content is its row while the row is still at that version, else
the kept version's markdown, parsed once per process.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from django.db import connection
from django.utils.text import slugify

from agents_app.kinds import AGENT

from mas_core.definitions.kinds import Kind

from tools_app.kinds import MCP, TOOL
from mas_core.definitions.markdown import load_frontmatter, split_frontmatter, validate_definition
from agents_app.models import DefinitionVersion, Run


class VersionMissing(LookupError):
    """The version a run pinned is no longer kept (a row saved around the definitions services)."""


@dataclass(frozen=True)
class Pinned:
    """One definition as the run uses it."""

    kind: str
    slug: str
    number: int
    content_hash: str
    spec: dict[str, Any]
    body: str
    extra: dict[str, Any] = field(default_factory=dict)
    references: dict[str, str] = field(default_factory=dict)
    row: Any = None  # the current row, if any (whatever its version): secrets and approvals live there

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.slug}"


def pin_key(kind: Kind, slug: str) -> str:
    return f"{kind.name}:{slug}"


def definitions_pinned(*, run: Run, kind: Kind, slugs: list[str], rows: dict[str, Any] | None = None,
                       pin: bool = True) -> dict[str, Pinned]:
    """The run's version of each ``kind`` definition in ``slugs`` that exists (by slug); pinned unless ``pin`` is False.

    ``rows``: current rows the caller already holds, by slug, None for one it found missing (the others are
    looked up).
    """
    slugs = list(dict.fromkeys(slugs))
    if not slugs:
        return {}
    rows = dict(rows or {})
    unknown = [slug for slug in slugs if slug not in rows]
    if unknown:
        found = kind.model.objects.filter(team_id=run.team_id, slug__in=unknown).defer("content", "description")
        rows |= {row.slug: row for row in found}
    numbers = _numbers(run, kind, slugs, rows)
    if pin:
        numbers = pins_record(run=run, pins={pin_key(kind, slug): number for slug, number in numbers.items()})
    return {slug: _content(run.team_id, kind, slug, number, rows.get(slug)) for slug, number in numbers.items()}


def definition_pinned(*, run: Run, kind: Kind, slug: str, rows: dict[str, Any] | None = None) -> Pinned | None:
    """The run's version of one definition (pinned now if it was not), or None when there is none."""
    return definitions_pinned(run=run, kind=kind, slugs=[slug], rows=rows).get(slug)


def tools_pinned(*, run: Run, names: list[str]) -> list[dict[str, Any]]:
    """The specs of the team custom tools ``names`` (by tool name) at the run's versions; unknown names are left out."""
    from tools_app.models import CustomTool

    rows = {row.name: row for row in CustomTool.objects.filter(team_id=run.team_id, name__in=names)}
    # A tool deleted (or renamed) since the run pinned it is found by the slug its name gave it.
    slugs = {name: rows[name].slug if name in rows else slugify(name)[:100] for name in names}
    pinned = definitions_pinned(run=run, kind=TOOL, slugs=[slug for slug in slugs.values() if slug],
                                rows={row.slug: row for row in rows.values()})
    return [pinned[slug].spec for name, slug in slugs.items()
            if slug in pinned and pinned[slug].spec.get("name") == name]


def mcp_pinned(*, run: Run, slugs: list[str]) -> dict[str, dict[str, Any]]:
    """The configs of the team's MCP servers ``slugs`` at the run's versions (by slug; unknown ones left out)."""
    return {slug: pinned.spec for slug, pinned in definitions_pinned(run=run, kind=MCP, slugs=slugs).items()}


def pins_record(*, run: Run, pins: dict[str, int]) -> dict[str, int]:
    """Write pins (``{"agent:lead": 3}``, of one kind) the run does not hold yet; returns the numbers pinned,
    by slug — a pin already written wins."""
    held = run.versions or {}
    new = {key: number for key, number in pins.items() if held.get(key) != number}
    if new:
        if run._state.adding:  # run_start: the row is saved with them
            run.versions = {**new, **held}
        else:
            with connection.cursor() as cursor:
                # Right side wins: a pin another session wrote first is kept, never replaced.
                cursor.execute("UPDATE agents_app_run SET versions = %s::jsonb || versions WHERE id = %s "
                               "RETURNING versions::text", [json.dumps(new), run.id])
                found = cursor.fetchone()
            if found is not None:
                run.versions = json.loads(found[0])
    held = run.versions or {}
    return {key.split(":", 1)[1]: int(held.get(key, number)) for key, number in pins.items()}


def _numbers(run: Run, kind: Kind, slugs: list[str], rows: dict[str, Any]) -> dict[str, int]:
    """Pinned, else the version current at the run's start, else (created since) the row's version."""
    held = run.versions or {}
    numbers = {slug: int(held[pin_key(kind, slug)]) for slug in slugs if pin_key(kind, slug) in held}
    missing = [slug for slug in slugs if slug not in numbers]
    if missing and run.created_at is not None:
        at_start = (DefinitionVersion.objects
                    .filter(team_id=run.team_id, kind=kind.name, slug__in=missing, created_at__lte=run.created_at)
                    .order_by("slug", "-number").distinct("slug").values_list("slug", "number"))
        numbers |= dict(at_start)
    for slug in missing:
        if slug not in numbers and rows.get(slug) is not None:
            numbers[slug] = rows[slug].version
    return {slug: numbers[slug] for slug in slugs if slug in numbers}


# Kept versions, parsed, by (team, kind, slug, number, content hash): immutable, so never stale.
_parsed: dict[tuple, Pinned] = {}


def _content(team_id: int, kind: Kind, slug: str, number: int, row) -> Pinned:
    if row is not None and row.version == number:
        return Pinned(kind.name, slug, number, row.content_hash, dict(row.spec or {}), row.body,
                      dict(row.extra or {}), dict(getattr(row, "references", None) or {}), row)
    version = (DefinitionVersion.objects.filter(team_id=team_id, kind=kind.name, slug=slug, number=number)
               .values_list("content_hash", "content", "references").first())
    if version is None:
        raise VersionMissing(f"{kind.label.lower()} {slug!r}: version {number}, which this run uses, is not kept")
    content_hash, text, references = version
    key = (team_id, kind.name, slug, number, content_hash)
    found = _parsed.get(key)
    if found is None:
        spec, body, extra = _parse(kind, text, path=f"{kind.relative_path(slug)} (version {number})")
        if references is None and row is not None:  # kept before versions held a skill's files
            references = getattr(row, "references", None)
        if len(_parsed) > 1000:
            _parsed.clear()
        found = _parsed[key] = Pinned(kind.name, slug, number, content_hash, spec, body, extra,
                                      dict(references or {}))
    return replace(found, row=row)


def _parse(kind: Kind, text: str, *, path: str) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """A kept version's markdown (canonical, as saved) → spec data, body, unknown keys."""
    yaml_text, body = split_frontmatter(text, path=path)
    data, node, _ = load_frontmatter(yaml_text, path=path)
    context = None
    if kind is AGENT:
        # The custom tools it names were the team's when it was saved; they are pinned on their own.
        tools = data.get("tools")
        context = {"known_tools": {name for name in tools if isinstance(name, str)} if isinstance(tools, list)
                   else set()}
    parsed = validate_definition(kind, data, body=body, path=path, node=node, context=context)
    return parsed.spec_data(), parsed.body, parsed.extra
