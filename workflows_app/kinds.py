"""workflows_app's definition kind (registered in ``WorkflowsAppConfig.ready``)."""

from __future__ import annotations

from mas_core.definitions.kinds import Kind
from workflows_app.specs import WorkflowSpec

WORKFLOW = Kind("workflow", "Workflow", "workflows_app.Workflow", WorkflowSpec, "workflows", order=60)
