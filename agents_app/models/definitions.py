"""The definitions agents_app owns: agents, skills, model providers and their models, guardrails, remote agents.

Each extends the foundation's :class:`mas_core.models.Definition` (teams,
tokens and versions live there too).
"""

from __future__ import annotations

from django.db import models

from mas_core.models import Definition


class Agent(Definition):
    kind_name = "agent"
    model = models.CharField(max_length=200, blank=True)
    tier = models.CharField(max_length=16, blank=True)

    class Meta(Definition.Meta):
        verbose_name = "agent"
        verbose_name_plural = "agents"
        constraints = [models.UniqueConstraint(fields=["team", "slug"], name="agent_unique_team_slug")]


class Skill(Definition):
    kind_name = "skill"
    references = models.JSONField(default=dict, blank=True, help_text="Files beside SKILL.md: path → text.")

    class Meta(Definition.Meta):
        verbose_name = "skill"
        verbose_name_plural = "skills"
        constraints = [models.UniqueConstraint(fields=["team", "slug"], name="skill_unique_team_slug")]


class ModelProvider(Definition):
    kind_name = "provider"
    provider_type = models.CharField(max_length=32)
    base_url = models.CharField(max_length=500, blank=True)
    api_key_env = models.CharField(max_length=100, blank=True)

    class Meta(Definition.Meta):
        verbose_name = "model provider"
        verbose_name_plural = "model providers"
        constraints = [models.UniqueConstraint(fields=["team", "slug"], name="provider_unique_team_slug")]


class ProviderModel(models.Model):
    """One model of a provider; derived from the provider's spec on every save."""

    provider = models.ForeignKey(ModelProvider, on_delete=models.CASCADE, related_name="models")
    name = models.CharField(max_length=200)
    tier = models.CharField(max_length=16, blank=True)
    input_price = models.DecimalField(max_digits=12, decimal_places=4, default=0, help_text="USD per million tokens")
    output_price = models.DecimalField(max_digits=12, decimal_places=4, default=0, help_text="USD per million tokens")
    # Blank: the default for a well-known model name (agents_app.llm.windows), else none is known.
    context_window = models.PositiveIntegerField(null=True, blank=True, help_text="Tokens the model accepts")
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True, help_text="Tokens it may answer")

    class Meta:
        verbose_name = "provider model"
        verbose_name_plural = "provider models"
        ordering = ["provider_id", "name"]
        constraints = [models.UniqueConstraint(fields=["provider", "name"], name="provider_model_unique_name")]

    def __str__(self) -> str:
        return f"{self.provider.slug}:{self.name}"


class Guardrail(Definition):
    """A check on content where it enters or leaves a model (``agents_app.specs.GuardrailSpec``).

    ``action`` and ``default`` are copies of the spec's, for the admin's list and for finding the team's defaults
    (``Guardrail.objects.filter(team=…, default=True)``); the spec is the definition.
    """

    kind_name = "guardrail"
    action = models.CharField(max_length=16)
    default = models.BooleanField(default=False, help_text="A team default: checks every run of the team")

    class Meta(Definition.Meta):
        verbose_name = "guardrail"
        verbose_name_plural = "guardrails"
        constraints = [models.UniqueConstraint(fields=["team", "slug"], name="guardrail_unique_team_slug")]


class RemoteAgent(Definition):
    """An agent served elsewhere over A2A (``agents_app.specs.RemoteAgentSpec``): delegated to and named by
    workflow steps like the team's own; its sessions talk to it (``agents_app.execution.remote``)."""

    kind_name = "remote_agent"

    class Meta(Definition.Meta):
        verbose_name = "remote agent"
        verbose_name_plural = "remote agents"
        constraints = [models.UniqueConstraint(fields=["team", "slug"], name="remote_agent_unique_team_slug")]
