"""Admin of runs and what happens in them: read-only, team scoped, with a cancel action.

Runs, sessions, events and workspace files are written by the kernel only,
so nobody adds or changes them here. Who sees them is decided by the role in
the run's team (``use_model_perms = False``: the role groups carry no run
permissions); cancelling needs the ``run`` capability (operator or admin) and
goes through ``execution.runs.run_cancel``, like the API.
"""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html

from mas_core.admin_base import ReadOnlyAdmin, RunChildAdmin, change_link, team_ids
from agents_app.execution.runs import run_cancel
from agents_app.models import Activation, Event, Run, Session, WorkspaceFile
from agents_app.models.runs import FINISHED_RUN_STATUSES
from agents_app.money import money_display
from agents_app.selectors_runs import run_duration_s


def pretty_json(value) -> str:
    if value in (None, {}, []):
        return "—"
    return format_html("<pre style='white-space: pre-wrap; margin: 0'>{}</pre>",
                       json.dumps(value, indent=2, ensure_ascii=False, default=str))


@admin.display(description="Cost", ordering="cost_usd")
def cost(obj) -> str:
    """A run's or session's cost, formatted as everywhere else (``agents_app.money``)."""
    return money_display(obj.cost_usd)


def monitor_link(run_id) -> str:
    return format_html("<a class='mas-monitor-link' href='{}'>Live monitor ↗</a>", reverse("monitor-run", args=[run_id]))


def changelist_link(model: str, text: str, **params) -> str:
    query = "&".join(f"{key}={value}" for key, value in params.items())
    return format_html("<a href='{}?{}'>{}</a>", reverse(f"admin:agents_app_{model}_changelist"), query, text)


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_view_permission(self, request, obj=None):
        # The run page itself is team scoped; its rows go with it.
        return True


class ActivationInline(ReadOnlyInline):
    model = Activation
    fields = ("agent", "kind", "parent_agent", "depth", "priority", "status", "attempts", "created_at")
    readonly_fields = fields
    ordering = ("created_at",)

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("parent")

    @admin.display(description="Parent")
    def parent_agent(self, obj):
        return obj.parent.agent if obj.parent_id else "—"


class SessionInline(ReadOnlyInline):
    model = Session
    cost = staticmethod(cost)
    fields = ("session_link", "agent", "attempt", "tier", "model", "status", "prompt_tokens", "completion_tokens",
              "cost", "failure_kind", "started_at", "finished_at")
    readonly_fields = fields
    ordering = ("started_at",)

    def get_queryset(self, request):
        return super().get_queryset(request).defer("state")

    @admin.display(description="Session")
    def session_link(self, obj):
        return change_link("session", obj.pk)

    @admin.display(description="Failure")
    def failure_kind(self, obj):
        return (obj.failure or {}).get("kind") or "—"


class StatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return Run._meta.get_field("status").choices

    def queryset(self, request, queryset):
        return queryset.filter(status=self.value()) if self.value() else queryset


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("short_id", "team", "agent", "workflow", "status", "tokens", "cost", "created_at", "monitor_link")
    list_filter = (StatusFilter, "created_at")
    list_select_related = ("team",)
    search_fields = ("agent", "workflow", "input")
    date_hierarchy = "created_at"
    fieldsets = (
        (None, {"fields": ("monitor_link", "id", "team", "agent", "workflow", "status", "input", "result", "error",
                           "notice")}),
        ("Totals", {"fields": ("prompt_tokens", "completion_tokens", "cost", "duration", "large_tier_uses")}),
        ("Settings", {"fields": ("provider", "show_limits", "show_budget", "show_versions", "created_by",
                                 "created_at", "started_at", "finished_at")}),
        ("Activity", {"fields": ("events_link", "files_link")}),
    )
    readonly_fields = ("monitor_link", "id", "team", "agent", "workflow", "status", "input", "result", "error",
                       "notice", "prompt_tokens", "completion_tokens", "cost", "duration", "large_tier_uses", "provider",
                       "show_limits", "show_budget", "show_versions", "created_by", "created_at", "started_at",
                       "finished_at", "events_link", "files_link")
    inlines = (ActivationInline, SessionInline)
    actions = ("cancel_runs",)
    cost = staticmethod(cost)

    @admin.display(description="Monitor")
    def monitor_link(self, obj):
        return monitor_link(obj.pk)

    @admin.display(description="Run", ordering="created_at")
    def short_id(self, obj):
        return str(obj.pk)[:8]

    @admin.display(description="Tokens (in/out)")
    def tokens(self, obj):
        return f"{obj.prompt_tokens} / {obj.completion_tokens}"

    @admin.display(description="Duration (s)")
    def duration(self, obj):
        value = run_duration_s(obj)
        return "—" if value is None else value

    @admin.display(description="Limits")
    def show_limits(self, obj):
        return pretty_json(obj.limits)

    @admin.display(description="Budget")
    def show_budget(self, obj):
        return pretty_json(obj.budget)

    @admin.display(description="Definition versions")
    def show_versions(self, obj):
        return pretty_json(obj.versions)

    @admin.display(description="Events")
    def events_link(self, obj):
        return changelist_link("event", f"{obj.events.count()} event(s)", run=obj.pk)

    @admin.display(description="Workspace files")
    def files_link(self, obj):
        return changelist_link("workspacefile", f"{obj.files.count()} file(s)", run=obj.pk)

    # -- cancelling ------------------------------------------------------------------

    def has_run_permission(self, request) -> bool:
        ids = team_ids(request, "run")
        return ids is None or bool(ids)

    @admin.action(description="Cancel selected runs", permissions=["run"])
    def cancel_runs(self, request, queryset):
        ids = team_ids(request, "run")
        allowed = queryset if ids is None else queryset.filter(team_id__in=ids)
        refused = queryset.exclude(pk__in=allowed.values("pk")).count()
        cancelled = 0
        for run in allowed.exclude(status__in=FINISHED_RUN_STATUSES):
            if run_cancel(run=run, user=request.user).status == "cancelled":
                cancelled += 1
        self.message_user(request, f"Cancelled {cancelled} run(s).", messages.SUCCESS)
        if refused:
            self.message_user(request, f"{refused} run(s) not cancelled: your role in their team does not allow "
                                       "running.", messages.WARNING)


@admin.register(Session)
class SessionAdmin(RunChildAdmin):
    list_display = ("__str__", "run_link", "agent", "attempt", "tier", "model", "status", "prompt_tokens",
                    "completion_tokens", "cost", "started_at")
    list_filter = ("status", "tier")
    list_select_related = ("run",)
    search_fields = ("agent", "model")
    fields = ("id", "run_link", "agent", "attempt", "tier", "provider", "model", "status", "result",
              "show_failure", "show_meta", "prompt_tokens", "completion_tokens", "cost", "worker",
              "heartbeat_at", "started_at", "finished_at", "events_link")
    readonly_fields = fields
    cost = staticmethod(cost)

    def get_queryset(self, request):
        return super().get_queryset(request).defer("state")

    @admin.display(description="Failure")
    def show_failure(self, obj):
        return pretty_json(obj.failure)

    @admin.display(description="Meta")
    def show_meta(self, obj):
        return pretty_json(obj.meta)

    @admin.display(description="Events")
    def events_link(self, obj):
        return changelist_link("event", "events of this session", run=obj.run_id, session=obj.pk)


class EventTypeFilter(admin.SimpleListFilter):
    """Event types present in the (team-scoped) rows listed."""

    title = "type"
    parameter_name = "type"

    def lookups(self, request, model_admin):
        types = model_admin.get_queryset(request).order_by().values_list("type", flat=True).distinct()
        return [(name, name) for name in sorted(types)]

    def queryset(self, request, queryset):
        return queryset.filter(type=self.value()) if self.value() else queryset


@admin.register(Event)
class EventAdmin(RunChildAdmin):
    list_display = ("seq", "type", "agent", "run_link", "summary", "created_at")
    list_filter = (EventTypeFilter,)
    list_select_related = ("run",)
    search_fields = ("agent", "type")
    fields = ("run_link", "seq", "type", "agent", "session", "created_at", "show_data")
    readonly_fields = fields
    ordering = ("run_id", "seq")
    list_per_page = 200

    def lookup_allowed(self, lookup, value, request=None):
        # Links from a run or session page filter by them.
        if lookup in {"run", "session"}:
            return True
        return super().lookup_allowed(lookup, value, request)

    @admin.display(description="Data")
    def summary(self, obj):
        text = json.dumps(obj.data, ensure_ascii=False, default=str)
        return text if len(text) <= 120 else text[:119] + "…"

    @admin.display(description="Data")
    def show_data(self, obj):
        return pretty_json(obj.data)


@admin.register(WorkspaceFile)
class WorkspaceFileAdmin(RunChildAdmin):
    list_display = ("path", "run_link", "version", "author", "updated_at")
    list_select_related = ("run",)
    search_fields = ("path", "author")
    fields = ("run_link", "path", "version", "author", "session", "updated_at", "show_content")
    readonly_fields = fields

    def lookup_allowed(self, lookup, value, request=None):
        if lookup == "run":
            return True
        return super().lookup_allowed(lookup, value, request)

    @admin.display(description="Content")
    def show_content(self, obj):
        return format_html("<pre style='white-space: pre-wrap'>{}</pre>", obj.content)
