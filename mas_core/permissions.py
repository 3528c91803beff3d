"""Who may do what in which team: one place for the API, the admin and pages."""

from __future__ import annotations

from dataclasses import dataclass

from mas_core.models import ROLE_CAPABILITIES, Membership, Team

STDIO_PERMISSION = "tools_app.manage_stdio_mcpserver"


@dataclass(frozen=True)
class Actor:
    """A user acting in one team with one role (from a token or a membership)."""

    user: object
    team: Team
    role: str

    def can(self, capability: str) -> bool:
        return capability in ROLE_CAPABILITIES.get(self.role, frozenset())

    @property
    def can_manage_stdio(self) -> bool:
        """Only in a team the operator granted stdio MCP servers (``Team.stdio_mcp_allowed``): its admins,
        and users a superuser gave the stdio permission."""
        if not self.team.stdio_mcp_allowed:
            return False
        return self.can("manage") or bool(getattr(self.user, "has_perm", lambda _p: False)(STDIO_PERMISSION))


def memberships(user) -> list[Membership]:
    if not getattr(user, "is_authenticated", False):
        return []
    return list(Membership.objects.filter(user=user).select_related("team"))


def team_ids_with(user, capability: str) -> set[int]:
    """Ids of the teams in which ``user`` has ``capability``."""
    return {m.team_id for m in memberships(user) if capability in ROLE_CAPABILITIES[m.role]}


def actor_for(user, team: Team) -> Actor | None:
    membership = Membership.objects.filter(user=user, team=team).first()
    return Actor(user=user, team=team, role=membership.role) if membership else None
