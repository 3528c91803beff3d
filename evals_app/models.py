"""Eval datasets (a definition kind), the eval runs of one, and one result per case.

An eval run starts every case of its dataset as an ordinary run (``Run.is_eval``), on the workers, in
parallel; ``evals_app.collection.eval_collect`` scores each case once its run has ended and closes the
eval run when all have. Two eval runs of the same dataset (the agent at two versions) compare case by case.
"""

from django.conf import settings
from django.db import models

from agents_app.models import Definition, Run, Team


class EvalDataset(Definition):
    kind_name = "eval"

    class Meta(Definition.Meta):
        verbose_name = "eval dataset"
        constraints = [models.UniqueConstraint(fields=["team", "slug"], name="evaldataset_unique_team_slug")]


class EvalRunStatus(models.TextChoices):
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"


class EvalRun(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="eval_runs")
    dataset = models.ForeignKey(EvalDataset, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs")
    dataset_slug = models.SlugField(max_length=100)
    dataset_version = models.PositiveIntegerField()
    agent = models.SlugField(max_length=100, blank=True, help_text="The agent under test")
    agent_version = models.PositiveIntegerField(null=True, blank=True)
    workflow = models.SlugField(max_length=100, blank=True)
    baseline = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                 help_text="The eval run this one is compared with (the other agent version)")
    status = models.CharField(max_length=16, choices=EvalRunStatus.choices, default=EvalRunStatus.RUNNING)
    deadline = models.DateTimeField(help_text="Cases still running then are cancelled")
    judge_cost_usd = models.DecimalField(max_digits=16, decimal_places=8, default=0)
    judge_tokens = models.BigIntegerField(default=0)
    totals = models.JSONField(default=dict, blank=True)
    # The collection (evals_app.collection): the chain of collect tasks carries collect_token, and only the
    # task holding the current one goes on; a pass holds collecting_until while it scores (renewed per case),
    # and stamps collected_at when it ends. The recovery sweep restarts a chain that stopped stamping.
    collect_token = models.CharField(max_length=32, blank=True)
    collecting_until = models.DateTimeField(null=True, blank=True)
    collected_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["team", "dataset_slug", "-created_at"], name="evalrun_team_dataset")]

    def __str__(self) -> str:
        version = f" v{self.agent_version}" if self.agent_version else ""
        return f"eval {self.dataset_slug} of {self.agent or self.workflow}{version} ({self.status})"


class CaseStatus(models.TextChoices):
    PENDING = "pending"  # its run has not ended
    PASSED = "passed"
    FAILED = "failed"


class EvalCaseResult(models.Model):
    eval_run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="cases")
    case_id = models.CharField(max_length=64)
    position = models.PositiveIntegerField()
    run = models.OneToOneField(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="eval_case")
    status = models.CharField(max_length=16, choices=CaseStatus.choices, default=CaseStatus.PENDING)
    score = models.FloatField(default=0)
    checks = models.JSONField(default=list, blank=True, help_text="Per check: type, passed, score, reason")
    run_status = models.CharField(max_length=16, blank=True)
    cost_usd = models.DecimalField(max_digits=16, decimal_places=8, default=0)
    tokens = models.BigIntegerField(default=0)
    duration_s = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True, help_text="Why the case's run could not start")

    class Meta:
        ordering = ["eval_run_id", "position"]
        constraints = [models.UniqueConstraint(fields=["eval_run", "case_id"], name="evalcase_unique_case")]

    def __str__(self) -> str:
        return f"{self.case_id} ({self.status})"
