"""Workflow definitions, and the state of each run of one.

A workflow run is an ordinary kernel :class:`~agents_app.models.Run` (its
``workflow`` field is the slug) plus a :class:`WorkflowRun` row holding the
plan it executes and the scheduler's state (``workflows_app.engine``). The
state changes only in the transaction that settles a step's session, under
the run's row lock, so a worker that dies mid-workflow never loses a finished
step or runs it twice.
"""

from django.db import models

from agents_app.models import Definition, Run


class Workflow(Definition):
    kind_name = "workflow"
    trigger = models.CharField(max_length=16, default="manual")
    # The last cron minute that started a run (schedule triggers): one run per minute, however many beats.
    schedule_last_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta(Definition.Meta):
        verbose_name = "workflow"
        verbose_name_plural = "workflows"
        constraints = [models.UniqueConstraint(fields=["team", "slug"], name="workflow_unique_team_slug")]


class WorkflowMode(models.TextChoices):
    WORKFLOW = "workflow"  # the steps of a workflow definition
    ORCHESTRATE = "orchestrate"  # a plan written by a planner agent, then a synthesis step


class WorkflowRun(models.Model):
    run = models.OneToOneField(Run, primary_key=True, on_delete=models.CASCADE, related_name="workflow_run")
    workflow = models.ForeignKey(Workflow, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs")
    mode = models.CharField(max_length=16, choices=WorkflowMode.choices, default=WorkflowMode.WORKFLOW)
    trigger = models.CharField(max_length=16, default="manual")  # manual | schedule | channel
    planner = models.SlugField(max_length=100, blank=True, help_text="Orchestrate mode: the planner agent")
    spec = models.JSONField(help_text="The steps this run executes (a workflow's, or the planner's plan)")
    state = models.JSONField(help_text="The scheduler's state: per step status, attempts, outputs, usage")
    steps_meta = models.JSONField(default=dict, blank=True,
                                  help_text="Per step: agent, activation, tier and times of its latest attempt")
    adaptations = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name = "workflow run"
        verbose_name_plural = "workflow runs"

    def __str__(self) -> str:
        return f"workflow run {self.run_id} ({self.mode})"
