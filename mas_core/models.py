"""The foundation's models: teams, members, roles, API tokens, the definition base and its versions, events.

They keep ``app_label = "agents_app"``: their tables, migrations and content
types stay exactly where they were before the foundation was split out of
agents_app (moving a model between apps would need migrations that rename
tables and rewrite content types and every foreign key to them).
``agents_app.models`` imports this module, so the app registry finds them
under agents_app as before. Nothing here imports an app: an event's run and
session are named by their label ("agents_app.Run").
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

APP_LABEL = "agents_app"


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer"
    EDITOR = "editor", "Editor"
    OPERATOR = "operator", "Operator"
    ADMIN = "admin", "Admin"


# Viewing, editing and running are separate capabilities (SPEC §7).
ROLE_CAPABILITIES: dict[str, frozenset[str]] = {
    Role.VIEWER: frozenset({"view"}),
    Role.EDITOR: frozenset({"view", "edit"}),
    Role.OPERATOR: frozenset({"view", "run"}),
    Role.ADMIN: frozenset({"view", "edit", "run", "manage"}),
}


class Team(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    defs_dir = models.CharField(
        max_length=500,
        blank=True,
        help_text="Folder of this team's markdown definitions; blank means MAS_DEFS_ROOT/<slug>.",
    )
    tool_result_max_bytes = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="A tool result longer than this is stored as a workspace file; the model gets its head, size "
                  "and path. Blank means MAS_TOOL_RESULT_MAX_BYTES.",
    )
    # Only the operator grants it (a superuser in the admin, `create_team --allow-stdio`): a stdio MCP server
    # runs a command on the server, sandboxed (tools_app.mcp.sandbox); no team role implies it.
    stdio_mcp_allowed = models.BooleanField(
        default=False, verbose_name="stdio MCP servers allowed",
        help_text="May this team's admins create stdio MCP servers (a command run on the server, in the sandbox)? "
                  "Only a superuser changes it.",
    )
    # People in the loop (agents_app.approvals): tool names or patterns every agent of the team needs a
    # person's approval for ("mcp_unmarked": every MCP tool its server does not mark read-only), the deadline
    # and default outcome of a request, and the webhook told of requests, questions and run ends.
    approval_policy = models.JSONField(default=list, blank=True)
    approval_deadline_s = models.PositiveIntegerField(default=86400)
    approval_default = models.CharField(max_length=16, default="reject",
                                        choices=[("reject", "Reject"), ("approve", "Approve"), ("fail", "Fail")])
    webhook_url = models.CharField(max_length=500, blank=True)
    webhook_secret = models.CharField(max_length=200, blank=True, help_text="HMAC-SHA256 key; never shown again")
    # Its share of the workers (agents_app.scheduler): at most this many sessions at once (blank: the operator's
    # MAS_TEAM_MAX_SESSIONS), and its weight when teams with queued work share free slots. The operator sets
    # both (a superuser in the admin); a team admin may set ``session_limit`` lower, never above the cap.
    max_sessions = models.PositiveIntegerField(
        null=True, blank=True, verbose_name="max sessions at once",
        help_text="Set by the operator. Blank means MAS_TEAM_MAX_SESSIONS.")
    session_limit = models.PositiveIntegerField(
        null=True, blank=True, verbose_name="the team's own session limit",
        help_text="Set by the team's admins, below the operator's cap. Blank: the cap.")
    weight = models.PositiveIntegerField(
        default=1, help_text="Set by the operator: a team of weight 2 gets twice the free slots of a team of 1 "
                             "while both have queued work.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = APP_LABEL
        verbose_name = "team"
        verbose_name_plural = "teams"
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mas_memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = APP_LABEL
        verbose_name = "membership"
        verbose_name_plural = "memberships"
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="membership_unique_team_user")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class ApiToken(models.Model):
    """A bearer token: only its SHA-256 is stored; the token is shown once."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="api_tokens")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mas_api_tokens")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=12, help_text="First characters of the token, to recognise it.")
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = APP_LABEL
        verbose_name = "API token"
        verbose_name_plural = "API tokens"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user}, {self.team})"

class Invitation(models.Model):
    """A single-use link that makes whoever opens it (signed in, or creating their account there) a member of
    ``team`` with ``role``. Team admins add people this way: they never type a username, so they cannot
    learn which usernames exist. Only the token's SHA-256 is stored; the link is shown once."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="invitations")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    token_hash = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                    related_name="+")
    accepted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = APP_LABEL
        verbose_name = "invitation"
        verbose_name_plural = "invitations"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"invitation to {self.team} as {self.role}"


class PasswordLinkNonce(models.Model):
    """The one set-password link of a user that works: each new link draws a new nonce, which the link's
    token is signed over (``mas_core.teams.set_password_links``), so every older link stops working."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    nonce = models.CharField(max_length=64)
    issued_at = models.DateTimeField(auto_now=True)

    class Meta:
        app_label = APP_LABEL
        verbose_name = "set-password link"
        verbose_name_plural = "set-password links"

    def __str__(self) -> str:
        return f"set-password link of {self.user}"


class Definition(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    slug = models.SlugField(max_length=100)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    body = models.TextField(blank=True)
    spec = models.JSONField(default=dict, blank=True)
    extra = models.JSONField(default=dict, blank=True, help_text="Unknown frontmatter keys, kept as they were.")
    version = models.PositiveIntegerField(default=0)
    # The canonical markdown as saved. ``spec`` is jsonb, which does not keep
    # key order, so the text is kept as written rather than re-rendered.
    content = models.TextField(blank=True)
    content_hash = models.CharField(max_length=64, blank=True)
    synced_hash = models.CharField(
        max_length=64, blank=True, help_text="Hash of the markdown file as last written or read."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    kind_name: str = ""

    class Meta:
        abstract = True  # no app_label: each concrete kind is its own app's model
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class DefinitionVersion(models.Model):
    """An immutable snapshot of a definition as markdown, one per saved change."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="definition_versions")
    kind = models.CharField(max_length=16)
    slug = models.SlugField(max_length=100)
    number = models.PositiveIntegerField()
    content = models.TextField()
    # A skill's files beside SKILL.md (path → text) as they were; null on versions kept before they were.
    references = models.JSONField(null=True, blank=True)
    content_hash = models.CharField(max_length=64)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    source = models.CharField(max_length=16, default="api")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = APP_LABEL
        verbose_name = "definition version"
        verbose_name_plural = "definition versions"
        ordering = ["team_id", "kind", "slug", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["team", "kind", "slug", "number"], name="definition_version_unique")
        ]

    def __str__(self) -> str:
        return f"{self.kind}:{self.slug} v{self.number}"


class Event(models.Model):
    # No index of its own: the unique (run, seq) index serves every lookup by run (one index less per event).
    # No foreign key checks in PostgreSQL (``db_constraint=False``), here nor on the other rows a step appends
    # (history entries, workspace files and their versions): a step's commit checked one per row, 10-15 % of
    # its database CPU. What they guarded, the writes keep: each row a write adds hangs on the run's and the
    # session's rows, which it locks first (agents_app.execution.store, mas_core.eventlog), and a run is deleted
    # only when finished, under its row's lock, with everything it wrote (Django's cascade).
    run = models.ForeignKey("agents_app.Run", on_delete=models.CASCADE, related_name="events", db_index=False,
                            db_constraint=False)
    seq = models.PositiveBigIntegerField()
    type = models.CharField(max_length=40)
    agent = models.CharField(max_length=100, blank=True)
    session = models.ForeignKey("agents_app.Session", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="events", db_constraint=False)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = APP_LABEL
        verbose_name = "event"
        verbose_name_plural = "events"
        ordering = ["run_id", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="event_unique_run_seq")]

    def __str__(self) -> str:
        return f"#{self.seq} {self.type}"
