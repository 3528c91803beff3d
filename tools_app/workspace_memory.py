"""A workspace held in a dict: for tests and the plain-Python kernel (no database)."""

from __future__ import annotations


class InMemoryWorkspace:
    """Implements :class:`tools_app.plugin.Workspace`.

    Versions count per path from 1 and keep counting across a delete, like
    the database-backed workspace, so a re-created file never reuses a version.
    """

    def __init__(self, files: dict[str, str] | None = None) -> None:
        self.files: dict[str, str] = {}
        self.versions: dict[str, int] = {}
        for path, content in (files or {}).items():
            self.files[path] = content
            self.versions[path] = 1

    async def read(self, path: str) -> str | None:
        return self.files.get(path)

    async def write(self, path: str, content: str) -> int:
        self.files[path] = content
        self.versions[path] = self.versions.get(path, 0) + 1
        return self.versions[path]

    async def delete(self, path: str) -> bool:
        return self.files.pop(path, None) is not None

    async def paths(self) -> list[str]:
        return sorted(self.files)

    async def contents(self) -> dict[str, str]:
        return dict(sorted(self.files.items()))

    async def read_many(self, paths: list[str]) -> dict[str, str]:
        return {path: self.files[path] for path in paths if path in self.files}
