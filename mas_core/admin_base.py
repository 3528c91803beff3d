"""Team scoping for the admin, and the markdown editor every definition shares.

:class:`TeamScopedAdmin` is the base of every MAS ModelAdmin: querysets hold
only the rows of the user's teams, an object of another team is a 404 (never
a redirect that confirms it exists), and each permission is decided by the
user's role in the object's team. :class:`DefinitionAdmin` edits a
definition as its markdown file and saves it through the same services as
the REST API and ``sync_markdown``.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html

from mas_core.definitions import storage
from mas_core.definitions.dependents import (
    Dependent,
    DefinitionInUse,
    definition_dependents,
    dependents_summary,
    workflow_missing_agents,
)
from mas_core.definitions.kinds import KINDS_BY_NAME, Kind, kind_for_model, kind_named
from mas_core.definitions.selectors import SYNC_STATUS_LABELS, definition_sync_status
from mas_core.definitions.markdown import DefinitionError, ParsedDefinition
from mas_core.definitions.services import (
    definition_delete,
    definition_parse,
    definition_save,
    definition_slug,
    row_files,
)
from mas_core.admin_versions import VersionsAdminMixin
from mas_core.models import Team
from mas_core.permissions import actor_for, team_ids_with

# -- who may do what ---------------------------------------------------------


def team_ids(request: HttpRequest, capability: str) -> set[int] | None:
    """Teams in which the user has ``capability``; ``None`` means every team (superuser).

    Cached on the request: a changelist asks for permissions once per row.
    """
    if request.user.is_superuser:
        return None
    cache = request.__dict__.setdefault("_mas_team_ids", {})
    if capability not in cache:
        cache[capability] = team_ids_with(request.user, capability)
    return cache[capability]


def teams_with(request: HttpRequest, capability: str):
    ids = team_ids(request, capability)
    return Team.objects.all() if ids is None else Team.objects.filter(pk__in=ids)


def can_manage_stdio(request: HttpRequest, team: Team) -> bool:
    """In a team the operator granted stdio MCP servers: superusers, its admins and holders of the stdio
    permission may run commands on the server."""
    if not team.stdio_mcp_allowed:
        return False
    if request.user.is_superuser:
        return True
    actor = actor_for(request.user, team)
    return actor is not None and actor.can_manage_stdio


class TeamListFilter(admin.SimpleListFilter):
    """Filter by team, offering only the user's teams (the stock filter lists every team)."""

    title = "team"
    parameter_name = "team"

    def __init__(self, request, params, model, model_admin):
        self.team_lookup = model_admin.team_lookup
        super().__init__(request, params, model, model_admin)

    def lookups(self, request, model_admin):
        return [(str(team.pk), team.slug) for team in teams_with(request, model_admin.view_capability)]

    def queryset(self, request, queryset):
        if self.value():
            return queryset.filter(**{self.team_lookup: self.value()})
        return queryset


class TeamScopedAdmin(admin.ModelAdmin):
    """A ModelAdmin whose rows belong to teams and whose permissions follow roles.

    Subclasses set ``team_lookup`` (the path from the model to its team) and
    the capabilities that viewing and editing need. With ``use_model_perms``
    the Django model permission (granted by the role's group) is needed as
    well, so a superuser who trims a group's permissions is obeyed.
    """

    team_lookup = "team"
    view_capability = "view"
    edit_capability = "edit"
    use_model_perms = True

    def team_id_of(self, obj) -> int:
        return obj.team_id

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        ids = team_ids(request, self.view_capability)
        return queryset if ids is None else queryset.filter(**{f"{self.team_lookup}__in": ids})

    def get_object(self, request, object_id, from_field=None):
        # Django answers an unknown id with a redirect and a message naming
        # it; another team's object must look exactly like one that does
        # not exist, so every view that loads an object gets a plain 404.
        obj = super().get_object(request, object_id, from_field)
        if obj is None:
            raise Http404("No such object.")
        return obj

    def _allowed(self, request, capability: str, obj, model_perm: bool) -> bool:
        if self.use_model_perms and not model_perm:
            return False
        ids = team_ids(request, capability)
        if ids is None:
            return True
        if obj is None:
            return bool(ids)
        return self.team_id_of(obj) in ids

    def has_module_permission(self, request):
        model_perm = super().has_module_permission(request)
        return self._allowed(request, self.view_capability, None, model_perm)

    def has_view_permission(self, request, obj=None):
        return self._allowed(request, self.view_capability, obj, super().has_view_permission(request))

    def has_add_permission(self, request):
        return self._allowed(request, self.edit_capability, None, super().has_add_permission(request))

    def has_change_permission(self, request, obj=None):
        return self._allowed(request, self.edit_capability, obj, super().has_change_permission(request))

    def has_delete_permission(self, request, obj=None):
        return self._allowed(request, self.edit_capability, obj, super().has_delete_permission(request))

    def add_capability(self) -> str:
        """The capability whose teams the add form's team field offers."""
        return self.edit_capability

    def get_changeform_initial_data(self, request):
        # A user who can add in one team only has nothing to choose: that team is preselected.
        initial = super().get_changeform_initial_data(request)
        teams = list(teams_with(request, self.add_capability()).values_list("pk", flat=True)[:2])
        if len(teams) == 1:
            initial.setdefault("team", teams[0])
        return initial

    def get_list_filter(self, request):
        filters = list(super().get_list_filter(request))
        ids = team_ids(request, self.view_capability)
        if ids is None or len(ids) > 1:
            filters.append(TeamListFilter)
        return filters


# -- definitions as markdown -------------------------------------------------


class SecretTextarea(forms.Textarea):
    """A textarea that never renders a value: what is typed in it is write-only."""

    def format_value(self, value):
        return None


def describe_error(error: DefinitionError) -> str:
    """'Line 3, field tools: unknown tool(s) …' — where first, then why."""
    where = []
    if error.line:
        where.append(f"line {error.line}")
    if error.field:
        where.append(f"field {error.field}")
    if not where:
        return error.message
    text = ", ".join(where)
    return f"{text[0].upper()}{text[1:]}: {error.message}"


def max_bytes_validator(limit: int):
    def validate(text: str) -> None:
        size = len(text.encode("utf-8"))
        if size > limit:
            raise forms.ValidationError(f"The file is {size} bytes; definitions are limited to {limit} bytes.")

    return validate


class DefinitionForm(forms.ModelForm):
    """The whole markdown file in one textarea; validated by the definition services."""

    markdown = forms.CharField(
        strip=False,
        widget=forms.Textarea(
            attrs={"rows": 30, "cols": 100, "spellcheck": "false", "style": "font-family: monospace; width: 95%"}
        ),
        help_text="The whole file: YAML frontmatter between '---' lines, then the body.",
    )

    # Set per request by DefinitionAdmin.get_form (each call builds a new class).
    model_admin: "DefinitionAdmin"
    request: HttpRequest

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        kind = self.model_admin.kind
        if self.instance.pk:
            self.fields["markdown"].initial = row_files(kind, self.instance).text
        else:
            self.fields["markdown"].initial = self.model_admin.markdown_template
        self.fields["markdown"].validators.append(max_bytes_validator(settings.MAS_MAX_DEFINITION_BYTES))
        self.parsed: ParsedDefinition | None = None
        self.slug: str | None = None

    @property
    def team(self) -> Team | None:
        return self.instance.team if self.instance.pk else self.cleaned_data.get("team")

    def prepare(self, parsed: ParsedDefinition) -> ParsedDefinition:
        """Hook: adjust the parsed definition with the form's other fields.

        Raise ``forms.ValidationError({field: message})`` about those fields.
        """
        return parsed

    def submitted_markdown(self, cleaned: dict) -> str | None:
        """Hook: the markdown to save (a form with fields composes it from them)."""
        return cleaned.get("markdown")

    def report(self, error: DefinitionError) -> None:
        """Hook: show ``error`` on the field it is about (here: the markdown textarea)."""
        self.add_error("markdown", describe_error(error))

    def clean(self):
        cleaned = super().clean()
        team, text = self.team, self.submitted_markdown(cleaned)
        if team is None or text is None:
            return cleaned
        read_only = storage.read_only_reason(storage.team_defs_dir(team))
        if read_only:
            self.add_error(None, f"Team {team} cannot save definitions: {read_only}.")
            return cleaned
        kind = self.model_admin.kind
        path = str(kind.relative_path(self.instance.slug)) if self.instance.pk else ""
        try:
            parsed = self.prepare(definition_parse(kind=kind, team=team, text=text, path=path))
            # The slug is the file name: it stays when the name is edited.
            slug = self.instance.slug if self.instance.pk else definition_slug(parsed.spec.name)
        except DefinitionError as error:
            self.report(error)
            return cleaned
        except forms.ValidationError as error:
            # Raised by prepare() about the form's other fields; it names them.
            self.add_error(None, error)
            return cleaned
        if not self.instance.pk and kind.model.objects.filter(team=team, slug=slug).exists():
            self.report(DefinitionError(f"a {kind.label.lower()} with slug {slug} already exists in {team}.",
                                        field="name"))
            return cleaned
        refusal = self.model_admin.refusal(self.request, team, parsed, self.instance)
        if refusal:
            self.add_error("markdown", refusal)
            return cleaned
        self.parsed, self.slug = parsed, slug
        return cleaned


class DefinitionAdmin(VersionsAdminMixin, TeamScopedAdmin):
    """Admin of one definition kind: edited as markdown, saved by ``definition_save``."""

    describe_error = staticmethod(describe_error)
    save_on_top = True
    change_form_template = "admin/mas/definition_change_form.html"

    form = DefinitionForm
    markdown_template = "---\nname: \ndescription: \n---\n"
    extra_form_fields: tuple[str, ...] = ()  # editable fields beside the markdown
    extra_readonly: tuple[str, ...] = ()  # read-only fields shown under Status
    object_history_template = "admin/mas/definition_history.html"
    list_display = ("name", "slug", "team", "version", "updated_at")
    list_select_related = ("team",)
    search_fields = ("name", "slug", "description")
    ordering = ("team__slug", "slug")

    @property
    def kind(self) -> Kind:
        return kind_for_model(self.model)

    def refusal(self, request, team: Team, parsed: ParsedDefinition, instance) -> str | None:
        """Hook: why this user may not save ``parsed`` in ``team`` (None when allowed)."""
        return None

    def allow_stdio(self, request, team: Team) -> bool:
        return can_manage_stdio(request, team)

    # -- form ------------------------------------------------------------------

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        form.model_admin = self
        form.request = request
        return form

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "team":
            kwargs["queryset"] = teams_with(request, self.edit_capability)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


    def get_fieldsets(self, request, obj=None):
        if obj is None:
            return [(None, {"fields": ["team", "markdown", *self.extra_form_fields]})]
        editable = self.has_change_permission(request, obj)
        obj._mas_can_change = editable  # for version_history's restore links (a display without the request)
        return [
            (None, {"fields": ["team", "markdown", *(self.extra_form_fields if editable else ())]}),
            (
                "Status",
                {"fields": ["slug", "version", "updated_at", "content_hash", "sync_status", *self.extra_readonly]},
            ),
            ("Version history", {"fields": ["version_history"]}),
        ]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        return ["team", "slug", "version", "updated_at", "content_hash", "sync_status", "version_history",
                *self.extra_readonly]

    # -- read-only displays ----------------------------------------------------

    @admin.display(description="Markdown")
    def markdown(self, obj):
        # Shown to view-only users in place of the textarea.
        return format_html("<pre style='white-space: pre-wrap'>{}</pre>", row_files(self.kind, obj).text)

    @admin.display(description="Sync status")
    def sync_status(self, obj):
        label = SYNC_STATUS_LABELS[definition_sync_status(kind=self.kind, row=obj)]
        if self.kind.name == "workflow":
            missing = workflow_missing_agents(team=obj.team, spec=obj.spec or {})
            if missing:
                # In sync with its file, but not runnable: say so rather than "in sync".
                return format_html("{}; <strong class='mas-broken'>broken: agent{} {} missing</strong> — runs fail "
                                   "until {} added again or the steps changed", label, "s" if len(missing) > 1 else "",
                                   ", ".join(missing), "they are" if len(missing) > 1 else "it is")
        return label

    # -- saving and deleting through the services --------------------------------

    def save_model(self, request, obj, form, change):
        team = obj.team
        result = definition_save(
            kind=self.kind,
            team=team,
            parsed=form.parsed,
            slug=form.slug,
            author=request.user,
            source="admin",
            allow_stdio=self.allow_stdio(request, team),
            create_only=not change,
        )
        for warning in result.warnings:
            self.message_user(request, warning, messages.WARNING)
        # The service saved its own (locked) row: point the admin's instance
        # at it so the log entry and the redirect name the saved object.
        obj.pk = result.row.pk
        obj.refresh_from_db()
        obj._state.adding = False

    def save_related(self, request, form, formsets, change):
        # Inlines of definitions are read-only views of rows the service
        # derives from the markdown; there is nothing to save from them.
        pass

    def construct_change_message(self, request, form, formsets, add=False):
        return super().construct_change_message(request, form, [], add)

    # -- deleting: what uses the definition is listed, and deleting it anyway is asked for --------

    delete_confirmation_template = "admin/mas/delete_confirmation.html"

    def dependents(self, obj) -> list[Dependent]:
        return definition_dependents(kind=self.kind, team=obj.team, row=obj)

    def render_delete_form(self, request, context):
        obj = context.get("object")
        dependents = self.dependents(obj) if obj is not None else []
        if dependents:
            context["mas_dependents_message"] = dependents_summary(self.kind, obj.slug, dependents)
            context["mas_dependents"] = [
                {**vars(dependent), "kind": kind_named(dependent.kind).label,
                 "url": reverse(f"admin:{kind_model_label(dependent.kind)}_changelist") + f"?q={dependent.slug}"}
                for dependent in dependents
            ]
        return super().render_delete_form(request, context)

    def delete_model(self, request, obj):
        force = request.POST.get("force") == "1"
        try:
            warnings = definition_delete(
                kind=self.kind, team=obj.team, slug=obj.slug, allow_stdio=self.allow_stdio(request, obj.team),
                force=force,
            )
        except storage.ReadOnlyFolderError as error:
            # Rolled back, the row stays; a 403 rather than the admin's "deleted" message.
            raise PermissionDenied(str(error)) from error
        for warning in warnings:
            self.message_user(request, warning, messages.WARNING)

    def delete_view(self, request, object_id, extra_context=None):
        if request.method == "POST" and request.POST.get("force") != "1":
            obj = self.get_object(request, unquote(object_id))
            read_only = storage.read_only_reason(storage.team_defs_dir(obj.team))
            if read_only and self.has_delete_permission(request, obj):
                # Nothing can be deleted there, used or not: that is the answer.
                raise PermissionDenied(f"Team {obj.team} cannot delete definitions: {read_only}.")
            if self.has_delete_permission(request, obj) and self.dependents(obj):
                # Used since the page was shown, or posted without the page: ask again, with the list.
                self.message_user(request, "Not deleted: other definitions use it (listed below).", messages.ERROR)
                return HttpResponseRedirect(request.path)
        return super().delete_view(request, object_id, extra_context)

    def delete_queryset(self, request, queryset):
        # One service call per row so files go too; per-object delete
        # permissions were already checked by the confirmation page. Rows
        # others use stay: deleting them is asked for one at a time.
        for obj in queryset.select_related("team"):
            try:
                definition_delete(kind=self.kind, team=obj.team, slug=obj.slug,
                                  allow_stdio=self.allow_stdio(request, obj.team))
            except DefinitionInUse as error:
                self.message_user(request, f"Not deleted: {error}.", messages.ERROR)
            except storage.ReadOnlyFolderError as error:
                raise PermissionDenied(str(error)) from error


def kind_model_label(kind_name: str) -> str:
    """'agent' → 'agents_app_agent': the prefix of a kind's admin URL names."""
    meta = KINDS_BY_NAME[kind_name].model._meta
    return f"{meta.app_label}_{meta.model_name}"


class ReadOnlyTeamAdmin(TeamScopedAdmin):
    """Rows nobody adds or changes in the admin (versions, what the kernel writes).

    They go with their team (or run): only a superuser deleting that may delete them.
    """

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser


# Rows a run owns (its sessions and events here, its channels and blackboard in memory_app): read-only.

def change_link(model: str, pk) -> str:
    """A link to one row's admin page, labelled with the start of its id."""
    return format_html("<a href='{}'>{}</a>", reverse(f"admin:agents_app_{model}_change", args=[pk]), str(pk)[:8])


class ReadOnlyAdmin(ReadOnlyTeamAdmin):
    """Rows the kernel writes: viewed by team members by role, never added or changed here."""

    use_model_perms = False


class RunChildAdmin(ReadOnlyAdmin):
    """Sessions, events and files: their team is their run's."""

    team_lookup = "run__team"

    @admin.display(description="Run")
    def run_link(self, obj):
        return change_link("run", obj.run_id)

    def team_id_of(self, obj) -> int:
        return obj.run.team_id
