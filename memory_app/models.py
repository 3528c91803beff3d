"""Long-term memory: what agents learned, embedded (pgvector) and searchable by meaning and words."""

from __future__ import annotations

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector
from django.db import models
from pgvector.django import HnswIndex, VectorField

from memory_app.embeddings import DIMENSIONS


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
