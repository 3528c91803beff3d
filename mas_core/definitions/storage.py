"""Reading and writing a team's definition files, atomically.

Nothing here writes or deletes under the repository's own ``defs/``: those
are tracked files (the examples the demo team is seeded from), and the server
never changes tracked files at run time, whatever a team's folder points at.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from mas_core.definitions.kinds import Kind
from mas_core.definitions.markdown import content_hash


class ReadOnlyFolderError(PermissionError):
    """A write or delete aimed at the repository's tracked ``defs/``."""


def shipped_defs_dir() -> Path:
    """The repository's example definitions: read-only at run time."""
    return (Path(settings.BASE_DIR) / "defs").resolve()


def read_only_reason(path: Path) -> str | None:
    """Why files under ``path`` may not be written or deleted, or None when they may."""
    # resolve() follows symlinks, so a link into the repository's defs/ is refused too.
    if not Path(path).resolve().is_relative_to(shipped_defs_dir()):
        return None
    return (
        "defs/ is the repository's tracked folder of shipped examples, which the server never writes or "
        "deletes; give the team a definitions folder of its own (its defs_dir, or a blank defs_dir for "
        "MAS_DEFS_ROOT/<team slug>; `manage.py setup_demo` copies the examples into one)"
    )


def _check_writable(path: Path, action: str) -> None:
    reason = read_only_reason(path)
    if reason:
        # Named from the repository's root: an absolute server path means nothing to an API client.
        where = Path(path).resolve().relative_to(shipped_defs_dir().parent).as_posix()
        raise ReadOnlyFolderError(f"refusing to {action} {where}: {reason}")


def team_defs_dir(team) -> Path:
    if team.defs_dir:
        path = Path(team.defs_dir)
        return path if path.is_absolute() else Path(settings.BASE_DIR) / path
    return Path(settings.MAS_DEFS_ROOT) / team.slug


@dataclass
class ItemFiles:
    """One definition on disk: its markdown and, for skills, the files beside it."""

    text: str
    references: dict[str, str] = field(default_factory=dict)
    # Files beside SKILL.md that are not UTF-8 text (images, archives): left
    # alone on disk, outside the hash and the row, so no export can mangle them.
    binary: list[str] = field(default_factory=list)

    @property
    def hash(self) -> str:
        return files_hash(self.text, self.references)


def files_hash(text: str, references: dict[str, str]) -> str:
    if not references:
        return content_hash(text)
    parts = [text] + [f"{name}\0{references[name]}" for name in sorted(references)]
    return content_hash("\0".join(parts))


def read_item(kind: Kind, root: Path, slug: str) -> ItemFiles | None:
    path = root / kind.relative_path(slug)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    references: dict[str, str] = {}
    binary: list[str] = []
    if kind.directory_per_item:
        for ref in _reference_files(path):
            name = ref.relative_to(path.parent).as_posix()
            try:
                references[name] = ref.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                binary.append(name)
    return ItemFiles(text=text, references=references, binary=binary)


def item_exists(kind: Kind, root: Path, slug: str) -> bool:
    path = root / kind.relative_path(slug)
    return (path.parent if kind.directory_per_item else path).exists()


def rename_item(kind: Kind, root: Path, old: str, new: str) -> None:
    """Move the files of ``old`` to ``new``: a skill's whole folder (binary files too), else the one file."""
    source, target = root / kind.relative_path(old), root / kind.relative_path(new)
    if kind.directory_per_item:
        source, target = source.parent, target.parent
    _check_writable(source, "rename")
    _check_writable(target, "write")
    if target.exists():
        raise FileExistsError(17, "the target exists", str(target))
    source.rename(target)


def _reference_files(main: Path) -> list[Path]:
    """The files beside a SKILL.md, hidden files (editor swap files, our temp files) left out."""
    base = main.parent
    return [
        ref
        for ref in sorted(base.rglob("*"))
        if ref.is_file() and ref != main and not any(part.startswith(".") for part in ref.relative_to(base).parts)
    ]


def atomic_write(path: Path, text: str) -> None:
    _check_writable(path, "write")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_item(kind: Kind, root: Path, slug: str, item: ItemFiles) -> None:
    """Write the item so that reading it back gives the same hash.

    For skills that means also removing text references that are no longer
    in ``item`` (binary files are not references and stay).
    """
    path = root / kind.relative_path(slug)
    _check_writable(path, "write")
    if kind.directory_per_item:
        base = path.parent.resolve()
        targets = {}
        for name in item.references:
            target = (path.parent / name).resolve()
            if not target.is_relative_to(base) or target == base / "SKILL.md":
                raise ValueError(f"reference path {name!r} is not a file beside SKILL.md")
            targets[name] = target
        for name, target in targets.items():
            atomic_write(target, item.references[name])
        if path.parent.is_dir():
            for ref in _reference_files(path):
                if ref.relative_to(path.parent).as_posix() not in item.references and _is_text(ref):
                    ref.unlink()
    atomic_write(path, item.text)


def _is_text(path: Path) -> bool:
    try:
        path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return False
    return True


def delete_item(kind: Kind, root: Path, slug: str) -> None:
    path = root / kind.relative_path(slug)
    _check_writable(path, "delete")
    if kind.directory_per_item and path.parent.is_dir():
        for ref in sorted(path.parent.rglob("*"), reverse=True):
            ref.unlink() if ref.is_file() else ref.rmdir()
        path.parent.rmdir()
    else:
        path.unlink(missing_ok=True)
