"""Which definitions use which: a workflow's agents (and remote agents), an agent's custom tools, MCP servers, skills and providers,
the guardrails of agents and workflow steps.

Deleting a definition that others use is refused (``DefinitionInUse``)
unless forced, in the API and the admin alike; the admin's sync status of a
workflow says when one of its agents is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mas_core.definitions.kinds import Kind, kind_named
from mas_core.models import Definition, Team

MAX_LISTED = 50  # dependents named in one message; the count says how many more


@dataclass(frozen=True)
class Dependent:
    kind: str  # "workflow", "agent"
    slug: str
    name: str
    where: str  # the field that names the definition: "step draft", "tools", "mcp_servers", …

    def __str__(self) -> str:
        return f"{kind_named(self.kind).label.lower()} {self.slug} ({self.where})"


class DefinitionInUse(Exception):
    """The definition is used by others: deleting it would break them."""

    def __init__(self, kind: Kind, slug: str, dependents: list[Dependent]):
        self.kind, self.slug, self.dependents = kind, slug, dependents
        super().__init__(f"{dependents_summary(kind, slug, dependents)}: change or delete them first")


def dependents_summary(kind: Kind, slug: str, dependents: list[Dependent]) -> str:
    """'Agent writer is used by workflow pipeline (step draft)'."""
    named = ", ".join(str(dependent) for dependent in dependents[:MAX_LISTED])
    more = f" and {len(dependents) - MAX_LISTED} more" if len(dependents) > MAX_LISTED else ""
    return f"{kind.label} {slug} is used by {named}{more}"


def _agent_rows(team: Team):
    return kind_named("agent").model.objects.filter(team=team).only("slug", "name", "spec").order_by("slug")


def _model_refs(spec: dict[str, Any]) -> list[str]:
    refs = [spec.get("model")] + list(spec.get("escalation") or [])
    return [ref for ref in refs if isinstance(ref, str)]


def definition_dependents(*, kind: Kind, team: Team, row: Definition) -> list[Dependent]:
    """The definitions of ``team`` that name ``row``, in slug order: agents, then workflows."""
    found: list[Dependent] = []
    if kind.name not in {"agent", "remote_agent"}:
        for agent in _agent_rows(team):
            spec = agent.spec or {}
            where = _uses(kind, row, spec)
            if where:
                found.append(Dependent("agent", agent.slug, agent.name, where))
    if kind.name in {"agent", "remote_agent", "guardrail"}:
        # A workflow's steps name agents (or remote agents), and guardrails of their own.
        workflows = kind_named("workflow").model.objects.filter(team=team).only("slug", "name", "spec")
        for workflow in workflows.order_by("slug"):
            steps = [step.get("id", "?") for step in (workflow.spec or {}).get("steps", [])
                     if isinstance(step, dict) and _step_uses(kind, row, step)]
            if steps:
                where = f"step{'s' if len(steps) > 1 else ''} {', '.join(steps)}"
                found.append(Dependent("workflow", workflow.slug, workflow.name,
                                       f"guardrails of {where}" if kind.name == "guardrail" else where))
    return found


def _step_uses(kind: Kind, row: Definition, step: dict[str, Any]) -> bool:
    if kind.name in {"agent", "remote_agent"}:
        return step.get("agent") == row.slug
    return row.slug in (step.get("guardrails") or [])


def _uses(kind: Kind, row: Definition, spec: dict[str, Any]) -> str:
    """The field of an agent's ``spec`` that names ``row``, or ''."""
    if kind.name == "tool":
        return "tools" if row.name in (spec.get("tools") or []) else ""
    if kind.name == "mcp":
        for entry in spec.get("mcp_servers") or []:
            name = entry if isinstance(entry, str) else entry.get("name") if isinstance(entry, dict) else None
            if name == row.slug:
                return "mcp_servers"
        return ""
    if kind.name == "skill":
        return "skills" if {row.slug, row.name} & set(spec.get("skills") or []) else ""
    if kind.name == "guardrail":
        return "guardrails" if row.slug in (spec.get("guardrails") or []) else ""
    if kind.name == "provider":
        refs = [ref for ref in _model_refs(spec) if ref.split(":", 1)[0] == row.slug and ":" in ref]
        if refs:
            return "model" if refs[0] == spec.get("model") else "escalation"
        return ""
    return ""


def workflow_missing_agents(*, team: Team, spec: dict[str, Any]) -> list[str]:
    """The agents a workflow's steps name that the team does not have (deleted since it was saved)."""
    wanted = [step.get("agent") for step in spec.get("steps", []) if isinstance(step, dict)]
    wanted = sorted({name for name in wanted if isinstance(name, str)})
    existing = {slug for name in ("agent", "remote_agent")
                for slug in kind_named(name).model.objects.filter(team=team, slug__in=wanted).values_list("slug", flat=True)}
    return [name for name in wanted if name not in existing]
