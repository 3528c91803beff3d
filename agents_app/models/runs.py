"""Runs and what happens in them: activations, sessions, events, workspace files.

Every row belongs to a run, and every run to a team; events are numbered per
run without gaps (``Run.next_seq`` is incremented in the transaction that
inserts the event, so a rolled-back event leaves no hole).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from mas_core.models import Team
from agents_app.models.context import ActivationContext


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    # A person's decision is pending (agents_app.approvals). A run is *waiting*; its activations and sessions
    # that wait for children or people are *suspended* (ActivationStatus, SessionStatus).
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINISHED_RUN_STATUSES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)
ACTIVE_RUN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING)


class Run(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="runs")
    agent = models.SlugField(max_length=100, blank=True, help_text="Root agent (slug)")
    workflow = models.SlugField(max_length=100, blank=True)
    input = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True)
    limits = models.JSONField(default=dict, blank=True)
    budget = models.JSONField(default=dict, blank=True)
    provider = models.CharField(max_length=100, blank=True, help_text="Provider override (slug)")
    script = models.JSONField(null=True, blank=True, help_text="Turns for the scripted provider")
    script_cursor = models.JSONField(default=dict, blank=True, help_text="Next scripted turn per agent")
    approvals = models.JSONField(default=list, blank=True, help_text="Approvals asked for at start, beyond the "
                                 "definitions'")
    guardrails = models.JSONField(default=list, blank=True, help_text="Slugs of the team's guardrails added at "
                                  "start, beyond the team's defaults and the definitions'")
    door_turns = models.JSONField(default=list, blank=True, help_text="A run started through a door "
                                  "(agents_app.doors): the conversation it answers, [[role, text], …]; a response "
                                  "that continues it (previous_response_id) starts from it and the run's result")
    versions = models.JSONField(default=dict, blank=True, help_text="Definition versions this run used")
    is_eval = models.BooleanField(
        default=False, db_index=True,
        help_text="A case of an eval: left out of the run lists unless asked for; agents its script does not "
                  "name call the team's models (they are the agents under test) if eval_real_models allows it")
    eval_real_models = models.BooleanField(
        default=False,
        help_text="A case of an eval whose dataset says allow_real_models: the agents its script does not name "
                  "may call the team's real models (otherwise such a call is refused)")
    notice = models.CharField(max_length=300, blank=True)
    result = models.TextField(blank=True)
    error = models.TextField(blank=True)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=16, decimal_places=8, default=0)
    # The worst cases of the model calls in flight (agents_app.execution.budget): counted against
    # max_cost_usd with cost_usd, so parallel sessions cannot each make the last allowed call.
    reserved_usd = models.DecimalField(max_digits=16, decimal_places=8, default=0)
    large_tier_uses = models.PositiveIntegerField(default=0)
    reserved_large = models.PositiveIntegerField(default=0)  # the same for max_large_tier_uses
    budget_warned = models.BooleanField(default=False)
    # What the run's llm_judge guardrails spent, with the worst cases of those in flight (part of cost_usd,
    # under the budget's max_guardrail_cost_usd: agents_app.execution.guardrail_calls).
    guardrail_cost_usd = models.DecimalField(max_digits=16, decimal_places=8, default=0)
    next_seq = models.PositiveBigIntegerField(default=0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Archived runs leave the team's lists (shown again on request); nothing else changes.
    archived_at = models.DateTimeField(null=True, blank=True)
    # A fork (agents_app.execution.forks) starts from an event of another run: its parent and that event's seq.
    forked_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks")
    fork_seq = models.PositiveBigIntegerField(null=True, blank=True)
    # Bytes of workspace file versions kept so far (WorkspaceFileVersion), against MAS_WORKSPACE_HISTORY_MAX_BYTES.
    history_bytes = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = "run"
        verbose_name_plural = "runs"
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["team", "-created_at"], name="run_team_created")]

    def __str__(self) -> str:
        return f"run {self.id} ({self.agent or self.workflow}, {self.status})"


class ActivationStatus(models.TextChoices):
    QUEUED = "queued"  # in its run's queue: the run's max_concurrency holds it back, or a retry's backoff
    READY = "ready"  # admitted by its run: the scheduler hands it to a worker when its team's turn comes
    DISPATCHED = "dispatched"  # claimed by a worker (``worker``), its session not begun yet
    RUNNING = "running"
    SUSPENDED = "suspended"  # its session is suspended until what it waits for settles (children, people)
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


# Holding a worker's slot (counted against the team's limit).
ACTIVE_ACTIVATION_STATUSES = (ActivationStatus.DISPATCHED, ActivationStatus.RUNNING)
# Admitted by its run (counted against the run's max_concurrency).
ADMITTED_ACTIVATION_STATUSES = (ActivationStatus.READY, *ACTIVE_ACTIVATION_STATUSES)
OPEN_ACTIVATION_STATUSES = (ActivationStatus.QUEUED, *ADMITTED_ACTIVATION_STATUSES)
# Not settled yet: what a parent waiting for this activation must still wait for.
UNSETTLED_ACTIVATION_STATUSES = (*OPEN_ACTIVATION_STATUSES, ActivationStatus.SUSPENDED)


def current_queue() -> str:
    """The worker pool of work created now: this process's Celery queue (MAS_CELERY_QUEUE, or the queue a
    test module routes its work to)."""
    from celery import current_app

    return current_app.conf.task_default_queue or settings.CELERY_TASK_DEFAULT_QUEUE


class Activation(models.Model):
    """Queued work: an agent with an input, in a run (SPEC §2)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="activations")
    # The run's team, kept here so the scheduler picks across teams from this table alone.
    team = models.ForeignKey("agents_app.Team", on_delete=models.CASCADE, related_name="+", db_index=False)
    agent = models.SlugField(max_length=100)
    input = models.TextField(blank=True)
    kind = models.CharField(max_length=16, default="root")  # root | spawn | delegate | signal | step | tool
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    depth = models.PositiveIntegerField(default=0)
    priority = models.IntegerField(default=100, help_text="Lower runs first")
    context = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=ActivationStatus.choices, default=ActivationStatus.QUEUED)
    result = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    not_before = models.DateTimeField(null=True, blank=True, help_text="Retry backoff: not dispatched before")
    ready_at = models.DateTimeField(null=True, blank=True, help_text="When its run last admitted it")
    dispatched_at = models.DateTimeField(null=True, blank=True, help_text="When a worker last claimed it")
    worker = models.CharField(max_length=200, blank=True, help_text="The worker that claimed it last")
    # The worker pool that runs it: the Celery queue of the process that created it (MAS_CELERY_QUEUE); a
    # worker claims only the work of the queues it serves (``celery worker -Q``).
    queue = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "activation"
        verbose_name_plural = "activations"
        ordering = ["created_at"]
        indexes = [
            models.Index(fields=["run", "status", "priority", "created_at"], name="activation_queue"),
            # The scheduler's: what each team has ready, in its order, and what holds a slot.
            models.Index(fields=["queue", "team", "priority", "created_at"], name="activation_ready",
                         condition=models.Q(status="ready")),
            models.Index(fields=["team"], name="activation_active",
                         condition=models.Q(status__in=["dispatched", "running"])),
        ]

    def __str__(self) -> str:
        return f"{self.agent} ({self.kind}, {self.status})"

    @property
    def ctx(self) -> ActivationContext:
        """The context, typed (a new object on each read: change it with ``ctx.replace`` and assign it)."""
        return ActivationContext.from_json(self.context)

    @ctx.setter
    def ctx(self, value: ActivationContext) -> None:
        self.context = value.to_json()

    def save(self, *args, **kwargs) -> None:
        if self.team_id is None and self.run_id is not None:  # the run's team, unless the caller gave it
            self.team_id = self.run.team_id
        if not self.queue:
            self.queue = current_queue()
        super().save(*args, **kwargs)


class SessionStatus(models.TextChoices):
    RUNNING = "running"
    SUSPENDED = "suspended"  # checkpointed, holding no worker, resumed when what it waits for settles
    OK = "ok"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Session(models.Model):
    """One attempt at an activation: the model loop, checkpointed after every step."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="sessions")
    activation = models.ForeignKey(Activation, on_delete=models.CASCADE, related_name="sessions")
    agent = models.SlugField(max_length=100)
    attempt = models.PositiveIntegerField(default=1)
    tier = models.CharField(max_length=16, blank=True)
    provider = models.CharField(max_length=100, blank=True)
    model = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=SessionStatus.choices, default=SessionStatus.RUNNING)
    state = models.JSONField(default=dict, blank=True, help_text="Checkpoint: messages and counters")
    result = models.TextField(blank=True)
    failure = models.JSONField(null=True, blank=True)
    meta = models.JSONField(default=dict, blank=True)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=16, decimal_places=8, default=0)
    reserved_usd = models.DecimalField(max_digits=16, decimal_places=8, default=0,
                                       help_text="This session's part of its run's reserved_usd")
    reserved_large = models.PositiveIntegerField(default=0, help_text="This session's part of its run's reserved_large")
    worker = models.CharField(max_length=200, blank=True)
    # Its store's writes (agents_app.execution.store): each carries the worker's claim and the next number,
    # so one retried after it committed applies nothing twice, and one of a worker whose session was taken
    # over (a new claim) applies nothing. ``last_write``: what the last one returned, for such a retry.
    claim = models.UUIDField(null=True, blank=True, editable=False)
    writes = models.PositiveBigIntegerField(default=0)
    last_write = models.JSONField(null=True, blank=True, editable=False)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "session"
        verbose_name_plural = "sessions"
        ordering = ["started_at"]
        constraints = [
            models.UniqueConstraint(fields=["activation", "attempt"], name="session_unique_attempt"),
        ]

    def __str__(self) -> str:
        return f"{self.agent} #{self.attempt} ({self.status})"


class Worker(models.Model):
    """A worker process the scheduler hands sessions to; it beats every ``MAS_WORKER_BEAT_S``.

    One whose beat is older than ``MAS_WORKER_DEAD_S`` is dead: its sessions are resumed elsewhere.
    """

    name = models.CharField(max_length=200, primary_key=True)
    queue = models.CharField(max_length=200, default="mas", help_text="The pool it serves (its Celery queue)")
    slots = models.PositiveIntegerField(default=0)
    running = models.PositiveIntegerField(default=0, help_text="Sessions it carries now (as of its last beat)")
    started_at = models.DateTimeField(auto_now_add=True)
    heartbeat_at = models.DateTimeField()

    class Meta:
        verbose_name = "worker"
        verbose_name_plural = "workers"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class SessionEntry(models.Model):
    """One append-only piece of a session's history (agents_app.execution.journal).

    ``message``: a message of the history, in order; ``compaction``: the history was compacted —
    its payload lists the entries the history holds from then on (``order``), and the entries it
    dropped carry its seq in ``replaced_by``; ``seen``: the digest of a new tool result (the loop's
    progress check). A step inserts only its new entries; the session's other counters are kept on
    ``Session.state``.
    """

    # No index of its own: the unique (session, seq) index serves every lookup by session. No foreign key check
    # in PostgreSQL: see mas_core.models.Event.
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="entries", db_index=False,
                                db_constraint=False)
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=16)  # message | compaction | seen
    # JSON text (a digest for ``seen``), not jsonb: a message's tool-call arguments keep the order the model gave them, so a
    # resumed session sends the very request the uninterrupted one would have.
    payload = models.TextField()
    replaced_by = models.PositiveIntegerField(null=True, blank=True)
    # The seq of the run's last event emitted before this entry was staged: a fork at event N keeps the entries
    # with event_seq <= N. ``counters``: the session's counters at that checkpoint (on its last new entry).
    event_seq = models.PositiveBigIntegerField(null=True, blank=True)
    counters = models.TextField(null=True, blank=True)

    class Meta:
        ordering = ["session_id", "seq"]
        verbose_name = "session entry"
        verbose_name_plural = "session entries"
        constraints = [models.UniqueConstraint(fields=["session", "seq"], name="session_entry_unique_seq")]

    def __str__(self) -> str:
        return f"{self.kind} #{self.seq}"


class WorkspaceFile(models.Model):
    # No index of its own: the unique (run, path) index serves every lookup by run. No foreign key checks in
    # PostgreSQL: see mas_core.models.Event.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="files", db_index=False, db_constraint=False)
    path = models.CharField(max_length=500)
    content = models.TextField(blank=True)
    version = models.PositiveIntegerField(default=1)
    author = models.CharField(max_length=100, blank=True, help_text="Agent slug")
    session = models.ForeignKey(Session, null=True, blank=True, on_delete=models.SET_NULL, db_constraint=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "workspace file"
        verbose_name_plural = "workspace files"
        ordering = ["run_id", "path"]
        constraints = [models.UniqueConstraint(fields=["run", "path"], name="workspace_unique_path")]

    def __str__(self) -> str:
        return self.path


class WorkspaceFileVersion(models.Model):
    """A file's content as one write left it (``content`` null: deleted), numbered by its ``file_change`` event.

    Append-only, written with the file (agents_app.execution.store): what a fork reads to restore the workspace
    as it was at an event. Kept up to ``MAS_WORKSPACE_HISTORY_MAX_BYTES`` per run (``Run.history_bytes``).
    """

    # No index of its own: the (run, seq) index serves every lookup by run. No foreign key check in PostgreSQL:
    # see mas_core.models.Event.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="file_versions", db_index=False,
                            db_constraint=False)
    path = models.CharField(max_length=500)
    seq = models.PositiveBigIntegerField()
    content = models.TextField(null=True, blank=True)

    class Meta:
        verbose_name = "workspace file version"
        verbose_name_plural = "workspace file versions"
        ordering = ["run_id", "seq"]
        indexes = [models.Index(fields=["run", "seq"], name="file_version_run_seq")]

    def __str__(self) -> str:
        return f"{self.path} @{self.seq}"
