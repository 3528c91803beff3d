from django.db import models

from agents_app.models import Definition


class Workflow(Definition):
    kind_name = "workflow"
    trigger = models.CharField(max_length=16, default="manual")

    class Meta(Definition.Meta):
        constraints = [models.UniqueConstraint(fields=["team", "slug"], name="workflow_unique_team_slug")]
