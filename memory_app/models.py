"""Long-term memory: what agents learned, embedded (pgvector) and searchable by meaning and words."""

from __future__ import annotations

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector
from django.db import models
from pgvector.django import HnswIndex, VectorField

from mas_core.embeddings import DIMENSIONS


class MemoryType(models.TextChoices):
    SKILL = "skill"
    FACT = "fact"
    PROCEDURE = "procedure"
    OBSERVATION = "observation"
    MISTAKE = "mistake"
    PREFERENCE = "preference"


class Memory(models.Model):
    """One memory of a team: an agent's own (``agent`` set, not shared) or the team's shared knowledge."""

    team = models.ForeignKey("agents_app.Team", on_delete=models.CASCADE, related_name="memories")
    agent = models.CharField(max_length=100, blank=True, help_text="Owning agent (slug); blank for the team")
    type = models.CharField(max_length=16, choices=MemoryType.choices, default=MemoryType.FACT)
    content = models.TextField()
    tags = models.JSONField(default=list, blank=True)
    embedding = VectorField(dimensions=DIMENSIONS)
    shared = models.BooleanField(default=False, help_text="Visible to every agent of the team")
    run = models.ForeignKey("agents_app.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    session = models.ForeignKey("agents_app.Session", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")
    source_agent = models.CharField(max_length=100, blank=True, help_text="The agent that wrote it")
    access_count = models.PositiveIntegerField(default=0)
    last_accessed_at = models.DateTimeField(null=True, blank=True)
    superseded_by = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL,
                                      related_name="supersedes")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "memory"
        verbose_name_plural = "memories"
        ordering = ["-created_at", "-id"]
        indexes = [
            HnswIndex(name="memory_embedding_hnsw", fields=["embedding"], m=16, ef_construction=64,
                      opclasses=["vector_cosine_ops"]),
            GinIndex(SearchVector("content", config="english"), name="memory_content_fts"),
            models.Index(fields=["team", "agent"], name="memory_team_agent"),
        ]
        constraints = [
            models.CheckConstraint(condition=~models.Q(content=""), name="memory_content_not_empty"),
        ]

    def __str__(self) -> str:
        return self.content[:80]


class Channel(models.Model):
    """A run's pub/sub channel: messages numbered per channel; each subscriber acks what it has read."""

    run = models.ForeignKey("agents_app.Run", on_delete=models.CASCADE, related_name="channels")
    name = models.CharField(max_length=100)
    next_seq = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "channel"
        verbose_name_plural = "channels"
        ordering = ["run_id", "name"]
        constraints = [models.UniqueConstraint(fields=["run", "name"], name="channel_unique_run_name")]

    def __str__(self) -> str:
        return self.name


class ChannelMessage(models.Model):
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="messages")
    seq = models.PositiveBigIntegerField()
    sender = models.CharField(max_length=100)
    content = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "channel message"
        verbose_name_plural = "channel messages"
        ordering = ["channel_id", "seq"]
        constraints = [models.UniqueConstraint(fields=["channel", "seq"], name="channel_message_unique_seq")]


class Subscription(models.Model):
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="subscriptions")
    agent = models.CharField(max_length=100)
    last_acked = models.PositiveBigIntegerField(default=0)

    class Meta:
        verbose_name = "subscription"
        verbose_name_plural = "subscriptions"
        constraints = [models.UniqueConstraint(fields=["channel", "agent"], name="subscription_unique_agent")]


class BlackboardEntry(models.Model):
    """A run's shared key/value: each write bumps the key's version and names its author."""

    run = models.ForeignKey("agents_app.Run", on_delete=models.CASCADE, related_name="blackboard")
    key = models.CharField(max_length=200)
    value = models.TextField()
    version = models.PositiveIntegerField(default=1)
    author = models.CharField(max_length=100)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "blackboard entry"
        verbose_name_plural = "blackboard entries"
        ordering = ["run_id", "key"]
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="blackboard_unique_key")]


class CachedResponse(models.Model):
    """A model's answer kept for the semantic cache (opt-in per agent, temperature 0; see memory_app.cache).

    A later request hits it when it goes to the same model with the same tools
    and the same conversation up to its last message, and that last message
    means nearly the same (``embedding`` is the last message's).
    """

    team = models.ForeignKey("agents_app.Team", on_delete=models.CASCADE, related_name="cached_responses")
    agent = models.CharField(max_length=100, help_text="The agent whose request it answered first")
    model = models.CharField(max_length=300, help_text="provider:model")
    context_digest = models.CharField(max_length=64, help_text="Model, tools, limits and every message but the last")
    prompt = models.TextField(help_text="The request's last message, compared by meaning")
    embedding = VectorField(dimensions=DIMENSIONS)
    response = models.JSONField(help_text="text, tool_calls, usage, model, finish_reason")
    hits = models.PositiveIntegerField(default=0)
    last_hit_at = models.DateTimeField(null=True, blank=True)
    run = models.ForeignKey("agents_app.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "cached response"
        verbose_name_plural = "cached responses"
        ordering = ["-created_at", "-id"]
        # Candidates share an exact digest, so they are few: they are compared exactly, no vector index.
        indexes = [models.Index(fields=["team", "model", "context_digest", "created_at"], name="cache_lookup")]

    def __str__(self) -> str:
        return self.prompt[:80]
