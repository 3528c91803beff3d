"""The kinds of definition a team owns, each with its schema, model and files.

One table drives the markdown mirror, the versions, the REST API and the
admin, so adding a kind is one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from django.apps import apps
from pydantic import BaseModel

from agents_app.specs import AgentSpec, CustomToolSpec, ProviderSpec, SkillSpec
from tools_app.specs import MCPServerSpec
from workflows_app.specs import WorkflowSpec

if TYPE_CHECKING:
    from agents_app.models import Definition


@dataclass(frozen=True)
class Kind:
    name: str  # "agent"
    label: str  # "Agent"
    model_label: str  # "agents_app.Agent"
    spec: type[BaseModel]
    folder: str  # "agents" → defs/agents/<slug>.md
    keeps_unknown_keys: bool = False
    directory_per_item: bool = False  # skills/<slug>/SKILL.md

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


AGENT = Kind("agent", "Agent", "agents_app.Agent", AgentSpec, "agents", keeps_unknown_keys=True)
TOOL = Kind("tool", "Custom tool", "tools_app.CustomTool", CustomToolSpec, "tools")
MCP = Kind("mcp", "MCP server", "tools_app.MCPServer", MCPServerSpec, "mcp")
WORKFLOW = Kind("workflow", "Workflow", "workflows_app.Workflow", WorkflowSpec, "workflows")
SKILL = Kind("skill", "Skill", "agents_app.Skill", SkillSpec, "skills", keeps_unknown_keys=True, directory_per_item=True)
PROVIDER = Kind("provider", "Model provider", "agents_app.ModelProvider", ProviderSpec, "providers")

# Import order matters: workflows refer to agents, agents to tools and MCP servers. Apps above the
# foundation add their kinds at start-up (``register_kind`` in their ``AppConfig.ready``), after these:
# a list and a dict filled in place, so every module that imported them sees the registered kinds.
KINDS: list[Kind] = [PROVIDER, TOOL, MCP, SKILL, AGENT, WORKFLOW]
KINDS_BY_NAME: dict[str, Kind] = {kind.name: kind for kind in KINDS}


def register_kind(kind: Kind) -> Kind:
    """Add a definition kind of an app above the foundation (imported after the built-in kinds).

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
    KINDS_BY_NAME[kind.name] = kind
    return kind


def kind_for_model(model: type) -> Kind:
    for kind in KINDS:
        if kind.model_label == model._meta.label:
            return kind
    raise LookupError(model)
