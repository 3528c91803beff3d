"""REST endpoints of workflow definitions, and of the templates they can start from.

A workflow is validated against the team's agents on every save: unknown
agents, missing dependencies and cycles are 422s that name the step or cycle.
Starting runs of workflows is in ``workflows_app.api_runs``.
"""

# No `from __future__ import annotations`: ninja reads the annotations at import time.

from django.http import Http404
from ninja import Router, Status
from pydantic import BaseModel, ConfigDict, Field

from mas_core.api_definitions import CREATE_ERRORS, LIST_ERRORS, add_definition_routes, definition_out
from workflows_app.kinds import WORKFLOW
from mas_core.definitions.services import definition_parse, definition_save, definition_slug
from mas_core.permissions import Actor
from mas_core.schemas import ErrorOut
from mas_core.api_auth import api_auth
from workflows_app.templates import workflow_template, workflow_templates

router = Router()

schemas = add_definition_routes(router, kind=WORKFLOW, plural="workflows")


class TemplateOut(BaseModel):
    slug: str
    name: str
    description: str
    markdown: str = Field(description="The workflow file: create one from it as it is (POST "
                                      "/api/workflow-templates/{slug}/workflows), or edit it first.")


class FromTemplateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="", max_length=200, description="Name of the new workflow (default: the template's).")


@router.get("/workflow-templates", auth=api_auth("view"), response={200: list[TemplateOut], **LIST_ERRORS},
            tags=["workflows"], operation_id="workflow_templates", summary="The built-in workflow templates")
def templates(request):
    return [template.__dict__ for template in workflow_templates()]


@router.post("/workflow-templates/{template}/workflows", auth=api_auth("edit"),
             response={201: schemas.output, **CREATE_ERRORS, 404: ErrorOut}, tags=["workflows"],
             operation_id="workflow_from_template",
             summary="Create a workflow from a template (its agents must exist in the team)")
def from_template(request, template: str, payload: FromTemplateIn):
    actor: Actor = request.auth
    found = workflow_template(template)
    if found is None:
        raise Http404(f"no workflow template {template!r}")
    template = found
    text = template.renamed(payload.name) if payload.name.strip() else template.markdown
    parsed = definition_parse(kind=WORKFLOW, team=actor.team, text=text)
    slug = definition_slug(parsed.spec.name)
    if WORKFLOW.model.objects.filter(team=actor.team, slug=slug).exists():
        return Status(409, {"detail": f"a workflow with slug {slug!r} already exists"})
    result = definition_save(kind=WORKFLOW, team=actor.team, parsed=parsed, slug=slug, author=actor.user,
                             source="api", create_only=True)
    return Status(201, definition_out(kind=WORKFLOW, team=actor.team, row=result.row, result=result))
