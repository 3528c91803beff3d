"""The tool plugin interface (SPEC §3): name, description, pydantic parameters, handler.

Arguments are validated against the parameters model before the handler
runs; a validation error goes back to the model as the tool's result so it
can correct itself. Handlers are ``async`` and get a :class:`ToolContext`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict

from tools_app.catalog import TOOL_NAME_RE


class Params(BaseModel):
    """Base of every tool's parameters: unknown arguments are an error the model sees."""

    model_config = ConfigDict(extra="forbid")


class Workspace(Protocol):
    """The run's files. Paths are already normalised relative paths ("dir/file.md")."""

    async def read(self, path: str) -> str | None: ...
    async def write(self, path: str, content: str) -> int: ...  # returns the new version
    async def delete(self, path: str) -> bool: ...
    async def paths(self) -> list[str]: ...
    async def contents(self) -> dict[str, str]: ...  # every file's content by path, in path order: one read
    async def read_many(self, paths: list[str]) -> dict[str, str]: ...  # those of paths that exist: one read


@dataclass
class ToolContext:
    """What a handler may touch: the run's workspace and the kernel's services.

    ``services`` carries kernel operations (spawn, signal, delegate, outputs,
    event emission) as async callables, so tools stay free of the ORM.
    """

    run_id: str
    agent: str
    session_id: str
    workspace: Workspace
    services: dict[str, Callable[..., Awaitable[Any]]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


class ToolError(Exception):
    """A failure the model should read as the tool's result (not a crash)."""


class ToolSuspended(Exception):
    """The call's result comes later (a child agent's outcome): the session checkpoints and waits,
    holding no worker, and calls the tool again when it resumes. Raised by kernel services."""


class ToolAborted(Exception):
    """The session must stop here, not for the model to handle (a person's deadline passed and its default
    outcome is to fail). Raised by kernel services; the registry lets it through."""


class Tool(ABC):
    """Subclass per tool, one module each, with ``name``, ``description``, ``Parameters``."""

    name: ClassVar[str]
    description: ClassVar[str]
    Parameters: ClassVar[type[Params]] = Params

    @abstractmethod
    async def run(self, args: Params, ctx: ToolContext) -> Any:
        """Do the work; raise :class:`ToolError` for failures the model should see."""

    @classmethod
    def check(cls) -> None:
        if not TOOL_NAME_RE.match(getattr(cls, "name", "")):
            raise ValueError(f"tool name {getattr(cls, 'name', '')!r} must match {TOOL_NAME_RE.pattern}")
        if not getattr(cls, "description", ""):
            raise ValueError(f"tool {cls.name} needs a description")
