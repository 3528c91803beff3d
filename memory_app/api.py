"""``/api/memories``: search the team's memories, add, share or unshare, delete (team-scoped)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from django.http import Http404, HttpRequest
from ninja import Query, Router, Status
from ninja.errors import ValidationError as NinjaValidationError
from pydantic import BaseModel, ConfigDict, Field

from mas_core.permissions import Actor
from mas_core.schemas import error_responses
from mas_core.api_auth import api_auth
from memory_app.models import Memory
from memory_app.selectors import memory_search
from memory_app.services import MemoryError, memory_delete, memory_share, memory_store

router = Router(tags=["memories"])
read, edit = api_auth("view"), api_auth("edit")

MemoryTypeName = Literal["skill", "fact", "procedure", "observation", "mistake", "preference"]


class MemoryOut(BaseModel):
    id: int
    agent: str = Field(description="The owning agent; empty for the team's knowledge")
    type: MemoryTypeName
    content: str
    tags: list[str]
    shared: bool
    source_agent: str
    run: str | None
    access_count: int
    last_accessed_at: datetime | None
    superseded_by: int | None
    created_at: datetime
    updated_at: datetime
    score: float | None = Field(default=None, description="Search only: reciprocal-rank-fusion score")
    similarity: float | None = Field(default=None, description="Search only: cosine similarity to the query")


class MemoryIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str = Field(min_length=1, max_length=8000)
    type: MemoryTypeName = "fact"
    tags: list[str] = Field(default_factory=list, max_length=20)
    agent: str = Field(default="", pattern=r"^([-a-zA-Z0-9_]{1,100})?$",
                       description="The agent it belongs to; empty for team knowledge")
    shared: bool = False


class MemoryQuery(BaseModel):
    q: str = Field(default="", max_length=2000, description="Search text; empty lists the newest")
    agent: str | None = Field(default=None, max_length=100,
                              description="Search as this agent: its own memories plus the shared ones")
    type: list[MemoryTypeName] = Field(default_factory=list)
    tag: list[str] = Field(default_factory=list)
    shared_only: bool = False
    k: int = Field(default=10, ge=1, le=100)


class ShareIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    shared: bool


def memory_out(memory: Memory, *, score: float | None = None, similarity: float | None = None) -> dict:
    return {
        "id": memory.id, "agent": memory.agent, "type": memory.type, "content": memory.content,
        "tags": memory.tags, "shared": memory.shared, "source_agent": memory.source_agent,
        "run": str(memory.run_id) if memory.run_id else None, "access_count": memory.access_count,
        "last_accessed_at": memory.last_accessed_at, "superseded_by": memory.superseded_by_id,
        "created_at": memory.created_at, "updated_at": memory.updated_at, "score": score,
        "similarity": similarity,
    }


def _get(actor: Actor, memory_id: int) -> Memory:
    memory = Memory.objects.filter(team=actor.team, pk=memory_id).first()
    if memory is None:
        raise Http404("no such memory")
    return memory


@router.get("/memories", auth=read, response={200: list[MemoryOut], **error_responses(401, 403, 422)},
            operation_id="memory_search", summary="Search the team's memories (hybrid: meaning and words)")
def search(request: HttpRequest, query: Query[MemoryQuery]):
    actor: Actor = request.auth
    if not query.q.strip():
        rows = Memory.objects.filter(team=actor.team, superseded_by__isnull=True)
        if query.agent:
            rows = rows.filter(agent=query.agent) | rows.filter(shared=True)
        if query.shared_only:
            rows = rows.filter(shared=True)
        if query.type:
            rows = rows.filter(type__in=query.type)
        return [memory_out(m) for m in rows.order_by("-created_at", "-id")[:query.k]]
    hits = memory_search(team_id=actor.team.id, query=query.q, k=query.k, agent=query.agent or None,
                         types=query.type or None, tags=query.tag or None,
                         shared_only=query.shared_only, track=False)
    return [memory_out(hit.memory, score=hit.score, similarity=hit.similarity) for hit in hits]


@router.post("/memories", auth=edit, response={201: MemoryOut, **error_responses(401, 403, 413, 415, 422)},
             operation_id="memory_create", summary="Store a memory (editors and admins)")
def create(request: HttpRequest, payload: MemoryIn):
    actor: Actor = request.auth
    try:
        memory = memory_store(team_id=actor.team.id, content=payload.content, type=payload.type, tags=payload.tags,
                              agent=payload.agent, shared=payload.shared or not payload.agent,
                              source_agent=payload.agent)
    except MemoryError as error:
        field, _, message = str(error).partition(": ")
        raise NinjaValidationError([{"loc": ("body", field), "msg": message, "type": "invalid_memory"}]) from None
    return Status(201, memory_out(memory))


@router.post("/memories/{memory_id}/share", auth=edit, response={200: MemoryOut, **error_responses(401, 403, 404, 422)},
             operation_id="memory_share", summary="Share a memory with the team's agents, or take it back")
def share(request: HttpRequest, memory_id: int, payload: ShareIn):
    actor: Actor = request.auth
    return memory_out(memory_share(memory=_get(actor, memory_id), shared=payload.shared))


@router.delete("/memories/{memory_id}", auth=edit, response={204: None, **error_responses(401, 403, 404)},
               operation_id="memory_delete", summary="Delete a memory")
def delete(request: HttpRequest, memory_id: int):
    actor: Actor = request.auth
    memory_delete(memory=_get(actor, memory_id))
    return Status(204, None)


# -- a run's blackboard and channels ---------------------------------------------------------


class BlackboardEntryOut(BaseModel):
    key: str
    value: str
    version: int
    author: str
    updated_at: datetime


class ChannelMessageOut(BaseModel):
    seq: int
    sender: str
    content: str
    created_at: datetime


class ChannelOut(BaseModel):
    name: str
    messages: list[ChannelMessageOut]
    subscribers: dict[str, int] = Field(description="Agent → the last message sequence it has acked")


@router.get("/runs/{run_id}/blackboard", auth=read, response={200: list[BlackboardEntryOut],
                                                              **error_responses(401, 403, 404)},
            operation_id="run_blackboard", summary="The run's blackboard: every key with its value, version, author")
def run_blackboard(request: HttpRequest, run_id: str):
    from mas_core.runs import run_get

    run = run_get(team=request.auth.team, run_id=run_id)
    return [{"key": e.key, "value": e.value, "version": e.version, "author": e.author, "updated_at": e.updated_at}
            for e in run.blackboard.order_by("key")]


@router.get("/runs/{run_id}/channels", auth=read, response={200: list[ChannelOut], **error_responses(401, 403, 404)},
            operation_id="run_channels", summary="The run's pub/sub channels with their messages and subscribers")
def run_channels(request: HttpRequest, run_id: str):
    from mas_core.runs import run_get

    run = run_get(team=request.auth.team, run_id=run_id)
    return [{"name": channel.name,
             "messages": [{"seq": m.seq, "sender": m.sender, "content": m.content, "created_at": m.created_at}
                          for m in channel.messages.order_by("seq")],
             "subscribers": {s.agent: s.last_acked for s in channel.subscriptions.order_by("agent")}}
            for channel in run.channels.order_by("name").prefetch_related("messages", "subscriptions")]
