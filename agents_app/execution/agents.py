"""Which agent a session runs: the definition as the run pinned it (an agent of the team, or a remote agent),
capped by what its parent may grant, or a custom tool's worker; and agents a planner writes into the run's
workspace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents_app.execution.errors import RunError
from agents_app.execution.versions import VersionMissing, definition_pinned
from agents_app.kinds import AGENT, REMOTE_AGENT
from agents_app.models import Activation, Agent, RemoteAgent, Run, WorkspaceFile
from agents_app.specs import AgentSpec, RemoteAgentSpec
from mas_core.definitions.markdown import DefinitionError, parse_definition
from mas_core.rows import Columns
from tools_app.catalog import SAFE_DEFAULT_TOOLS


@dataclass(frozen=True)
class AgentDefinition:
    slug: str
    spec: AgentSpec
    body: str
    version: int | None  # None for agents written into the run's workspace
    source: str  # "team" | "workspace" | "tool" | "remote"
    remote: RemoteAgentSpec | None = None  # a remote agent's (source "remote"): its session talks A2A to it


# Validated team agents by (team, slug, version, content hash): a saved change is a new key.
_validated: dict[tuple, AgentDefinition] = {}


def agent_resolve(*, run: Run, slug: str) -> AgentDefinition:
    """The run's own agent (``agents/<slug>.md`` in its workspace) or the team's, at the version the run pinned."""
    local = WorkspaceFile.objects.filter(run=run, path=agent_file(slug)).values_list("content", flat=True).first()
    return agent_found(run=run, slug=slug, local=local)


def agent_file(slug: str) -> str:
    """Where a run writes an agent of its own."""
    return f"agents/{slug}.md"


# The team's row of an agent as definitions_pinned reads it: all but its markdown and description.
AGENT_ROW = Columns(Agent, without=("content", "description"))


def agent_found(*, run: Run, slug: str, local: str | None,
                rows: dict[str, Agent | None] | None = None) -> AgentDefinition:
    """:func:`agent_resolve` once its reads are done: ``local`` is the content of the run's own file (None:
    there is none); ``rows`` the team's row (``{slug: row or None}``, :data:`AGENT_ROW`) when the caller read
    it with its own reads (session_begin), else it is read here."""
    if local is not None:
        path = agent_file(slug)
        try:
            parsed = parse_definition(AGENT, local, path=path)
        except DefinitionError as error:
            # Written by the run (a refused vfs_write stays written): a refusal for the caller, not a crash.
            raise RunError(f"{path} is not a valid agent definition: {error}") from None
        return AgentDefinition(slug, parsed.spec, parsed.body, None, "workspace")
    try:
        pinned = definition_pinned(run=run, kind=AGENT, slug=slug, rows=rows)
    except VersionMissing as error:
        raise RunError(str(error)) from None
    if pinned is None:
        remote = _remote_found(run, slug)
        if remote is None:
            raise RunError(f"agent {slug!r} does not exist in this team or run")
        return remote
    key = (run.team_id, slug, pinned.number, pinned.content_hash)
    found = _validated.get(key)
    if found is None:
        # Valid when saved; the custom tools it names are pinned (or missing) on their own.
        tools = pinned.spec.get("tools")
        spec = AgentSpec.model_validate(pinned.spec, context={"known_tools": set(tools or [])})
        if len(_validated) > 1000:
            _validated.clear()
        found = _validated[key] = AgentDefinition(slug, spec, pinned.body, pinned.number, "team")
    return found


def agent_slugs(*, team_ids, among=None) -> set[str]:
    """The slugs of the agents and remote agents of the teams ``team_ids`` (of those ``among``, when given): what
    a run, a delegate call and a workflow step may name."""
    found: set[str] = set()
    for model in (Agent, RemoteAgent):
        rows = model.objects.filter(team_id__in=team_ids)
        found.update((rows if among is None else rows.filter(slug__in=among)).values_list("slug", flat=True))
    return found


def _remote_found(run: Run, slug: str) -> AgentDefinition | None:
    """The team's remote agent ``slug`` at the run's version of it (None: there is none). An agent with no tools
    of its own: what it does, it does elsewhere."""
    try:
        pinned = definition_pinned(run=run, kind=REMOTE_AGENT, slug=slug)
    except VersionMissing as error:
        raise RunError(str(error)) from None
    if pinned is None:
        return None
    remote = RemoteAgentSpec.model_validate(pinned.spec)
    spec = AgentSpec(name=remote.name, description=remote.description, tools=[])
    return AgentDefinition(slug, spec, pinned.body, pinned.number, "remote", remote=remote)


def agent_capped(definition: AgentDefinition, *, activation: Activation) -> AgentDefinition:
    """An agent the run wrote for itself, with no tool or MCP server its creator lacks.

    Its file is model output (spawn_agent, vfs_write, vfs_edit), which a prompt
    injection may have written: it gets at most what the agent that spawned or
    delegated to it holds, up the tree to a team agent; with no creator, the
    safe default tools. Team agents are returned as they are.
    """
    if definition.source != "workspace":
        return definition
    tools, mcp, approval = _grant(activation.parent_id)
    own = definition.spec.tools if definition.spec.tools is not None else list(SAFE_DEFAULT_TOOLS)
    spec = definition.spec.model_copy(update={
        "tools": [name for name in own if name in tools],
        "mcp_servers": [server for server in definition.spec.mcp_servers if server in mcp],
        # and no fewer approvals: what its creator may only do with a person's approval, it may not do without
        "approval": [*definition.spec.approval, *(entry for entry in approval if entry not in definition.spec.approval)],
    })
    return AgentDefinition(definition.slug, spec, definition.body, definition.version, definition.source)


def _grant(activation_id) -> tuple[set[str], list, list]:
    """The tools, MCP servers and approvals of the agent of ``activation_id`` (its creator's cap applied)."""
    if activation_id is None:
        return set(SAFE_DEFAULT_TOOLS), [], []
    activation = Activation.objects.select_related("run").get(pk=activation_id)
    if activation.ctx.worker:
        return set(), [], []  # a custom tool's worker holds no tools
    spec = agent_capped(agent_resolve(run=activation.run, slug=activation.agent), activation=activation).spec
    return (set(spec.tools if spec.tools is not None else SAFE_DEFAULT_TOOLS), list(spec.mcp_servers),
            list(spec.approval))


def worker_definition_resolve(worker: dict[str, Any]) -> AgentDefinition:
    """The agent behind a custom tool call, as kept in its activation's context."""
    spec = AgentSpec(name=worker["name"], model=worker.get("model"), tools=[])
    return AgentDefinition(worker["name"], spec, worker["body"], None, "tool")


def agent_register(*, run: Run, path: str, content: str) -> str:
    """Validate an agent file written under ``agents/``; returns its slug."""
    slug = path.removeprefix("agents/").removesuffix(".md")
    try:
        parse_definition(AGENT, content, path=path)
    except DefinitionError as error:
        raise RunError(f"{path} is not a valid agent definition: {error}") from None
    return slug
