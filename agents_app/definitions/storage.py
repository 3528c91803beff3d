"""Reading and writing a team's definition files, atomically."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from agents_app.definitions.kinds import Kind
from agents_app.definitions.markdown import content_hash


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


def _reference_files(main: Path) -> list[Path]:
    """The files beside a SKILL.md, hidden files (editor swap files, our temp files) left out."""
    base = main.parent
    return [
        ref
        for ref in sorted(base.rglob("*"))
        if ref.is_file() and ref != main and not any(part.startswith(".") for part in ref.relative_to(base).parts)
    ]


def atomic_write(path: Path, text: str) -> None:
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
    if kind.directory_per_item and path.parent.is_dir():
        for ref in sorted(path.parent.rglob("*"), reverse=True):
            ref.unlink() if ref.is_file() else ref.rmdir()
        path.parent.rmdir()
    else:
        path.unlink(missing_ok=True)
