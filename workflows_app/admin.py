"""Admin of workflows, edited as a form beside their step graph or as markdown; steps are checked against the
team's agents on save (the form: :mod:`workflows_app.admin_workflow_form`).

A new workflow can start from a built-in template (``?template=<slug>`` on the
add page, offered as links there); a workflow's page has a "Run" page that
asks for its inputs and starts it, then opens the run's live monitor.
"""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from mas_core.admin_fields_editor import FieldsEditorAdmin
from agents_app.execution.errors import RunError
from mas_core.admin_base import DefinitionAdmin, team_ids
from workflows_app.admin_workflow_form import WorkflowForm
from workflows_app.models import Workflow
from workflows_app.services import workflow_run_start


class WorkflowRunForm(forms.Form):
    """One text field per input the workflow declares."""

    def __init__(self, *args, inputs: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        for name in inputs:
            self.fields[name] = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "cols": 80}), strip=False)


@admin.register(Workflow)
class WorkflowAdmin(FieldsEditorAdmin, DefinitionAdmin):
    markdown_template = (
        "---\nname: \ndescription: \ninputs:\n- topic\nsteps:\n- id: first\n  agent: \n"
        "  prompt: Work on {topic}\n---\n"
    )
    list_display = ("name", "slug", "team", "trigger", "version", "updated_at", "run_link")
    list_filter = ("trigger",)
    extra_readonly = ("run_link",)
    form = WorkflowForm
    fields_fieldsets = [
        ("Workflow", {"fields": ["workflow_name", "workflow_description", "inputs",
                                 ("workflow_trigger", "schedule", "channel"), "on_failure"]}),
        ("Steps", {"classes": ["mas-steps"], "fields": ["steps"]}),
        ("Loops", {"classes": ["mas-loops"], "fields": ["loops"]}),
    ]

    class Media:
        css = {"all": ("monitor/graph.css",)}
        js = ("mas_admin/definition_form.js", "mas_admin/rows.js", "monitor/dag.js", "mas_admin/workflow_form.js")

    # -- running -----------------------------------------------------------------

    def get_urls(self):
        return [path("<path:object_id>/run/", self.admin_site.admin_view(self.run_view), name="workflows_app_workflow_run"),
                *super().get_urls()]

    @admin.display(description="Run")
    def run_link(self, obj):
        return format_html('<a href="{}">Run…</a>', reverse("admin:workflows_app_workflow_run", args=[obj.pk]))

    def run_view(self, request, object_id):
        workflow = self.get_object(request, object_id)
        if workflow is None:
            raise Http404("no such workflow")
        allowed = team_ids(request, "run")
        if allowed is not None and workflow.team_id not in allowed:
            raise PermissionDenied("your role in this team does not allow running")
        inputs = list((workflow.spec or {}).get("inputs", []))
        form = WorkflowRunForm(request.POST or None, inputs=inputs)
        if request.method == "POST" and form.is_valid():
            try:
                run = workflow_run_start(team=workflow.team, workflow=workflow, inputs=form.cleaned_data,
                                         user=request.user, trigger="manual")
            except RunError as error:
                self.message_user(request, str(error), messages.ERROR)
            else:
                self.message_user(request, f"Started run {run.id} of {workflow.slug}.", messages.SUCCESS)
                return HttpResponseRedirect(reverse("monitor-run", args=[run.id]))
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "original": workflow,
                   "title": f"Run {workflow.name}", "form": form, "has_view_permission": True}
        return TemplateResponse(request, "admin/mas/workflow_run.html", context)
