"""Admin of teams, members, tokens and the definitions kept in this app.

Every admin here is team scoped (see :mod:`mas_core.admin_base`); writes go
through the services the API uses.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.db.models import Count, Q
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from agents_app.admin_agent_form import AgentForm
from agents_app.admin_run_button import RunButtonAdmin
from mas_core.admin_fields_editor import FieldsEditorAdmin
from mas_core.admin_base import DefinitionAdmin, ReadOnlyTeamAdmin, TeamScopedAdmin, team_ids, teams_with
from mas_core.definitions import storage
from agents_app.models import (
    ROLE_CAPABILITIES,
    Agent,
    ApiToken,
    DefinitionVersion,
    Guardrail,
    RemoteAgent,
    Invitation,
    Membership,
    ModelProvider,
    ProviderModel,
    Skill,
    Team,
)
from agents_app.money import money_display
from agents_app.scheduler import team_limit
from mas_core.teams import (
    api_token_create,
    api_token_revoke,
    invitation_create,
    membership_add,
    membership_delete,
    membership_set,
    password_link_pending,
    password_link_reissue,
)

# -- definitions ---------------------------------------------------------------


@admin.register(Agent)
class AgentAdmin(RunButtonAdmin, FieldsEditorAdmin, DefinitionAdmin):
    """Agents: edited as a form (``admin_agent_form``) or as their markdown, the editor's choice; *Run…* opens
    the monitor's start form with the agent chosen."""

    form = AgentForm
    markdown_template = "---\nname: \ndescription: \ntier: medium\n---\n\nThe system prompt of the agent.\n"
    list_display = ("name", "slug", "team", "model", "tier", "version", "updated_at")
    list_filter = ("tier",)
    fields_fieldsets = [
        ("Agent", {"fields": [
            "agent_name", "agent_description", ("agent_model", "agent_tier"), "escalation",
            ("temperature", "max_tokens"), "tools", "mcp_servers", "skills", "approval",
            ("max_steps", "max_tool_calls", "timeout_s"), ("memory_enabled", "memory_k"), "prompt"]}),
    ]

    class Media:
        # markdown.js is the monitor's renderer, which builds DOM nodes and never parses HTML.
        js = ("mas_admin/definition_form.js", "mas_admin/rows.js", "monitor/markdown.js",
              "mas_admin/markdown_preview.js")


@admin.register(Skill)
class SkillAdmin(DefinitionAdmin):
    markdown_template = "---\nname: \ndescription: \n---\n\nWhat to do when this skill applies.\n"
    extra_readonly = ("reference_files",)

    @admin.display(description="Reference files")
    def reference_files(self, obj):
        # References come from the files beside SKILL.md (sync_markdown); the
        # admin shows them and keeps them as they are on every save.
        references = obj.references or {}
        if not references:
            return "—"
        return format_html_join(
            "",
            "<details><summary>{}</summary><pre style='white-space: pre-wrap'>{}</pre></details>",
            sorted(references.items()),
        )


@admin.register(Guardrail)
class GuardrailAdmin(DefinitionAdmin):
    """Guardrails: edited as markdown; the template redacts card numbers in what tools return."""

    markdown_template = (
        "---\nname: Card numbers\ndescription: Card numbers never reach a model or a memory.\n"
        "applies_to:\n- run_input\n- tool_result\n- memory_write\ndetector:\n  type: pii\n  kinds:\n  - card\n"
        "action: redact\n---\n\nNotes for people: why this guardrail exists, and who to ask about it.\n"
    )
    list_display = ("name", "slug", "team", "action", "default", "version", "updated_at")
    list_filter = ("action", "default")


@admin.register(RemoteAgent)
class RemoteAgentAdmin(DefinitionAdmin):
    """Remote agents (A2A): edited as markdown; the template names a partner's agent card and its token."""

    markdown_template = (
        "---\nname: Partner researcher\ndescription: Researches a topic and answers with sources (a partner's "
        "agent, over A2A).\ncard_url: https://agents.example.com/a2a/researcher/.well-known/agent-card.json\n"
        "headers:\n  Authorization: Bearer ${PARTNER_TOKEN}\ntimeout_s: 600\n---\n\n"
        "Notes for people: who runs this agent, and who to ask about it.\n"
    )


class ProviderModelInline(admin.TabularInline):
    """The provider's models: derived from its markdown on every save, so read-only."""

    model = ProviderModel
    fields = ("name", "tier", "input", "output", "context_window", "max_output_tokens")
    readonly_fields = fields
    extra = 0
    can_delete = False

    @admin.display(description="Input (USD per million tokens)")
    def input(self, obj):
        return money_display(obj.input_price)

    @admin.display(description="Output (USD per million tokens)")
    def output(self, obj):
        return money_display(obj.output_price)

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_view_permission(self, request, obj=None):
        # The provider page itself is team scoped; its models go with it.
        return True


@admin.register(ModelProvider)
class ModelProviderAdmin(DefinitionAdmin):
    markdown_template = (
        "---\nname: \ntype: openai\nbase_url: \napi_key_env: \nmodels:\n- name: \n  tier: medium\n"
        "  input_price: 0\n  output_price: 0\n---\n"
    )
    list_display = ("name", "slug", "team", "provider_type", "api_key_env", "version", "updated_at")
    list_filter = ("provider_type",)
    inlines = (ProviderModelInline,)

    def get_inline_instances(self, request, obj=None):
        # On the add page the models are still only lines of markdown.
        return super().get_inline_instances(request, obj) if obj is not None else []


@admin.register(DefinitionVersion)
class DefinitionVersionAdmin(ReadOnlyTeamAdmin):
    """Saved versions: immutable, so nobody adds or changes one here."""

    list_display = ("__str__", "team", "kind", "slug", "number", "author", "source", "created_at")
    list_filter = ("kind", "source")
    list_select_related = ("team", "author")
    search_fields = ("slug",)
    fields = ("team", "kind", "slug", "number", "author", "source", "created_at", "content_hash", "markdown")
    readonly_fields = fields
    actions = None

    @admin.display(description="Markdown")
    def markdown(self, obj):
        return format_html("<pre style='white-space: pre-wrap'>{}</pre>", obj.content)



# -- teams, members, tokens --------------------------------------------------------


class TeamMemberAdmin(TeamScopedAdmin):
    """Teams, memberships and tokens: decided by the role alone ("manage" = team admin)."""

    edit_capability = "manage"
    use_model_perms = False


class TeamForm(forms.ModelForm):
    class Meta:
        model = Team
        fields = ("slug", "name", "defs_dir", "tool_result_max_bytes", "stdio_mcp_allowed", "max_sessions",
                  "session_limit", "weight")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "weight" in self.fields:
            self.fields["weight"].required = False  # blank: 1

    def clean_weight(self):
        return self.cleaned_data.get("weight") or 1

    def clean(self):
        data = super().clean()
        limit = data.get("session_limit")
        cap = team_limit(max_sessions=data.get("max_sessions", self.instance.max_sessions), session_limit=None)
        if limit is not None and limit > cap:
            self.add_error("session_limit", f"At most {cap}, the operator's cap for this team.")
        return data

    def clean_defs_dir(self):
        defs_dir = self.cleaned_data["defs_dir"]
        if defs_dir:
            reason = storage.read_only_reason(storage.team_defs_dir(Team(slug="-", defs_dir=defs_dir)))
            if reason:
                raise forms.ValidationError(f"Not this folder: {reason}.")
        return defs_dir


@admin.register(Team)
class TeamAdmin(TeamMemberAdmin):
    form = TeamForm
    team_lookup = "pk"
    list_display = ("slug", "name", "member_count", "created_at")
    search_fields = ("slug", "name")
    fields = ("slug", "name", "defs_dir", "tool_result_max_bytes", "stdio_mcp_allowed", "max_sessions",
              "session_limit", "weight")

    def team_id_of(self, obj) -> int:
        return obj.pk

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(member_count=Count("memberships"))

    @admin.display(description="Members", ordering="member_count")
    def member_count(self, obj):
        return obj.member_count

    def get_list_filter(self, request):
        return []

    def get_readonly_fields(self, request, obj=None):
        # defs_dir picks where the server writes files, stdio_mcp_allowed lets the team run commands on
        # it, max_sessions and weight are its share of the workers: superusers only.
        if request.user.is_superuser:
            return ["slug"] if obj else []
        return ["slug", "defs_dir", "stdio_mcp_allowed", "max_sessions", "weight"]

    def has_add_permission(self, request):
        return request.user.is_superuser

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser


class MembershipForm(forms.ModelForm):
    username = forms.CharField(max_length=150, help_text="An existing user, or the username of a new account.")
    new_account = forms.BooleanField(
        required=False, label="New account",
        help_text="Create this account without a password: you get a one-time link for its owner to set one.",
    )

    class Meta:
        model = Membership
        fields = ("team", "role")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            # An existing membership changes its role only.
            self.fields.pop("username", None)
            self.fields.pop("new_account", None)

    def clean(self):
        # The checks membership_add makes, as errors on their fields.
        cleaned = super().clean()
        if self.instance.pk or "username" not in self.fields:
            return cleaned
        username, team = cleaned.get("username"), cleaned.get("team")
        if not username or team is None:
            return cleaned
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        if cleaned.get("new_account"):
            if user is not None:
                self.add_error("username", f"A user {username} already exists: untick New account to add them.")
                return cleaned
            try:
                User.username_validator(username)
            except forms.ValidationError as error:
                self.add_error("username", error)
        elif user is None:
            self.add_error("username", "No user with this username.")
        elif Membership.objects.filter(team=team, user=user).exists():
            self.add_error("username", f"{username} is already a member of {team}; change their role instead.")
        return cleaned


@admin.register(Membership)
class MembershipAdmin(TeamMemberAdmin):
    """A team's people: team admins change roles and remove them; they add people with invitations
    (``InvitationAdmin``). Adding by username (an existing user or a new account) is the superuser's: it
    answers whether a username exists, which a team admin must not learn of other teams' people."""

    form = MembershipForm
    list_display = ("user", "team", "role", "created_at")
    list_filter = ("role",)
    list_select_related = ("team", "user")
    search_fields = ("user__username",)
    actions = ("reissue_password_link",)

    def has_add_permission(self, request):
        return request.user.is_superuser

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("team", "username", "new_account", "role")
        return ("team", "user", "role", *(("password_link",) if self._pending_link(request, obj) else ()))

    def get_readonly_fields(self, request, obj=None):
        return ("team", "user", "password_link") if obj is not None else ()

    def _pending_link(self, request, obj):
        """The member's set-password link that still works, for an admin of the team only (kept on ``obj``
        for ``password_link``, a display without the request)."""
        if not hasattr(obj, "_mas_password_link"):
            manages = team_ids(request, "manage")
            pending = (password_link_pending(team=obj.team, user=obj.user)
                       if manages is None or obj.team_id in manages else None)
            obj._mas_password_link = (request.build_absolute_uri(pending.path), pending.expires_at) if pending else None
        return obj._mas_password_link

    @admin.display(description="Set-password link")
    def password_link(self, obj):
        link = getattr(obj, "_mas_password_link", None)
        if not link:
            return "—"
        url, expires_at = link
        return format_html(
            "<code class='mas-password-link'>{}</code><div class='help'>{} has not set a password yet: give them "
            "this link. It works once, until {} UTC; a new one (the list's action) replaces it.</div>",
            url, obj.user, expires_at.strftime("%Y-%m-%d %H:%M"))

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "team":
            kwargs["queryset"] = teams_with(request, "manage")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request, obj, form, change):
        if change:
            membership = membership_set(team=obj.team, user=obj.user, role=obj.role)
        else:
            added = membership_add(team=obj.team, username=form.cleaned_data["username"], role=obj.role,
                                   new_account=form.cleaned_data.get("new_account", False))
            membership = added.membership
            if added.password_link:
                # Shown once, to the admin who hands it over: this server sends no mail.
                self.message_user(request, format_html(
                    "New account {} ({} in {}). Its one-time link to set a password: <code class='mas-password-link'>"
                    "{}</code> — give it to its owner; it works until the password is set. It stays on "
                    "<a href='{}'>their membership page</a> until then.",
                    membership.user, membership.role, membership.team,
                    request.build_absolute_uri(added.password_link),
                    reverse("admin:agents_app_membership_change", args=[membership.pk])), messages.SUCCESS)
        obj.pk = membership.pk
        obj.refresh_from_db()
        obj._state.adding = False

    def delete_model(self, request, obj):
        membership_delete(team=obj.team, user=obj.user)

    def delete_queryset(self, request, queryset):
        for membership in queryset.select_related("user"):
            membership_delete(team=membership.team, user=membership.user)

    @admin.action(description="New set-password link (accounts that never set a password)", permissions=["change"])
    def reissue_password_link(self, request, queryset):
        # The list also shows teams where this user is not admin: only the managed ones count.
        manages = team_ids(request, "manage")
        if manages is not None:
            queryset = queryset.filter(team_id__in=manages)
        for membership in queryset.select_related("team", "user"):
            try:
                link = password_link_reissue(team=membership.team, user=membership.user)
            except ValueError as error:
                self.message_user(request, f"No link for {membership.user}: {error}.", messages.WARNING)
                continue
            self.message_user(request, format_html(
                "One-time link for {} to set a password: <code class='mas-password-link'>{}</code> (also on "
                "<a href='{}'>their membership page</a> until it is used or expires)",
                membership.user, request.build_absolute_uri(link),
                reverse("admin:agents_app_membership_change", args=[membership.pk])), messages.SUCCESS)


class InvitationForm(forms.ModelForm):
    class Meta:
        model = Invitation
        fields = ("team", "role")


@admin.register(Invitation)
class InvitationAdmin(TeamMemberAdmin):
    """Team admins invite people: a single-use link, shown once, that makes whoever opens it a member with
    the chosen role (signed in, or with an account they create there). It expires after three days."""

    form = InvitationForm
    view_capability = "manage"  # a team's invitations are its admins' business
    list_display = ("team", "role", "created_by", "created_at", "expires_at", "accepted_by", "accepted_at")
    list_filter = ("role",)
    list_select_related = ("team", "created_by", "accepted_by")
    readonly_fields = ("team", "role", "created_by", "created_at", "expires_at", "accepted_by", "accepted_at")

    def get_fields(self, request, obj=None):
        return ("team", "role") if obj is None else self.readonly_fields

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj is not None else ()

    def has_change_permission(self, request, obj=None):
        return False  # single-use and immutable: delete one to withdraw it

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "team":
            kwargs["queryset"] = teams_with(request, "manage")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request, obj, form, change):
        issued = invitation_create(team=obj.team, role=obj.role, created_by=request.user)
        # Shown once, to the admin who hands it over: only its hash is stored.
        self.message_user(request, format_html(
            "Invitation to {} as {}: <code class='mas-invitation-link'>{}</code> — give it to the person you "
            "invite; it works once, until {}.", issued.row.team, issued.row.role,
            request.build_absolute_uri(issued.link), issued.row.expires_at.strftime("%Y-%m-%d %H:%M UTC")),
            messages.SUCCESS)
        obj.pk = issued.row.pk
        obj.refresh_from_db()
        obj._state.adding = False


class ApiTokenForm(forms.ModelForm):
    class Meta:
        model = ApiToken
        fields = ("team", "user", "role", "name")

    # Set per request by ApiTokenAdmin.get_form.
    request = None

    def clean(self):
        # The same rules api_token_create enforces, as form errors.
        cleaned = super().clean()
        team, user, role = cleaned.get("team"), cleaned.get("user"), cleaned.get("role")
        if team is None or user is None or role is None:
            return cleaned
        manages = team_ids(self.request, "manage")
        if manages is not None and team.pk not in manages and user != self.request.user:
            self.add_error("user", "Only a team admin issues tokens for other members.")
            return cleaned
        membership = Membership.objects.filter(team=team, user=user).first()
        if membership is None:
            self.add_error("user", f"{user} is not a member of {team}.")
        elif not ROLE_CAPABILITIES[role] <= ROLE_CAPABILITIES[membership.role]:
            self.add_error("role", f"A token cannot exceed {user}'s role in {team} ({membership.role}).")
        return cleaned


@admin.register(ApiToken)
class ApiTokenAdmin(TeamMemberAdmin):
    """Tokens: team admins see their team's, members their own. The hash is never shown."""

    form = ApiTokenForm
    list_display = ("prefix", "name", "user", "team", "role", "created_at", "last_used_at", "revoked_at")
    list_filter = ("role",)
    list_select_related = ("team", "user")
    search_fields = ("name", "prefix", "user__username")
    readonly_fields = ("team", "user", "role", "name", "prefix", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke",)

    def get_fields(self, request, obj=None):
        return ("team", "user", "role", "name") if obj is None else self.readonly_fields

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj is not None else ()

    def get_queryset(self, request):
        queryset = admin.ModelAdmin.get_queryset(self, request)
        manages, member_of = team_ids(request, "manage"), team_ids(request, "view")
        if manages is None:
            return queryset
        return queryset.filter(Q(team_id__in=manages) | Q(user=request.user, team_id__in=member_of))

    def _own_or_managed(self, request, obj) -> bool:
        manages = team_ids(request, "manage")
        return manages is None or obj.team_id in manages or obj.user_id == request.user.pk

    def has_view_permission(self, request, obj=None):
        return self._allowed(request, "view", obj, True) and (
            obj is None or self._own_or_managed(request, obj)
        )

    def has_add_permission(self, request):
        # Any member may issue a token for themselves.
        return self._allowed(request, "view", None, True)

    def has_change_permission(self, request, obj=None):
        # Tokens are immutable: revoke or delete them instead.
        return False

    def has_delete_permission(self, request, obj=None):
        return self._allowed(request, "view", obj, True) and (obj is None or self._own_or_managed(request, obj))

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        form.request = request
        return form

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "team":
            kwargs["queryset"] = teams_with(request, "view")
        elif db_field.name == "user":
            manages = team_ids(request, "manage")
            users = get_user_model().objects.order_by("username")
            if manages is not None:
                users = users.filter(Q(pk=request.user.pk) | Q(mas_memberships__team_id__in=manages)).distinct()
            kwargs["queryset"] = users
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def add_capability(self) -> str:
        return "view"  # any member issues tokens for themselves

    def get_changeform_initial_data(self, request):
        return {"user": request.user.pk, **super().get_changeform_initial_data(request)}

    def save_model(self, request, obj, form, change):
        issued = api_token_create(user=obj.user, team=obj.team, role=obj.role, name=obj.name)
        # The only time the token exists outside its owner's hands: shown once.
        self.message_user(
            request,
            format_html(
                "New API token for {} in {}: <code>{}</code> — copy it now, it will not be shown again.",
                obj.user,
                obj.team,
                issued.token,
            ),
            messages.SUCCESS,
        )
        obj.pk = issued.row.pk
        obj.refresh_from_db()
        obj._state.adding = False

    @admin.action(description="Revoke selected tokens", permissions=["delete"])
    def revoke(self, request, queryset):
        # The queryset is already scoped to tokens this user may delete.
        tokens = list(queryset.filter(revoked_at__isnull=True))
        for token in tokens:
            api_token_revoke(token=token)
        count = len(tokens)
        self.message_user(request, f"Revoked {count} token(s).", messages.SUCCESS)


from agents_app import admin_runs  # noqa: E402,F401  (runs, sessions, events, files)
from agents_app.approvals import admin as approvals_admin  # noqa: E402,F401  (the approvals inbox and settings)
