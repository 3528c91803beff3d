"""Admin of workflows, edited as a form beside their step graph or as markdown; steps are checked against the
team's agents on save (the form: :mod:`workflows_app.admin_workflow_form`).

A new workflow can start from a built-in template (``?template=<slug>`` on the
add page, offered as links there); a workflow's page and list have *Run…*, to
the monitor's start form, which asks for its inputs, starts it and opens the
run's live monitor.
"""

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.urls import path

from agents_app.admin_run_button import RunButtonAdmin, run_url
from mas_core.admin_fields_editor import FieldsEditorAdmin
from mas_core.admin_base import DefinitionAdmin
from workflows_app.admin_workflow_form import WorkflowForm
from workflows_app.models import Workflow


@admin.register(Workflow)
class WorkflowAdmin(RunButtonAdmin, FieldsEditorAdmin, DefinitionAdmin):
    run_kind = "workflow"
    markdown_template = (
        "---\nname: \ndescription: \ninputs:\n- topic\nsteps:\n- id: first\n  agent: \n"
        "  prompt: Work on {topic}\n---\n"
    )
    list_display = ("name", "slug", "team", "trigger", "version", "updated_at")
    list_filter = ("trigger",)
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

    # -- running ---------------------------------------------------------------------
    # The workflow's page and list have Run… (RunButtonAdmin): the monitor's start form with its inputs. The old
    # address of the admin's own run page leads there too.

    def get_urls(self):
        return [path("<path:object_id>/run/", self.admin_site.admin_view(self.run_view), name="workflows_app_workflow_run"),
                *super().get_urls()]

    def run_view(self, request, object_id):
        workflow = self.get_object(request, object_id)
        if workflow is None:
            raise Http404("no such workflow")
        if not self.may_run(request, workflow.team_id):
            raise PermissionDenied("your role in this team does not allow running")
        return HttpResponseRedirect(run_url(kind="workflow", team_slug=workflow.team.slug, slug=workflow.slug))
