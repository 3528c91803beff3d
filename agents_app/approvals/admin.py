"""The Approvals inbox and the team's approval settings, in the admin.

The inbox lists the requests for a person across the team's runs (pending
ones by default, newest first); a request's page shows the call's arguments
or the question, and lets operators and admins decide it — approve, approve
with edited arguments, reject with a message, answer — through
``approval_decide``, the service the API and the monitor page call. Viewers
see the same page without its buttons, and a POST of theirs is refused.

The settings page changes a team's approval policy, deadline, default
outcome and webhook through ``team_approvals_update`` (as ``PATCH
/api/team``); the webhook secret is write-only.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme

from mas_core.admin_base import ReadOnlyTeamAdmin, team_ids, teams_with
from agents_app.approvals.policy import MAX_DEADLINE_S, OUTCOMES
from agents_app.approvals.services import (
    MAX_ANSWER_CHARS,
    MAX_MESSAGE_CHARS,
    ApprovalError,
    InvalidDecision,
    approval_decide,
    team_approvals_update,
)
from agents_app.models import ApprovalRequest, Team
from agents_app.models.approvals import RequestKind, RequestStatus
from agents_app.models.runs import FINISHED_RUN_STATUSES

MAX_ARGUMENTS_CHARS = 100_000
MAX_POLICY_CHARS = 20_000


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


# -- the inbox ----------------------------------------------------------------------------------


class InboxStatusFilter(admin.SimpleListFilter):
    """Pending requests first (the default), or those of another status, or all of them."""

    title = "status"
    parameter_name = "status"
    ALL = "all"

    def lookups(self, request, model_admin):
        return [(RequestStatus.PENDING, "Pending"),
                *[(value, label) for value, label in RequestStatus.choices if value != RequestStatus.PENDING],
                (self.ALL, "All")]

    def value(self):
        return super().value() or RequestStatus.PENDING

    def choices(self, changelist):
        # No stock "All" entry: it would mean "pending" here; "All" is one of the lookups.
        for lookup, title in self.lookup_choices:
            yield {"selected": self.value() == str(lookup),
                   "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                   "display": title}

    def queryset(self, request, queryset):
        value = self.value()
        if value == self.ALL:
            return queryset
        if value not in RequestStatus.values:
            return queryset.none()
        return queryset.filter(status=value)


class DecisionForm(forms.Form):
    """What a person sends: which button, and the edited arguments, the message or the answer."""

    decision = forms.ChoiceField(choices=[("approve", "approve"), ("approve_edited", "approve with these arguments"),
                                          ("reject", "reject"), ("answer", "answer")])
    arguments = forms.CharField(required=False, strip=False, max_length=MAX_ARGUMENTS_CHARS)
    message = forms.CharField(required=False, max_length=MAX_MESSAGE_CHARS)
    answer = forms.CharField(required=False, max_length=MAX_ANSWER_CHARS)
    choice = forms.CharField(required=False, max_length=MAX_ANSWER_CHARS)

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("decision") == "approve_edited":
            try:
                cleaned["edited"] = json.loads(cleaned.get("arguments") or "")
            except json.JSONDecodeError as error:
                self.add_error("arguments", f"The arguments are not JSON: {error.msg} (line {error.lineno}, "
                                            f"column {error.colno}).")
        return cleaned

    def decide_kwargs(self) -> dict[str, Any]:
        data = self.cleaned_data
        decision = data["decision"]
        if decision == "approve_edited":
            return {"decision": "approve", "arguments": data["edited"], "message": data.get("message", "")}
        if decision == "answer":
            return {"decision": "answer", "answer": data.get("choice") or data.get("answer", "")}
        return {"decision": decision, "message": data.get("message", "")}


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(ReadOnlyTeamAdmin):
    use_model_perms = False  # the role decides: viewers see, operators and admins decide
    # Dates short and the agent beside its run, so that every column fits beside the admin's side bars at a desk
    # (the kind shows in the request: "Question: …", "Gate: …", or the tool an approval is for).
    list_display = ("asked", "what", "details", "run_link", "status", "due", "decided")
    list_display_links = ("what",)
    list_filter = (InboxStatusFilter, "kind")
    list_select_related = ("run", "decided_by", "team")
    search_fields = ("agent", "tool", "question")
    ordering = ("-created_at",)
    actions = None
    change_form_template = "admin/mas/approval_request.html"
    change_list_template = "admin/mas/approval_inbox.html"

    @admin.display(description="Asked", ordering="created_at")
    def asked(self, obj):
        return _when(obj.created_at)

    @admin.display(description="Request")
    def what(self, obj):
        if obj.kind == RequestKind.QUESTION:
            question = obj.question if len(obj.question) <= 100 else obj.question[:99] + "…"
            return f"Question: {question}"
        if obj.kind == RequestKind.GATE:
            return f"Gate: {obj.tool}"
        if obj.kind == RequestKind.RESULT:
            return f"Result of {obj.tool}"
        if obj.kind == RequestKind.ANSWER:
            return "Answer"
        return obj.tool

    @admin.display(description="Arguments / choices")
    def details(self, obj):
        if obj.kind == RequestKind.QUESTION:
            return " | ".join(obj.choices) if obj.choices else "(free answer)"
        text = json.dumps(obj.arguments, ensure_ascii=False, default=str)
        return text if len(text) <= 120 else text[:119] + "…"

    @admin.display(description="Agent and run")
    def run_link(self, obj):
        return format_html("{} in <a href='{}'>{}</a> ({})", obj.agent, reverse("monitor-run", args=[obj.run_id]),
                           str(obj.run_id)[:8], obj.run.status)

    @admin.display(description="Deadline", ordering="deadline")
    def due(self, obj):
        return _when(obj.deadline)

    @admin.display(description="Decided")
    def decided(self, obj):
        if obj.decided_at is None:
            return "—"
        who = obj.decided_by.get_username() if obj.decided_by_id else "the system"
        return f"{who}, {_when(obj.decided_at)}"

    def get_list_display(self, request):
        return (*super().get_list_display(request), self._decide_column(request))

    def _decide_column(self, request: HttpRequest):
        """The inbox's last column: Approve and Reject for a pending call or gate, a link to answer a question.

        The buttons POST to the request's own page, so a decision from the list goes through the same
        permission check and ``approval_decide`` as one made there; the list comes back. The list is inside
        the admin's changelist form (a form in a form is dropped by the browser), so the buttons post that
        form, with its CSRF token, to the request's page (``formaction``).
        """
        back = request.get_full_path()

        @admin.display(description="Decide")
        def decide(obj: ApprovalRequest):
            if not _decidable(obj) or not self.can_decide(request, obj):
                return "—"
            url = reverse("admin:agents_app_approvalrequest_change", args=[obj.pk])
            if obj.kind == RequestKind.QUESTION:
                return format_html("<a class='button mas-answer' href='{}'>Answer…</a>", url)
            return format_html(
                "<div class='mas-decide'><input type='hidden' name='next' value='{}'>"
                "<button type='submit' class='button default' formaction='{}' name='decision' value='approve'>"
                "Approve</button>"
                "<button type='submit' class='button mas-reject' formaction='{}' name='decision' value='reject'>"
                "Reject</button></div>", back, url, url)

        return decide

    # -- deciding ----------------------------------------------------------------------------

    def can_decide(self, request: HttpRequest, obj: ApprovalRequest) -> bool:
        ids = team_ids(request, "run")
        return ids is None or obj.team_id in ids

    def get_urls(self):
        settings_view = self.admin_site.admin_view(self.settings_view)
        return [path("settings/", settings_view, name="agents_app_approvalrequest_settings"), *super().get_urls()]

    def changelist_view(self, request, extra_context=None):
        extra = {"title": "Approvals inbox", "settings_url": reverse("admin:agents_app_approvalrequest_settings"),
                 **(extra_context or {})}
        return super().changelist_view(request, extra_context=extra)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        obj = self.get_object(request, object_id)  # 404 for another team's request
        if not self.has_view_permission(request, obj):
            raise PermissionDenied
        form, error, status = None, "", 200
        if request.method == "POST":
            if not self.can_decide(request, obj):
                raise PermissionDenied(f"your role in team {obj.team.slug} does not allow deciding")
            form = DecisionForm(request.POST)
            if form.is_valid():
                try:
                    decided = approval_decide(team=obj.team, request_id=obj.pk, user=request.user,
                                              **form.decide_kwargs())
                except InvalidDecision as refusal:
                    error, status = str(refusal), 422
                except ApprovalError as refusal:
                    error, status = str(refusal), refusal.status
                else:
                    self.message_user(request, f"{_describe(decided)}: {decided.get_status_display().lower()}.",
                                      messages.SUCCESS)
                    return HttpResponseRedirect(_inbox_url(request))
            else:
                error, status = " ".join(message for errors in form.errors.values() for message in errors), 422
            obj = self.get_object(request, object_id)  # as it is now (another person may have decided)
        return self._decide_page(request, obj, form=form, error=error, status=status)

    def _decide_page(self, request, obj: ApprovalRequest, *, form, error: str, status: int) -> HttpResponse:
        posted = form.data if form is not None else {}
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta, "original": obj, "title": _describe(obj), "has_view_permission": True,
            "request_obj": obj, "arguments_json": pretty(obj.arguments), "decision_json": pretty(obj.decision),
            "edited_json": posted.get("arguments") or pretty(obj.arguments),
            "message_text": posted.get("message", ""), "answer_text": posted.get("answer", ""),
            "pending": _decidable(obj),
            "can_decide": self.can_decide(request, obj), "error": error,
            "decided_by": obj.decided_by.get_username() if obj.decided_by_id else "the system",
            "monitor_url": reverse("monitor-run", args=[obj.run_id]),
        }
        return TemplateResponse(request, self.change_form_template, context, status=status)

    # -- the team's settings -------------------------------------------------------------------

    def settings_view(self, request):
        teams = list(teams_with(request, "view").order_by("slug"))
        slug = request.GET.get("team", "")
        team = next((t for t in teams if t.slug == slug), None) if slug else (teams[0] if teams else None)
        if team is None:
            raise Http404("no such team")
        manages = team_ids(request, "manage")
        can_manage = manages is None or team.pk in manages
        form = TeamApprovalForm(request.POST or None, team=team)
        status = 200
        if request.method == "POST":
            if not can_manage:
                raise PermissionDenied(f"only an admin of team {team.slug} changes its approval settings")
            if form.is_valid():
                try:
                    team_approvals_update(team=team, changes=form.changes())
                except InvalidDecision as refusal:
                    form.add_service_error(str(refusal))
                else:
                    self.message_user(request, f"Saved the approval settings of {team.slug}.", messages.SUCCESS)
                    return HttpResponseRedirect(f"{request.path}?team={team.slug}")
            status = 422
        if not can_manage:
            for field in form.fields.values():
                field.disabled = True
        context = {
            **self.admin_site.each_context(request), "opts": self.model._meta,
            "title": f"Approval settings of {team.name}", "team": team, "teams": teams, "form": form,
            "can_manage": can_manage, "secret_set": bool(team.webhook_secret), "has_view_permission": True,
        }
        return TemplateResponse(request, "admin/mas/approval_settings.html", context, status=status)


def _when(moment) -> str:
    """A moment as every page writes one (``mas_project.formats``)."""
    return date_format(timezone.localtime(moment), "DATETIME_FORMAT")


def _decidable(obj: ApprovalRequest) -> bool:
    """Pending, and its run still waits for it."""
    return obj.status == RequestStatus.PENDING and obj.run.status not in FINISHED_RUN_STATUSES


def _inbox_url(request: HttpRequest) -> str:
    """Where a decision returns: the inbox as the list that sent it showed it (its filters), else the inbox."""
    inbox = reverse("admin:agents_app_approvalrequest_changelist")
    back = request.POST.get("next", "")
    if back.startswith(inbox) and url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()},
                                                                   require_https=request.is_secure()):
        return back
    return inbox


def _describe(obj: ApprovalRequest) -> str:
    if obj.kind == RequestKind.QUESTION:
        return f"Question from {obj.agent}"
    if obj.kind == RequestKind.GATE:
        return f"Gate: {obj.tool} ({obj.agent})"
    if obj.kind == RequestKind.RESULT:
        return f"Result of {obj.tool} for {obj.agent}"
    if obj.kind == RequestKind.ANSWER:
        return f"Answer of {obj.agent}"
    return f"{obj.tool} by {obj.agent}"


class TeamApprovalForm(forms.Form):
    """A team's approval settings; checked again by ``team_approvals_update`` (its errors land on the fields)."""

    approval_policy = forms.CharField(
        required=False, strip=False, max_length=MAX_POLICY_CHARS,
        widget=forms.Textarea(attrs={"rows": 8, "cols": 60, "spellcheck": "false",
                                     "style": "font-family: monospace"}),
        help_text="A YAML list, as an agent's <code>approval:</code>: tool names or patterns "
                  "(<code>code_exec</code>, <code>mcp__github__*</code>, <code>mcp_unmarked</code>), or mappings "
                  "<code>{tool, deadline_s, default, reason}</code>. Every agent of the team needs approval for "
                  "what it matches.")
    approval_deadline_s = forms.IntegerField(
        min_value=1, max_value=MAX_DEADLINE_S, label="Deadline (seconds)",
        help_text="How long a request waits for a person before its default outcome applies.")
    approval_default = forms.ChoiceField(choices=[(o, o) for o in OUTCOMES], label="Default outcome",
                                         help_text="Applied by the system at the deadline.")
    webhook_url = forms.CharField(required=False, max_length=500, label="Webhook URL",
                                  help_text="Called on approval_requested, human_question and run end. "
                                            "Empty: no webhook.")
    webhook_secret = forms.CharField(
        required=False, max_length=200, strip=False, label="Webhook secret",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="The HMAC-SHA256 key of X-MAS-Signature. Write-only: leave empty to keep the current one.")
    remove_secret = forms.BooleanField(required=False, label="Remove the webhook secret")

    def __init__(self, *args, team: Team, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["approval_policy"].initial = (
            yaml.safe_dump(team.approval_policy, sort_keys=False, allow_unicode=True) if team.approval_policy else "")
        self.fields["approval_deadline_s"].initial = team.approval_deadline_s
        self.fields["approval_default"].initial = team.approval_default
        self.fields["webhook_url"].initial = team.webhook_url

    def clean_approval_policy(self):
        text = self.cleaned_data["approval_policy"]
        try:
            entries = yaml.safe_load(text) if text.strip() else []
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark else ""
            raise forms.ValidationError(f"Not YAML{where}: {getattr(error, 'problem', None) or error}.") from None
        return [] if entries is None else entries

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("remove_secret") and cleaned.get("webhook_secret"):
            self.add_error("webhook_secret", "Either set a new secret or remove it, not both.")
        return cleaned

    def changes(self) -> dict[str, Any]:
        data = self.cleaned_data
        changes = {name: data[name] for name in ("approval_policy", "approval_deadline_s", "approval_default",
                                                 "webhook_url")}
        changes["webhook_url"] = changes["webhook_url"].strip()
        if data.get("remove_secret"):
            changes["webhook_secret"] = ""
        elif data.get("webhook_secret"):
            changes["webhook_secret"] = data["webhook_secret"]
        return changes

    def add_service_error(self, text: str) -> None:
        field = text.split(":", 1)[0]
        self.add_error(field if field in self.fields else None, text)
