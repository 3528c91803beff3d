"""Admin of workflows, edited as markdown; steps are checked against the team's agents on save."""

from django.contrib import admin

from agents_app.admin_base import DefinitionAdmin
from workflows_app.models import Workflow


@admin.register(Workflow)
class WorkflowAdmin(DefinitionAdmin):
    markdown_template = (
        "---\nname: \ndescription: \ninputs:\n- topic\nsteps:\n- id: first\n  agent: \n"
        "  prompt: Work on {topic}\n---\n"
    )
    list_display = ("name", "slug", "team", "trigger", "version", "updated_at")
    list_filter = ("trigger",)
