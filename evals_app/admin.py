"""Admin of evals: datasets (edited as markdown), a page to start an eval run, the results of one.

A dataset's "Run eval…" page starts an eval run (optionally against another version of the agent) and
opens its results: totals, a table per case and check, and the comparison with the other version,
regressions first. A finished run becomes a case through the "Save as eval case" action of the runs'
list (added to the runs admin here: the runs app knows nothing of evals).
"""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from mas_core.admin_base import DefinitionAdmin, ReadOnlyTeamAdmin, team_ids
from agents_app.models import Run
from agents_app.money import money_display
from agents_app.selectors_runs import run_get
from evals_app.cases import eval_case_save
from evals_app.models import EvalDataset, EvalRun
from evals_app.services import EvalError, eval_compare, eval_run_start, eval_totals


class EvalRunForm(forms.Form):
    agent_version = forms.IntegerField(required=False, min_value=1, help_text="Default: the current version.")
    compare_to = forms.IntegerField(required=False, min_value=1,
                                    help_text="Also run this version of the agent and compare, case by case.")


class SaveCaseForm(forms.Form):
    dataset = forms.SlugField(max_length=100, help_text="Created for the run's agent when it does not exist.")
    case_id = forms.RegexField(regex=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$", required=False, max_length=64,
                               help_text="Default: run-<first 8 characters of the run id>.")


def _require(request, team_id: int, capability: str) -> None:
    allowed = team_ids(request, capability)
    if allowed is not None and team_id not in allowed:
        raise PermissionDenied(f"your role in this team does not allow this ({capability})")


@admin.register(EvalDataset)
class EvalDatasetAdmin(DefinitionAdmin):
    markdown_template = (
        "---\nname: \nagent: \ncases:\n- id: first\n  task: \n  checks:\n  - type: contains\n    value: \n---\n"
    )
    list_display = ("name", "slug", "team", "version", "updated_at", "run_link")
    extra_readonly = ("run_link",)

    def get_urls(self):
        return [
            path("<path:object_id>/run/", self.admin_site.admin_view(self.run_view), name="evals_app_evaldataset_run"),
            path("save-case/<uuid:run_id>/", self.admin_site.admin_view(self.save_case_view),
                 name="evals_app_evaldataset_save_case"),
            path("by-slug/<str:team>/<slug:slug>/", self.admin_site.admin_view(self.by_slug_view),
                 name="evals_app_evaldataset_by_slug"),
            *super().get_urls(),
        ]

    @admin.display(description="Run")
    def run_link(self, obj):
        return format_html('<a href="{}">Run eval…</a>', reverse("admin:evals_app_evaldataset_run", args=[obj.pk]))

    def run_view(self, request, object_id):
        dataset = self.get_object(request, object_id)
        _require(request, dataset.team_id, "run")
        form = EvalRunForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                baseline = None
                if form.cleaned_data["compare_to"]:
                    baseline = eval_run_start(team=dataset.team, dataset=dataset, user=request.user,
                                              agent_version=form.cleaned_data["compare_to"])
                eval_run = eval_run_start(team=dataset.team, dataset=dataset, user=request.user, baseline=baseline,
                                          agent_version=form.cleaned_data["agent_version"])
            except EvalError as error:
                self.message_user(request, str(error), messages.ERROR)
            else:
                self.message_user(request, f"Started eval {eval_run.id} of {dataset.slug}.", messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:evals_app_evalrun_change", args=[eval_run.pk]))
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "original": dataset,
                   "title": f"Run eval {dataset.name}", "form": form, "submit": "Start the eval",
                   "has_view_permission": True}
        return TemplateResponse(request, "admin/evals/form.html", context)

    def by_slug_view(self, request, team, slug):
        """The page of team ``team``'s dataset ``slug`` (the monitor's "Saved as case" links here); 404 outside
        the user's teams."""
        dataset = self.get_queryset(request).filter(team__slug=team, slug=slug).first()
        if dataset is None:
            raise Http404("no such dataset")
        return HttpResponseRedirect(reverse("admin:evals_app_evaldataset_change", args=[dataset.pk]))

    def save_case_view(self, request, run_id):
        ids = team_ids(request, "edit")
        runs = Run.objects.all() if ids is None else Run.objects.filter(team_id__in=ids)
        run = runs.filter(pk=run_id).select_related("team").first()
        if run is None:
            raise Http404("no such run")
        run = run_get(team=run.team, run_id=run.pk)
        form = SaveCaseForm(request.POST or None, initial={"dataset": f"{run.agent or run.workflow}-cases"})
        if request.method == "POST" and form.is_valid():
            try:
                result = eval_case_save(team=run.team, run=run, dataset=form.cleaned_data["dataset"],
                                        case_id=form.cleaned_data["case_id"], user=request.user)
            except EvalError as error:
                self.message_user(request, str(error), messages.ERROR)
            else:
                self.message_user(request, f"Saved run {str(run.pk)[:8]} as a case of {result.row.slug}.",
                                  messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:evals_app_evaldataset_change", args=[result.row.pk]))
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "original": None,
                   "title": f"Save run {str(run.pk)[:8]} as an eval case", "form": form, "submit": "Save the case",
                   "has_view_permission": True}
        return TemplateResponse(request, "admin/evals/form.html", context)


@admin.register(EvalRun)
class EvalRunAdmin(ReadOnlyTeamAdmin):
    list_display = ("id", "team", "dataset_slug", "agent", "agent_version", "status", "pass_rate", "created_at")
    list_filter = ("status",)
    list_select_related = ("team",)
    search_fields = ("dataset_slug", "agent", "workflow")
    # What a reader came for first: the totals and the comparison (regressions at its top), then each case.
    fields = ("dataset_slug", "dataset_version", "agent", "agent_version", "workflow", "status", "baseline",
              "totals_table", "comparison_table", "cases_table", "created_at", "finished_at")
    readonly_fields = fields

    @admin.display(description="Pass rate")
    def pass_rate(self, obj):
        rate = (obj.totals or {}).get("pass_rate")
        return "—" if rate is None else f"{rate:.0%}"

    @admin.display(description="Totals")
    def totals_table(self, obj):
        totals = obj.totals if obj.status != "running" else eval_totals(eval_run=obj)
        rows = totals_rows(totals)
        cells = "".join("<tr><th>{}</th><td>{}</td></tr>" for _ in rows)
        return format_html(f'<div class="mas-scroll"><table id="eval-totals">{cells}</table></div>',
                           *(item for row in rows for item in row))

    @admin.display(description="Cases")
    def cases_table(self, obj):
        parts, values = [], []
        for case in obj.cases.all():
            link = reverse("admin:agents_app_run_change", args=[case.run_id]) if case.run_id else ""
            parts.append('<tr class="case-{}"><td><b>{}</b></td><td>{}</td><td>{}</td><td><a href="{}">{}</a></td>'
                         '<td></td></tr>')
            values += [case.status, case.case_id, case.status, case.score, link, str(case.run_id or "")[:8]]
            for check in case.checks:
                parts.append('<tr><td></td><td colspan="3">{} {}</td><td>{}</td></tr>')
                values += [{True: "PASS", False: "FAIL", None: "skip"}[check["passed"]], check["type"], check["reason"]]
        header = "<tr><th>Case</th><th>Status</th><th>Score</th><th>Run</th><th>Reason</th></tr>"
        # Wide on a phone: the table scrolls inside its box (mas_admin/admin.css), the page does not.
        return format_html(f'<div class="mas-scroll"><table id="eval-cases">{header}{"".join(parts)}</table></div>',
                           *values)

    @admin.display(description="Comparison with the baseline (regressions first)")
    def comparison_table(self, obj):
        if obj.baseline_id is None:
            return "—"
        parts, values = [], []
        for row in eval_compare(eval_run=obj, baseline=obj.baseline):
            parts.append('<tr class="change-{}"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>')
            values += [row["change"], row["change"], row["case_id"], (row["before"] or {}).get("status", "—"),
                       (row["after"] or {}).get("status", "—"), "; ".join(row["failed_checks"])]
        header = (f"<tr><th>Change</th><th>Case</th><th>v{obj.baseline.agent_version}</th>"
                  f"<th>v{obj.agent_version}</th><th>Failed checks</th></tr>")
        return format_html(f'<div class="mas-scroll"><table id="eval-comparison">{header}{"".join(parts)}</table>'
                           '</div>', *values)


def totals_rows(totals: dict) -> list[tuple[str, str]]:
    """The totals of an eval run as the page shows them, labelled for a reader."""
    def seconds(value) -> str:
        return "—" if value is None else f"{value} s"

    rows = [("Cases", str(totals.get("cases", 0))), ("Passed", str(totals.get("passed", 0))),
            ("Failed", str(totals.get("failed", 0)))]
    if totals.get("pending"):
        rows.append(("Pending", str(totals["pending"])))
    rows += [("Pass rate", f"{totals.get('pass_rate', 0):.0%}"), ("Cost", money_display(totals.get("cost_usd"))),
             ("Tokens", str(totals.get("tokens", 0))),
             ("Duration p50 / p95", f"{seconds(totals.get('duration_p50_s'))} / "
                                    f"{seconds(totals.get('duration_p95_s'))}")]
    if totals.get("judge_calls"):
        rows.append(("Judge", f"{money_display(totals['judge_cost_usd'])}, {totals['judge_tokens']} tokens, "
                              f"{totals['judge_calls']} calls"))
    return rows


@admin.action(description="Save as eval case…")
def save_as_eval_case(modeladmin, request, queryset):
    if queryset.count() != 1:
        modeladmin.message_user(request, "Select one finished run to save as an eval case.", messages.WARNING)
        return None
    return HttpResponseRedirect(reverse("admin:evals_app_evaldataset_save_case", args=[queryset.first().pk]))


def _may_save_eval_case(request) -> bool:
    """Offered to those who may edit a dataset in some team (the page checks the run's team)."""
    ids = team_ids(request, "edit")
    return ids is None or bool(ids)


save_as_eval_case.allowed_permissions = ("save_eval_case",)

# The runs admin is registered by agents_app (before this app): give it the action.
_run_admin = admin.site._registry.get(Run)
if _run_admin is not None and save_as_eval_case not in _run_admin.actions:
    _run_admin.actions = (*_run_admin.actions, save_as_eval_case)
    _run_admin.has_save_eval_case_permission = _may_save_eval_case
