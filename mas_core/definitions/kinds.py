"""The kinds of definition a team owns, each with its schema, model and files.

One registry drives the markdown mirror, the versions, the REST API and the
admin. The foundation defines no kind itself: each app registers its own in
``AppConfig.ready`` (agents_app: providers, skills, guardrails, agents; tools_app: custom
tools and MCP servers; workflows_app: workflows; evals_app: datasets), so the
framework imports none of them. Code here that treats one kind specially
names it (``kind.name == "agent"``) and reaches its model through the
registry (``kind_named("agent").model``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.apps import apps
from pydantic import BaseModel

if TYPE_CHECKING:
    from mas_core.models import Definition


@dataclass(frozen=True)
class Kind:
    name: str  # "agent"
    label: str  # "Agent"
    model_label: str  # "agents_app.Agent"
    spec: type[BaseModel]
    folder: str  # "agents" → defs/agents/<slug>.md
    keeps_unknown_keys: bool = False
    directory_per_item: bool = False  # skills/<slug>/SKILL.md
    # Where the kind comes in the registry, and so in a sync: after the kinds it refers to
    # (providers, tools, MCP servers, skills, guardrails, agents, workflows, then what tests them).
    order: int = 100
    # Called with the saved row and its parsed definition (a provider's model rows follow its spec).
    after_save: Callable[["Definition", Any], None] | None = field(default=None, compare=False)

    @property
    def model(self) -> type["Definition"]:
        return apps.get_model(self.model_label)

    def relative_path(self, slug: str) -> Path:
        if self.directory_per_item:
            return Path(self.folder) / slug / "SKILL.md"
        return Path(self.folder) / f"{slug}.md"

    def slug_from_path(self, relative: Path) -> str | None:
        parts = relative.parts
        if len(parts) < 2 or parts[0] != self.folder:
            return None
        if self.directory_per_item:
            return parts[1] if len(parts) == 3 and parts[2] == "SKILL.md" else None
        if len(parts) == 2 and relative.suffix == ".md":
            return relative.stem
        return None


# A list and a dict filled in place at start-up, so every module that imported them sees the registered kinds.
KINDS: list[Kind] = []
KINDS_BY_NAME: dict[str, Kind] = {}


def register_kind(kind: Kind) -> Kind:
    """Add an app's definition kind (from its ``AppConfig.ready``), in ``order`` among the others.

    Registering the same kind again (a second ``ready()``) is a no-op; another kind with the same name or
    folder is refused.
    """
    existing = KINDS_BY_NAME.get(kind.name)
    if existing is not None:
        if existing == kind:
            return existing
        raise ValueError(f"a definition kind named {kind.name!r} is already registered")
    if any(other.folder == kind.folder for other in KINDS):
        raise ValueError(f"the folder {kind.folder!r} already holds another kind of definition")
    KINDS.append(kind)
    KINDS.sort(key=lambda known: known.order)  # stable: equal orders keep the order they came in
    KINDS_BY_NAME[kind.name] = kind
    return kind


def kind_named(name: str) -> Kind:
    """The registered kind ``name``; a LookupError names the kinds there are."""
    try:
        return KINDS_BY_NAME[name]
    except KeyError:
        raise LookupError(f"no definition kind {name!r} is registered (known: {', '.join(KINDS_BY_NAME)})") from None


def kind_for_model(model: type) -> Kind:
    for kind in KINDS:
        if kind.model_label == model._meta.label:
            return kind
    raise LookupError(model)
