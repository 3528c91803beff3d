"""Requests for a person: approve a tool call, answer a question, pass a workflow step's gate.

A row is the whole state of a pause: the session that asked is suspended
(holding no worker) until the row is decided, by a person or, at its
deadline, by the system. ``consumed_at`` marks that the resumed session read
the decision, so it is never asked again.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from mas_core.models import Team
from agents_app.models.runs import Run, Session


class RequestKind(models.TextChoices):
    APPROVAL = "approval"  # a tool call waits for approval
    QUESTION = "question"  # ask_human
    GATE = "gate"  # a workflow step's gate (before it starts or before its outputs are accepted)
    RESULT = "result"  # a tool's result an ``ask`` guardrail holds until a person lets the model read it
    ANSWER = "answer"  # a session's final answer an ``ask`` guardrail holds until a person lets it out


class RequestStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    ANSWERED = "answered"
    EXPIRED = "expired"  # the deadline passed: ``decision["outcome"]`` is the default applied
    CANCELLED = "cancelled"  # the run was cancelled while it waited


class DefaultOutcome(models.TextChoices):
    REJECT = "reject"
    APPROVE = "approve"
    FAIL = "fail"


class ApprovalRequest(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="approval_requests")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="approval_requests")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="approval_requests")
    agent = models.SlugField(max_length=100)
    kind = models.CharField(max_length=16, choices=RequestKind.choices, default=RequestKind.APPROVAL)
    tool = models.CharField(max_length=200, blank=True)
    call_id = models.CharField(max_length=200, help_text="The tool call (or gate) it holds")
    arguments = models.JSONField(default=dict, blank=True)
    schema = models.JSONField(default=dict, blank=True, help_text="The tool's parameters (edited arguments match it)")
    question = models.TextField(blank=True)
    choices = models.JSONField(default=list, blank=True)
    reason = models.CharField(max_length=300, blank=True)
    status = models.CharField(max_length=16, choices=RequestStatus.choices, default=RequestStatus.PENDING)
    deadline = models.DateTimeField()
    default_outcome = models.CharField(max_length=16, choices=DefaultOutcome.choices, default=DefaultOutcome.REJECT)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   help_text="Empty when the system decided (the deadline)")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision = models.JSONField(default=dict, blank=True)
    consumed_at = models.DateTimeField(null=True, blank=True, help_text="When the resumed session read the decision")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["session", "call_id"], name="approval_unique_call")]
        indexes = [models.Index(fields=["team", "status", "-created_at"], name="approval_inbox"),
                   models.Index(fields=["status", "deadline"], name="approval_deadline")]

    def __str__(self) -> str:
        return f"{self.kind} {self.tool or self.question[:40]} ({self.status})"
