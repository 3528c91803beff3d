"""Writing memories: store (embedded on the way in), contribute shared knowledge without duplicates, share, delete."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from mas_core.embeddings import embed
from mas_core.errors import Refused
from memory_app.models import Memory, MemoryType
from memory_app.selectors import memory_nearest

MAX_CONTENT_CHARS = 8000
MAX_TAGS = 20
DUPLICATE_SIMILARITY = 0.9


class MemoryError(Refused):
    """A memory the server refuses, with a message for the caller (a tool result or an API 422)."""


def _clean(*, content: str, type: str, tags: list[str] | None) -> tuple[str, str, list[str]]:
    content = (content or "").strip()
    if not content:
        raise MemoryError("content: a memory needs some text")
    if len(content) > MAX_CONTENT_CHARS:
        raise MemoryError(f"content: at most {MAX_CONTENT_CHARS} characters (got {len(content)})")
    if type not in MemoryType.values:
        raise MemoryError(f"type: one of {', '.join(MemoryType.values)} (got {type!r})")
    tags = [str(tag).strip() for tag in tags or [] if str(tag).strip()]
    if len(tags) > MAX_TAGS:
        raise MemoryError(f"tags: at most {MAX_TAGS}")
    return content, type, sorted(set(tags))


def memory_store(*, team_id: int, content: str, type: str = MemoryType.FACT, tags: list[str] | None = None,
                 agent: str = "", shared: bool = False, run_id=None, session_id=None,
                 source_agent: str = "") -> Memory:
    """Embed and store one memory (the agent's own unless ``shared``)."""
    content, type, tags = _clean(content=content, type=type, tags=tags)
    return Memory.objects.create(
        team_id=team_id, agent=agent, type=type, content=content, tags=tags, embedding=embed([content])[0],
        shared=shared, run_id=run_id, session_id=session_id, source_agent=source_agent or agent,
    )


@dataclass(frozen=True)
class Contribution:
    memory: Memory
    added: bool  # False: a near-duplicate was already known (``memory`` is that one)
    similarity: float | None = None


@transaction.atomic
def knowledge_contribute(*, team_id: int, content: str, type: str = MemoryType.FACT, tags: list[str] | None = None,
                         run_id=None, session_id=None, source_agent: str = "") -> Contribution:
    """Add to the team's shared knowledge, unless a shared memory already says nearly the same."""
    content, type, tags = _clean(content=content, type=type, tags=tags)
    vector = embed([content])[0]
    nearest = memory_nearest(team_id=team_id, vector=vector)
    if nearest is not None and nearest[1] >= DUPLICATE_SIMILARITY:
        return Contribution(nearest[0], added=False, similarity=nearest[1])
    memory = Memory.objects.create(
        team_id=team_id, agent="", type=type, content=content, tags=tags, embedding=vector, shared=True,
        run_id=run_id, session_id=session_id, source_agent=source_agent,
    )
    return Contribution(memory, added=True)


def memory_share(*, memory: Memory, shared: bool) -> Memory:
    memory.shared = shared
    memory.save(update_fields=["shared", "updated_at"])
    return memory


def memory_delete(*, memory: Memory) -> None:
    memory.delete()


# -- what the memory tools may ask of the server (async, for a session's ToolContext.services) --------


def memory_tool_services(*, team_id: int, run_id, session_id, agent: str) -> dict:
    """Async callables behind ``memory_store``, ``memory_recall``, ``knowledge_query``, ``knowledge_contribute``."""
    from mas_core.eventlog import event_append
    from mas_core.runner import db
    from memory_app.selectors import memory_search

    def recorded(type_: str, memory: Memory, **extra) -> None:
        event_append(run_id=run_id, type=type_, agent=agent, session_id=session_id, data={
            "memory": memory.id, "type": memory.type, "shared": memory.shared, "content": memory.content[:500],
            **extra})

    def store(*, content: str, type: str, tags: list[str], shared: bool) -> Memory:
        with transaction.atomic():
            memory = memory_store(team_id=team_id, content=content, type=type, tags=tags, agent=agent,
                                  shared=shared, run_id=run_id, session_id=session_id, source_agent=agent)
            recorded("memory_stored", memory)
        return memory

    def contribute(*, content: str, type: str, tags: list[str]) -> Contribution:
        with transaction.atomic():
            result = knowledge_contribute(team_id=team_id, content=content, type=type, tags=tags, run_id=run_id,
                                          session_id=session_id, source_agent=agent)
            if result.added:
                recorded("memory_stored", result.memory)
            else:
                recorded("memory_skipped", result.memory, reason="near-duplicate",
                         similarity=round(result.similarity or 0, 4))
        return result

    def search(*, query: str, k: int, types: list[str] | None, tags: list[str] | None, shared_only: bool):
        return memory_search(team_id=team_id, agent=agent, query=query, k=k, types=types, tags=tags,
                             shared_only=shared_only)

    return {"memory_store": db(store), "knowledge_contribute": db(contribute), "memory_search": db(search)}


# -- consolidation (see memory_app.consolidation) ------------------------------------------------


def consolidation_nearest(*, team_id: int, agent: str, content: str) -> tuple[Memory, float] | None:
    return memory_nearest(team_id=team_id, vector=embed([content])[0], shared_only=False, agent=agent)


def consolidation_apply(*, team_id: int, run_id, session_id, agent: str, decision: str, candidate: dict,
                        existing: Memory | None, merged: str | None) -> Memory | None:
    """Write one consolidation decision and its event (with provenance)."""
    from mas_core.eventlog import event_append

    provenance = {"run": str(run_id), "session": str(session_id), "agent": agent, "via": "consolidation"}
    with transaction.atomic():
        if decision == "SKIP":
            event_append(run_id=run_id, type="memory_skipped", agent=agent, session_id=session_id, data={
                "candidate": candidate["content"][:500], "matched": existing.id, **provenance})
            return None
        if decision == "ADD":
            memory = memory_store(team_id=team_id, content=candidate["content"], type=candidate["type"], agent=agent,
                                  run_id=run_id, session_id=session_id, source_agent=agent)
            event_append(run_id=run_id, type="memory_stored", agent=agent, session_id=session_id, data={
                "memory": memory.id, "type": memory.type, "content": memory.content[:500], **provenance})
            return memory
        memory = memory_store(team_id=team_id, content=merged, type=existing.type, agent=existing.agent,
                              shared=existing.shared, tags=existing.tags, run_id=run_id, session_id=session_id,
                              source_agent=agent)
        Memory.objects.filter(pk=existing.pk).update(superseded_by=memory)
        event_append(run_id=run_id, type="memory_updated", agent=agent, session_id=session_id, data={
            "memory": memory.id, "supersedes": existing.id, "content": memory.content[:500],
            "previous": existing.content[:500], **provenance})
        return memory
