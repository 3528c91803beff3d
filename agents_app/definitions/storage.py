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
    if kind.directory_per_item:
        for ref in sorted(path.parent.rglob("*")):
            if ref.is_file() and ref != path and not ref.name.startswith("."):
                references[ref.relative_to(path.parent).as_posix()] = ref.read_text(encoding="utf-8", errors="replace")
    return ItemFiles(text=text, references=references)


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
    path = root / kind.relative_path(slug)
    if kind.directory_per_item:
        base = path.parent.resolve()
        for name, text in item.references.items():
            target = (path.parent / name).resolve()
            if not target.is_relative_to(base):
                raise ValueError(f"reference path {name!r} leaves the skill folder")
            atomic_write(target, text)
    atomic_write(path, item.text)


def delete_item(kind: Kind, root: Path, slug: str) -> None:
    path = root / kind.relative_path(slug)
    if kind.directory_per_item and path.parent.is_dir():
        for ref in sorted(path.parent.rglob("*"), reverse=True):
            ref.unlink() if ref.is_file() else ref.rmdir()
        path.parent.rmdir()
    else:
        path.unlink(missing_ok=True)
