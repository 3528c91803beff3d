"""Teams, memberships and API tokens."""

from __future__ import annotations

import functools
import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.conf import settings
from django.contrib.auth.models import Group
from django.contrib.auth.tokens import PasswordResetTokenGenerator
from django.db import connection, transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from mas_core.models import ROLE_CAPABILITIES, ApiToken, Invitation, Membership, PasswordLinkNonce, Role, Team
from mas_core.rows import Columns, instances

TOKEN_PREFIX = "mas_"


def role_group_name(role: str) -> str:
    return f"MAS {role}"


@transaction.atomic
def team_create(*, slug: str, name: str = "", defs_dir: str = "", stdio_mcp_allowed: bool | None = None) -> Team:
    """Create team ``slug`` (an existing one is kept); ``stdio_mcp_allowed``: the operator's grant, when given."""
    team, _ = Team.objects.get_or_create(slug=slug, defaults={"name": name or slug, "defs_dir": defs_dir})
    if stdio_mcp_allowed is not None and team.stdio_mcp_allowed != stdio_mcp_allowed:
        Team.objects.filter(pk=team.pk).update(stdio_mcp_allowed=stdio_mcp_allowed)
        team.stdio_mcp_allowed = stdio_mcp_allowed
    return team


@transaction.atomic
def membership_set(*, team: Team, user, role: str) -> Membership:
    """Give ``user`` ``role`` in ``team``; Django groups follow the role so the admin shows the right models."""
    if role not in ROLE_CAPABILITIES:
        raise ValueError(f"unknown role {role!r}")
    membership, _ = Membership.objects.update_or_create(team=team, user=user, defaults={"role": role})
    _groups_sync(user)
    if not user.is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    return membership


@transaction.atomic
def membership_delete(*, team: Team, user) -> None:
    """Remove ``user`` from ``team``: their groups and tokens there follow."""
    Membership.objects.filter(team=team, user=user).delete()
    ApiToken.objects.filter(team=team, user=user, revoked_at__isnull=True).update(revoked_at=timezone.now())
    _groups_sync(user)


def _groups_sync(user) -> None:
    wanted = {role_group_name(r) for r in Membership.objects.filter(user=user).values_list("role", flat=True)}
    for group in Group.objects.filter(name__startswith="MAS "):
        if group.name in wanted:
            user.groups.add(group)
        else:
            user.groups.remove(group)


def api_token_revoke(*, token: ApiToken) -> None:
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class IssuedToken:
    token: str  # shown once, never stored
    row: ApiToken


def api_token_create(*, user, team: Team, role: str | None = None, name: str = "") -> IssuedToken:
    """Issue a token for ``user`` in ``team``; its role cannot exceed the membership's."""
    membership = Membership.objects.filter(team=team, user=user).first()
    if membership is None:
        raise ValueError(f"{user} is not a member of team {team.slug}")
    role = role or membership.role
    if role not in ROLE_CAPABILITIES:
        raise ValueError(f"unknown role {role!r}")
    if not ROLE_CAPABILITIES[role] <= ROLE_CAPABILITIES[membership.role]:
        raise ValueError(f"role {role} exceeds {user}'s role {membership.role} in {team.slug}")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(
        team=team, user=user, role=role, name=name, prefix=token[:12], token_hash=_token_hash(token)
    )
    return IssuedToken(token=token, row=row)


@functools.cache
def _token_sql() -> tuple[str, tuple[Columns, ...]]:
    """The token's row, its team's and its user's side by side, and the user's role in that team now: one
    statement, written once (the ORM compiled its select_related and subquery at every request)."""
    parts = (Columns(ApiToken), Columns(Team), Columns(get_user_model()))
    sql = f"""
SELECT {parts[0].select("t")}, {parts[1].select("m")}, {parts[2].select("u")},
  (SELECT role FROM "{Membership._meta.db_table}" WHERE team_id = t.team_id AND user_id = t.user_id)
FROM "{ApiToken._meta.db_table}" AS t
JOIN "{Team._meta.db_table}" AS m ON m.id = t.team_id
JOIN "{get_user_model()._meta.db_table}" AS u ON u.id = t.user_id
WHERE t.token_hash = %s AND t.revoked_at IS NULL AND u.is_active
"""
    return sql, parts


def api_token_authenticate(token: str) -> ApiToken | None:
    if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    sql, parts = _token_sql()
    with connection.cursor() as cursor:
        cursor.execute(sql, [_token_hash(token)])
        found = cursor.fetchone()
    if found is None:
        return None
    row, row.team, row.user = instances(found[:-1], *parts)
    # Still a member with at least the token's rights?
    member_role = found[-1]
    if member_role is None or not ROLE_CAPABILITIES[row.role] <= ROLE_CAPABILITIES[member_role]:
        return None
    now = timezone.now()
    if row.last_used_at is None or (now - row.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
    return row


def user_create(*, username: str, password: str | None = None, email: str = ""):
    """A new account; without ``password`` it has none usable until its owner sets one (see password_link_create)."""
    User = get_user_model()
    user = User.objects.create_user(username=username, email=email, password=password)
    return user


class SetPasswordLinks(PasswordResetTokenGenerator):
    """Django's reset tokens, signed also over the user's current link nonce (``PasswordLinkNonce``).

    Django's own are bound to the password hash, last login and the second they were made: two links made
    in the same second were the same link, and issuing a new one left the older ones working.
    """

    def _make_hash_value(self, user, timestamp):
        nonce = PasswordLinkNonce.objects.filter(user_id=user.pk).values_list("nonce", flat=True).first()
        return super()._make_hash_value(user, timestamp) + (nonce or "")

    def token_issued_at(self, user, issued_at: datetime) -> str:
        """The token of a link issued at ``issued_at``: the same each time it is made, so the link can be shown
        again (it expires ``PASSWORD_RESET_TIMEOUT`` after ``issued_at``, as Django counts: local time)."""
        local = datetime.fromtimestamp(issued_at.timestamp())
        return self._make_token_with_timestamp(user, self._num_seconds(local), self.secret)


set_password_links = SetPasswordLinks()


def _password_link_path(user, issued_at: datetime) -> str:
    uidb64 = urlsafe_base64_encode(force_bytes(user.pk))
    token = set_password_links.token_issued_at(user, issued_at)
    return reverse("password_reset_confirm", kwargs={"uidb64": uidb64, "token": token})


def password_link_create(*, user) -> str:
    """The path of ``user``'s one-time set-password page (Django's password reset confirmation).

    Only the newest link works: each draws a new nonce its token is signed over. It also stops working once
    the password is set (the token is bound to the password hash), and after ``PASSWORD_RESET_TIMEOUT``.
    """
    # issued_at is auto_now: the time the token is signed with is the one stored, to show the link again.
    row, _ = PasswordLinkNonce.objects.update_or_create(user=user, defaults={"nonce": secrets.token_urlsafe(32)})
    return _password_link_path(user, row.issued_at)


@dataclass(frozen=True)
class PendingPasswordLink:
    path: str  # of the set-password page
    expires_at: datetime


def password_link_pending(*, team: Team, user) -> PendingPasswordLink | None:
    """The set-password link of a member of ``team`` that still works, to show its admins again; else None.

    None once the password is set, a newer link replaced it (that one is shown), it expired, or the account
    is also another team's: as for ``password_link_reissue``, an admin of one team never gets a link to an
    account that other teams rely on.
    """
    if user.has_usable_password():
        return None
    if set(Membership.objects.filter(user=user).values_list("team_id", flat=True)) != {team.pk}:
        return None
    issued_at = PasswordLinkNonce.objects.filter(user=user).values_list("issued_at", flat=True).first()
    if issued_at is None:
        return None
    path = _password_link_path(user, issued_at)
    token = path.rstrip("/").rsplit("/", 1)[1]
    if not set_password_links.check_token(user, token):
        return None
    return PendingPasswordLink(path=path,
                               expires_at=issued_at + timedelta(seconds=settings.PASSWORD_RESET_TIMEOUT))


def password_link_reissue(*, team: Team, user) -> str:
    """A new set-password link for a member of ``team`` who never set a password (their link expired).

    Only for an account that belongs to ``team`` alone: an admin of one team
    must never take over an account that other teams rely on.
    """
    if user.has_usable_password():
        raise ValueError(f"{user} has set a password; they change it themselves")
    teams = set(Membership.objects.filter(user=user).values_list("team_id", flat=True))
    if teams != {team.pk}:
        raise ValueError(f"{user} is not a member of {team.slug} alone")
    return password_link_create(user=user)


@dataclass(frozen=True)
class AddedMember:
    membership: Membership
    password_link: str  # path of the set-password page of a new account; "" for an existing user


@transaction.atomic
def membership_add(*, team: Team, username: str, role: str, new_account: bool = False) -> AddedMember:
    """Add a person to ``team``: an existing user, or (``new_account``) a new account without a password.

    A new account gets a one-time set-password link, to hand to its owner. A
    user who is already a member is refused: their role is changed with
    ``membership_set``.
    """
    if role not in ROLE_CAPABILITIES:
        raise ValueError(f"unknown role {role!r}")
    User = get_user_model()
    user = User.objects.filter(username=username).first()
    link = ""
    if new_account:
        if user is not None:
            raise ValueError(f"a user {username} already exists; add them as an existing user")
        user = user_create(username=username)
        link = password_link_create(user=user)
    elif user is None:
        raise ValueError(f"no user {username}")
    elif Membership.objects.filter(team=team, user=user).exists():
        raise ValueError(f"{username} is already a member of {team.slug}; change their role instead")
    return AddedMember(membership=membership_set(team=team, user=user, role=role), password_link=link)


# -- invitations ---------------------------------------------------------------------------------------

INVITATION_PREFIX = "inv_"
INVALID_INVITATION = "this invitation link is not valid: it was used already, it expired, or it never existed"


class InvitationError(ValueError):
    pass


@dataclass(frozen=True)
class IssuedInvitation:
    link: str  # path of the invitation page; shown once, never stored
    row: Invitation


def invitation_create(*, team: Team, role: str, created_by=None) -> IssuedInvitation:
    """A single-use link making its bearer a ``role`` of ``team``; it expires with ``PASSWORD_RESET_TIMEOUT``."""
    if role not in ROLE_CAPABILITIES:
        raise ValueError(f"unknown role {role!r}")
    token = INVITATION_PREFIX + secrets.token_urlsafe(32)
    row = Invitation.objects.create(
        team=team, role=role, token_hash=_token_hash(token), created_by=created_by,
        expires_at=timezone.now() + timedelta(seconds=settings.PASSWORD_RESET_TIMEOUT))
    return IssuedInvitation(link=reverse("invitation", kwargs={"token": token}), row=row)


def _pending(token: str):
    if not token.startswith(INVITATION_PREFIX) or len(token) > 100:
        return Invitation.objects.none()
    return Invitation.objects.filter(token_hash=_token_hash(token), accepted_at__isnull=True,
                                     expires_at__gt=timezone.now())


def invitation_pending(token: str) -> Invitation | None:
    """The invitation of ``token`` if it can still be accepted (with its team)."""
    return _pending(token).select_related("team").first()


@transaction.atomic
def invitation_accept(*, token: str, user) -> Membership:
    """Make ``user`` a member as the invitation says, once: the row is locked, then marked accepted.

    A user who is already a member of the team is refused and the invitation stays usable (for someone else):
    an invitation never changes a role.
    """
    invitation = _pending(token).select_for_update().select_related("team").first()
    if invitation is None:
        raise InvitationError(INVALID_INVITATION)
    if Membership.objects.filter(team=invitation.team, user=user).exists():
        raise InvitationError(f"you are already a member of {invitation.team.slug}")
    membership = membership_set(team=invitation.team, user=user, role=invitation.role)
    invitation.accepted_by, invitation.accepted_at = user, timezone.now()
    invitation.save(update_fields=["accepted_by", "accepted_at"])
    return membership


@transaction.atomic
def invitation_accept_new_account(*, token: str, username: str, password: str):
    """Create the account the invitation's bearer chose and accept the invitation with it, or neither."""
    if invitation_pending(token) is None:
        raise InvitationError(INVALID_INVITATION)
    user = user_create(username=username, password=password)
    invitation_accept(token=token, user=user)
    return user


__all__ = [
    "Role",
    "team_create",
    "membership_set",
    "membership_delete",
    "api_token_create",
    "api_token_authenticate",
    "api_token_revoke",
    "user_create",
    "password_link_create",
    "password_link_reissue",
    "password_link_pending",
    "membership_add",
    "invitation_create",
    "invitation_pending",
    "invitation_accept",
    "invitation_accept_new_account",
]


# Editable by editors and admins besides every registered definition kind's model (definition_models()).
EDITABLE_MODELS = (
    "memory_app.memory",
    "memory_app.cachedresponse",  # editors clear entries; nothing in them is editable
)
READ_ONLY_MODELS = (
    "evals_app.evalrun",
    "agents_app.providermodel",
    "agents_app.definitionversion",
    "agents_app.run",
    "agents_app.activation",
    "agents_app.session",
    "agents_app.event",
    "agents_app.workspacefile",
    "memory_app.channel",
    "memory_app.channelmessage",
    "memory_app.blackboardentry",
)


def definition_models() -> tuple[str, ...]:
    """The model of every registered definition kind (``agents_app.agent``, …) and the other editable ones: a
    kind an app registers is editable in the admin by the team's editors without being listed here."""
    from mas_core.definitions.kinds import KINDS

    return tuple(kind.model._meta.label_lower for kind in KINDS) + EDITABLE_MODELS


def role_groups_sync(**_kwargs) -> None:
    """Create the Django groups that mirror the MAS roles (run after migrate)."""
    from django.contrib.auth.models import Permission

    def perms(models: tuple[str, ...], actions: tuple[str, ...]) -> list[Permission]:
        found = []
        for label in models:
            app_label, model = label.split(".")
            found += Permission.objects.filter(
                content_type__app_label=app_label, codename__in=[f"{a}_{model}" for a in actions]
            )
        return found

    editable = definition_models()
    view = perms(editable + READ_ONLY_MODELS, ("view",))
    edit = perms(editable, ("add", "change", "delete"))
    wanted = {
        Role.VIEWER: view,
        Role.EDITOR: view + edit,
        Role.OPERATOR: view,
        # Not the stdio permission: groups are global, so it would follow a
        # team admin into teams where they are only an editor. Actor grants it
        # per team from the admin role; the Django permission is for users a
        # superuser trusts everywhere.
        Role.ADMIN: view + edit,
    }
    for role, permissions in wanted.items():
        group, _ = Group.objects.get_or_create(name=role_group_name(role))
        group.permissions.set(permissions)
