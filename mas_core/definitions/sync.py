"""Two-way sync between a team's definition rows and its markdown folder.

Each definition has three hashes: the file's (F, as read now), the row's
``content_hash`` (C, the row rendered as markdown) and the row's
``synced_hash`` (S, the file as last written or read by MAS). Per item:

============================  ============================================
state                         action
============================  ============================================
F == C                        unchanged (S is brought up to date)
file only (no row)            import (create the row)
F != C, F == S                row changed → export (write the file)
F != C, C == S                file changed → import (update the row)
F != C, both differ from S    conflict: reported, nothing overwritten
row only, S empty             never mirrored → export
row only, S set               deleted on disk: reported, the row is kept;
                              only ``export`` mode writes the file again
============================  ============================================

Why a deleted file never deletes its row: a missing file is as likely a bad
checkout or a wrong folder as a decision, and rows carry versions that runs
refer to. Deleting a definition is done in the admin or the API (which also
removes the file); ``export`` mode is the explicit "the database is right"
that recreates the file.

Modes: ``both`` does all of the above; ``import`` only imports and
``export`` only exports (changes in the other direction are reported as
skipped); ``check`` writes nothing and reports what ``both`` would do.

Each item is synced in its own transaction with its row locked, so one
invalid file never leaves anything half saved and never stops the others.
An imported file that is not in canonical form (a Claude Code subagent,
reordered keys, an MCP literal secret that must not stay on disk) is
rewritten with the text the row renders to, so the next export is
byte-identical to it.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import transaction
from django.utils.text import slugify

from mas_core.definitions import storage
from mas_core.definitions.kinds import KINDS, Kind
from mas_core.definitions.markdown import (
    DefinitionError,
    ParsedDefinition,
    parse_definition,
)
from mas_core.definitions.services import (
    DefinitionPermissionError,
    definition_parse,
    definition_save,
    row_files,
    stdio_not_granted,
    validation_context,
)
from mas_core.models import Definition, Team
from mas_core.text import visible_text

logger = logging.getLogger(__name__)

Mode = Literal["both", "import", "export", "check"]
MODES: tuple[str, ...] = ("both", "import", "export", "check")


@dataclass(frozen=True)
class SyncItem:
    """One definition the sync acted on (or would act on), by its file path."""

    kind: str
    slug: str
    path: str  # relative to the team's definitions folder, with "/"
    detail: str = ""
    line: int | None = None
    field: str = ""

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        if self.field:
            where += f": {self.field}"
        return f"{where}: {self.detail}" if self.detail else where


@dataclass
class SyncReport:
    team: str
    mode: str
    root: Path
    imported: list[SyncItem] = field(default_factory=list)
    exported: list[SyncItem] = field(default_factory=list)
    rewritten: list[SyncItem] = field(default_factory=list)  # imported files rewritten in canonical form
    conflicts: list[SyncItem] = field(default_factory=list)
    deleted_on_disk: list[SyncItem] = field(default_factory=list)
    skipped: list[SyncItem] = field(default_factory=list)  # changes this mode does not carry
    errors: list[SyncItem] = field(default_factory=list)
    unchanged: list[SyncItem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def dry_run(self) -> bool:
        return self.mode == "check"

    @property
    def in_sync(self) -> bool:
        """True when the run found the files and the rows already agreeing, and nothing wrong."""
        return not (
            self.imported or self.exported or self.conflicts or self.deleted_on_disk or self.skipped or self.errors
        )

    @property
    def unresolved(self) -> list[SyncItem]:
        """What a person must decide: conflicts, invalid files, files deleted on disk."""
        return [*self.conflicts, *self.errors, *self.deleted_on_disk]

    def render(self) -> str:
        """A report for a terminal, one line per definition that is not unchanged."""
        imported, exported = ("would import", "would export") if self.dry_run else ("imported", "exported")
        lines = [f"Markdown sync of team {self.team} ({self.mode}) in {self.root}"]
        sections = (
            (imported, self.imported),
            (exported, self.exported),
            ("rewritten", self.rewritten),
            ("CONFLICT", self.conflicts),
            ("DELETED", self.deleted_on_disk),
            ("skipped", self.skipped),
            ("ERROR", self.errors),
        )
        for label, items in sections:
            lines.extend(f"  {label:<14} {item}" for item in items)
        lines.extend(f"  {'warning':<14} {warning}" for warning in self.warnings)
        imported, exported = ("to import", "to export") if self.dry_run else ("imported", "exported")
        lines.append(
            f"{len(self.imported)} {imported}, {len(self.exported)} {exported}, "
            f"{len(self.conflicts)} conflicts, {len(self.deleted_on_disk)} deleted on disk, "
            f"{len(self.errors)} invalid, {len(self.skipped)} skipped, {len(self.unchanged)} unchanged."
        )
        if self.in_sync:
            lines.append("In sync.")
        elif self.unresolved:
            lines.append("Needs attention: resolve the items marked CONFLICT, DELETED and ERROR above.")
        return "\n".join(lines)


def markdown_sync(*, team: Team, mode: Mode = "both", author=None) -> SyncReport:
    """Import files changed on disk and export rows changed in the database for ``team``.

    See the module docstring for the rules. Never raises for a bad file: the
    report names it (file, line, field) and the other files are still synced.
    """
    if mode not in MODES:
        raise ValueError(f"unknown sync mode {mode!r} (one of {', '.join(MODES)})")
    root = storage.team_defs_dir(team)
    report = SyncReport(team=team.slug, mode=mode, root=root)
    run = _Run(team=team, mode=mode, author=author, root=root, report=report)
    if not root.is_dir():
        report.warnings.append(f"{root}: the definitions folder does not exist yet")
    report.warnings.extend(_stray_files(root))
    for kind in KINDS:  # providers, tools, MCP, skills, guardrails, agents, then the workflows that use agents
        slugs = set(kind.model.objects.filter(team=team).values_list("slug", flat=True))
        slugs |= set(_slugs_on_disk(kind, root))
        for slug in sorted(slugs):
            run.item(kind, slug)
    logger.info(
        "markdown sync finished",
        extra={
            "team": team.slug,
            "mode": mode,
            "imported": len(report.imported),
            "exported": len(report.exported),
            "conflicts": len(report.conflicts),
            "deleted_on_disk": len(report.deleted_on_disk),
            "errors": len(report.errors),
            "unchanged": len(report.unchanged),
        },
    )
    return report


def sync_action(*, file_hash: str | None, row_hash: str | None, synced_hash: str) -> str:
    """The table of the module docstring: unchanged | import | export | conflict | deleted | none."""
    if file_hash is None and row_hash is None:
        return "none"
    if row_hash is None:
        return "import"
    if file_hash is None:
        return "deleted" if synced_hash else "export"
    if file_hash == row_hash:
        return "unchanged"
    if file_hash == synced_hash:
        return "export"
    if row_hash == synced_hash:
        return "import"
    return "conflict"


# -- one run -------------------------------------------------------------------


@dataclass
class _Run:
    team: Team
    mode: str
    author: object
    root: Path
    report: SyncReport
    # Names imported (or, in check mode, importable) in this run, so that a
    # workflow sees the agents, an agent the tools, both the guardrails, and a dataset the
    # agents, workflows and providers of the same run even when ``check`` saved none.
    agents: set[str] = field(default_factory=set)
    tools: set[str] = field(default_factory=set)
    workflows: set[str] = field(default_factory=set)
    providers: set[str] = field(default_factory=set)
    guardrails: set[str] = field(default_factory=set)
    # (kind, slug) that files with non-slug names import as in this run: two such files never share one.
    claimed: set[tuple[str, str]] = field(default_factory=set)

    @property
    def writes(self) -> bool:
        return self.mode != "check"

    def item(self, kind: Kind, slug: str) -> None:
        path = kind.relative_path(slug).as_posix()
        atomic = transaction.atomic() if self.writes else contextlib.nullcontext()
        try:
            with atomic:
                outcome = self._item(kind, slug, path)
        except DefinitionError as error:
            outcome = ("errors", SyncItem(kind.name, slug, error.path or path, error.message, error.line, error.field))
        except ValidationError as error:
            outcome = ("errors", SyncItem(kind.name, slug, path, "; ".join(error.messages)))
        except UnicodeDecodeError:
            outcome = ("errors", SyncItem(kind.name, slug, path, "not UTF-8 text"))
        except (storage.ReadOnlyFolderError, DefinitionPermissionError) as error:
            outcome = ("errors", SyncItem(kind.name, slug, path, str(error)))
        except OSError as error:  # renaming a file whose name is not a slug; the row was rolled back
            outcome = ("errors", SyncItem(kind.name, slug, path, f"cannot rename the file: {error.strerror}"))
        if outcome is None:
            return
        bucket, entry = outcome
        getattr(self.report, bucket).append(entry)
        if bucket == "errors":
            logger.warning("markdown sync rejected a file", extra={"team": self.team.slug, "path": entry.path})

    def _item(self, kind: Kind, slug: str, path: str) -> tuple[str, SyncItem] | None:
        row = self._row(kind, slug)
        files = storage.read_item(kind, self.root, slug)
        if files is not None:
            self.report.warnings.extend(
                f"{path}: {name} beside SKILL.md is not UTF-8 text: left as it is, not part of the skill"
                for name in files.binary
            )
        action = sync_action(
            file_hash=files.hash if files is not None else None,
            row_hash=row.content_hash if row is not None else None,
            synced_hash=row.synced_hash if row is not None else "",
        )
        entry = SyncItem(kind.name, slug, path)
        if action == "none":
            return None
        if action == "unchanged":
            if self.writes and row.synced_hash != files.hash:
                row.synced_hash = files.hash
                row.save(update_fields=["synced_hash"])
            self._remember(kind, slug, row.name)
            return "unchanged", entry
        if action == "conflict":
            return "conflicts", _with(
                entry, "changed in the database and on disk since the last sync; nothing overwritten"
            )
        if action == "deleted" and self.mode != "export":
            return "deleted_on_disk", _with(
                entry,
                "the file was deleted on disk; the row is kept (run with --export to write the file again, "
                "or delete the definition in the admin or the API)",
            )
        if action == "import":
            if self.mode == "export":
                return "skipped", _with(entry, "changed on disk: not imported in export mode")
            return self._import(kind, slug, path, files, created=row is None)
        if self.mode == "import":
            return "skipped", _with(entry, "changed in the database: not exported in import mode")
        return self._export(kind, slug, row, recreated=action == "deleted")

    def _row(self, kind: Kind, slug: str) -> Definition | None:
        rows = kind.model.objects.filter(team=self.team, slug=slug)
        if self.writes:
            # Decide and act under the row lock: an admin save in between
            # cannot slip between our reading the hashes and writing.
            rows = rows.select_for_update()
        return rows.first()

    def _import(self, kind: Kind, slug: str, path: str, files: storage.ItemFiles, *, created: bool):
        try:
            visible_text(slug, "the file name")  # renamed to a slug, it would lose the character silently
        except ValueError as error:
            raise DefinitionError(str(error), path=path) from None
        target = slug if _is_slug(slug) else self._slug_for(kind, slug, path)
        parsed = self._parse(kind, files.text, path)
        if kind.name == "mcp" and parsed.spec.transport == "stdio" and not self.team.stdio_mcp_allowed:
            raise DefinitionPermissionError(stdio_not_granted(self.team.slug))  # also when only checking
        warnings = [_located(path, warning) for warning in parsed.warnings]
        target_path = kind.relative_path(target).as_posix()
        if target != slug:
            self.claimed.add((kind.name, target))
            renamed = "would be renamed" if not self.writes else "renamed"
            warnings.append(f"{path}: the file name is not a slug: imported as {kind.label.lower()} {target!r}, "
                            f"the file {renamed} to {target_path}")
        if not self.writes:
            self._remember(kind, target, parsed.spec.name)
            self.report.warnings.extend(warnings)
            return "imported", SyncItem(kind.name, target, path, "new" if created else "changed on disk")
        result = definition_save(
            kind=kind,
            team=self.team,
            parsed=parsed,
            slug=target,
            author=self.author,
            source="import",
            references=files.references if kind.name == "skill" else None,
            write_file=False,
        )
        row = result.row
        if target != slug:
            # The row is saved (in this transaction): the file follows its slug.
            storage.rename_item(kind, self.root, slug, target)
        canonical = row_files(kind, row)
        rewritten = canonical.hash != files.hash
        if rewritten:
            # The row renders differently from the file (other tool's format,
            # key order, secrets that must not stay on disk): write the
            # canonical text so file and row agree from now on.
            storage.atomic_write(self.root / kind.relative_path(target), canonical.text)
        row.synced_hash = canonical.hash
        row.save(update_fields=["synced_hash"])
        self._remember(kind, target, row.name)
        if target != slug:
            detail = f"renamed from {path}" + (", rewritten in canonical MAS form" if rewritten else "")
            self.report.rewritten.append(SyncItem(kind.name, target, target_path, detail))
        elif rewritten:
            self.report.rewritten.append(SyncItem(kind.name, slug, path, "rewritten in canonical MAS form"))
        # The save result repeats the parse warnings; keep each once.
        self.report.warnings.extend(dict.fromkeys([*warnings, *(_located(path, w) for w in result.warnings)]))
        if created:
            detail = f"created (version {row.version})"
        elif result.changed:
            detail = f"updated (version {row.version})"
        else:
            detail = f"same content, reformatted (version {row.version})"
        logger.debug("definition imported", extra={"team": self.team.slug, "path": path, "version": row.version})
        return "imported", SyncItem(kind.name, target, path, detail)

    def _slug_for(self, kind: Kind, name: str, path: str) -> str:
        """The slug a file whose name is not one imports as; refused if it names nothing or is taken."""
        slug = slugify(name)[:100]
        if not slug:
            raise DefinitionError(
                "the file name has no letter or digit to make a slug of: rename it to <slug>.md "
                "(letters, digits, '-' and '_')", path=path)
        taken = storage.item_exists(kind, self.root, slug) or (kind.name, slug) in self.claimed
        if taken or kind.model.objects.filter(team=self.team, slug=slug).exists():
            raise DefinitionError(
                f"the file name is not a slug and would import as {kind.label.lower()} {slug!r}, which "
                f"{kind.relative_path(slug).as_posix()} already is: rename one of them", path=path)
        return slug

    def _parse(self, kind: Kind, text: str, path: str) -> ParsedDefinition:
        if kind.name == "agent" and self.tools:
            context = validation_context(kind=kind, team=self.team, extra_guardrails=self.guardrails) or {}
            context["known_tools"] = set(context.get("known_tools", ())) | self.tools
            return parse_definition(kind, text, path=path, context=context)
        return definition_parse(kind=kind, team=self.team, text=text, path=path, extra_agents=self.agents,
                                extra_workflows=self.workflows, extra_providers=self.providers,
                                extra_guardrails=self.guardrails)

    def _export(self, kind: Kind, slug: str, row: Definition, *, recreated: bool):
        path = kind.relative_path(slug).as_posix()
        files = row_files(kind, row)
        if not files.text.strip():
            # A row saved before its markdown was stored: writing it would
            # empty the file. Saving it once (admin, API) stores the text.
            raise DefinitionError("the row has no stored markdown: save it once in the admin or the API", path=path)
        self._remember(kind, slug, row.name)
        detail = (
            "file deleted on disk, written again"
            if recreated
            else ("changed in the database" if row.synced_hash else "new")
        )
        if not self.writes:
            return "exported", SyncItem(kind.name, slug, path, detail)
        storage.write_item(kind, self.root, slug, files)
        row.synced_hash = files.hash
        fields = ["synced_hash"]
        if files.hash != row.content_hash:
            # Only possible when a row was changed outside definition_save (or
            # rendering changed): record what the row now renders to, or the
            # next sync would export again forever.
            row.content_hash = files.hash
            fields.append("content_hash")
        row.save(update_fields=fields)
        logger.debug("definition exported", extra={"team": self.team.slug, "path": path, "version": row.version})
        return "exported", SyncItem(kind.name, slug, path, detail)

    def _remember(self, kind: Kind, slug: str, name: str) -> None:
        if kind.name in {"agent", "remote_agent"}:  # either is a workflow step's agent
            self.agents.add(slug)
        elif kind.name == "tool":
            self.tools.add(name)
        elif kind.name == "workflow":
            self.workflows.add(slug)
        elif kind.name == "provider":
            self.providers.add(slug)
        elif kind.name == "guardrail":
            self.guardrails.add(slug)


def _is_slug(name: str) -> bool:
    try:
        validate_slug(name)
    except ValidationError:
        return False
    return len(name) <= 100


def _with(item: SyncItem, detail: str) -> SyncItem:
    return SyncItem(item.kind, item.slug, item.path, detail, item.line, item.field)


def _located(path: str, warning: str) -> str:
    return warning if warning.startswith(path) else f"{path}: {warning}"


# -- files on disk ---------------------------------------------------------------


def _visible(path: Path, base: Path) -> bool:
    return not any(part.startswith(".") for part in path.relative_to(base).parts)


def _slugs_on_disk(kind: Kind, root: Path) -> list[str]:
    folder = root / kind.folder
    if not folder.is_dir():
        return []
    if kind.directory_per_item:
        candidates = [child / "SKILL.md" for child in folder.iterdir() if child.is_dir()]
    else:
        candidates = [child for child in folder.iterdir() if child.suffix == ".md"]
    slugs = []
    for candidate in candidates:
        if candidate.is_file() and _visible(candidate, root):
            slug = kind.slug_from_path(candidate.relative_to(root))
            if slug is not None:
                slugs.append(slug)
    return slugs


def _stray_files(root: Path) -> list[str]:
    """Markdown in the definition folders that is neither a definition nor beside a SKILL.md: ignored, said once."""
    if not root.is_dir():
        return []
    folders = {kind.folder: kind for kind in KINDS}
    warnings = []
    for path in sorted(root.rglob("*.md")):
        relative = path.relative_to(root)
        if not path.is_file() or not _visible(path, root) or len(relative.parts) < 2:
            continue  # a README.md at the top is fine
        kind = folders.get(relative.parts[0])
        if kind is None:
            warnings.append(f"{relative.as_posix()}: not in a definition folder ({', '.join(folders)}): ignored")
            continue
        if kind.slug_from_path(relative) is not None:
            continue
        if (
            kind.directory_per_item
            and len(relative.parts) > 2
            and (root / relative.parts[0] / relative.parts[1] / "SKILL.md").is_file()
        ):
            continue  # a reference of a skill
        expected = kind.relative_path("<slug>").as_posix()
        warnings.append(f"{relative.as_posix()}: not a definition file (expected {expected}): ignored")
    return warnings
