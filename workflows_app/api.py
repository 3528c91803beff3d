"""REST endpoints of workflow definitions (running them comes later).

A workflow is validated against the team's agents on every save: unknown
agents, missing dependencies and cycles are 422s that name the step or cycle.
"""

from ninja import Router

from agents_app.api import add_definition_routes
from agents_app.definitions.kinds import WORKFLOW

router = Router()

add_definition_routes(router, kind=WORKFLOW, plural="workflows")
