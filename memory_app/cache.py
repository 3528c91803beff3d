"""The semantic cache: a model request close enough to an earlier one gets the earlier answer.

Opt-in per agent (``memory: {cache: {enabled: true}}``, temperature 0 only:
a cached answer stands in for a deterministic one, never for a sample).

A request hits an entry of its team when

- it goes to the same ``provider:model`` with the same tools and
  ``max_tokens``, and the conversation before its last message is the same
  (one digest: a system prompt or a tool result that differs is a different
  question, whatever the last message says);
- its last message (the task, or the latest tool result) has a cosine
  similarity of at least ``similarity`` with the entry's, by the embedding
  model — the whole conversation is not embedded, since the model reads only
  its first 256 word pieces and the system prompt would drown the question;
- the entry is younger than ``ttl_s``.

A hit costs no tokens: the response is returned with zero usage, its tool
calls under fresh ids (ids are unique within a conversation). Hits and
misses are ``cache_hit`` / ``cache_miss`` events, which the run's totals
count. Only complete answers (``stop`` / ``tool_calls``) are stored.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Awaitable, Callable

from django.db.models import F
from django.utils import timezone
from pgvector.django import CosineDistance

from mas_core.llm_types import Message, emit_chunk, ModelRequest, ModelResponse, ToolCall, Usage
from mas_core.embeddings import embed
from memory_app.models import CachedResponse

STORED_FINISH_REASONS = frozenset({"stop", "tool_calls"})


def _without_ids(message: Message) -> dict[str, Any]:
    # Tool call ids are arbitrary (a replayed answer gets new ones): the calls and results say the same without.
    return {"role": message.role, "content": message.content, "name": message.name,
            "tool_calls": [{"name": c.name, "arguments": c.arguments, "raw": c.raw_arguments}
                           for c in message.tool_calls]}


def request_key(request: ModelRequest) -> tuple[str, str]:
    """(digest of everything but the last message's text, the last message's text)."""
    *before, last = request.messages
    context = {
        "tools": [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in request.tools],
        "max_tokens": request.max_tokens,
        "messages": [_without_ids(m) for m in before],
        "last": {**_without_ids(last), "content": None},
    }
    digest = hashlib.sha256(json.dumps(context, sort_keys=True, default=str).encode("utf-8")).hexdigest()
    return digest, last.content


@dataclass(frozen=True)
class Lookup:
    digest: str
    prompt: str
    vector: list[float]
    entry: CachedResponse | None  # the hit, if any
    similarity: float | None  # of the closest live entry (hit or not)


def cache_lookup(*, team_id: int, model: str, request: ModelRequest, similarity: float, ttl_s: int) -> Lookup:
    """The closest live entry for ``request``; a hit (``entry`` set) when similar enough, counted on the entry."""
    digest, prompt = request_key(request)
    vector = embed([prompt or " "])[0]
    closest = (CachedResponse.objects
               .filter(team_id=team_id, model=model, context_digest=digest,
                       created_at__gte=timezone.now() - timedelta(seconds=ttl_s))
               .annotate(distance=CosineDistance("embedding", vector))
               .order_by("distance", "-id").first())
    if closest is None:
        return Lookup(digest, prompt, vector, None, None)
    found = round(1 - closest.distance, 4)
    if found < similarity:
        return Lookup(digest, prompt, vector, None, found)
    CachedResponse.objects.filter(pk=closest.pk).update(hits=F("hits") + 1, last_hit_at=timezone.now())
    return Lookup(digest, prompt, vector, closest, found)


def cache_store(*, team_id: int, agent: str, model: str, lookup: Lookup, response: ModelResponse, run_id,
                ttl_s: int) -> CachedResponse | None:
    """Keep a complete answer; entries of the same conversation past their TTL go at the same time."""
    if response.finish_reason not in STORED_FINISH_REASONS:
        return None
    CachedResponse.objects.filter(team_id=team_id, model=model, context_digest=lookup.digest,
                                  created_at__lt=timezone.now() - timedelta(seconds=ttl_s)).delete()
    return CachedResponse.objects.create(
        team_id=team_id, agent=agent, model=model, context_digest=lookup.digest, prompt=lookup.prompt,
        embedding=lookup.vector, run_id=run_id,
        response={"text": response.text, "tool_calls": [call.to_dict() for call in response.tool_calls],
                  "usage": {"prompt_tokens": response.usage.prompt_tokens,
                            "completion_tokens": response.usage.completion_tokens},
                  "model": response.model, "finish_reason": response.finish_reason},
    )


def replayed(entry: CachedResponse) -> ModelResponse:
    """The cached answer as a fresh response: no usage, new tool call ids."""
    data = entry.response
    prefix = f"cached_{uuid.uuid4().hex[:12]}"
    calls = [ToolCall(id=f"{prefix}_{index}", name=call["name"], arguments=call.get("arguments") or {},
                      raw_arguments=call.get("raw_arguments"))
             for index, call in enumerate(data.get("tool_calls") or [])]
    return ModelResponse(text=data.get("text") or "", tool_calls=calls, usage=Usage(), model=data.get("model") or "",
                         finish_reason=data.get("finish_reason") or "stop", cached=True)


class CachedModel:
    """A session's model handle behind the semantic cache (same interface: ``model``, ``tier``, ``complete``,
    ``cost``)."""

    def __init__(self, inner, *, model_key: str, team_id: int, run_id, agent: str, similarity: float, ttl_s: int,
                 emit: Callable[[str, dict[str, Any]], Awaitable[None]]) -> None:
        self.inner, self.model_key, self.team_id, self.run_id, self.agent = inner, model_key, team_id, run_id, agent
        self.similarity, self.ttl_s, self.emit = similarity, ttl_s, emit
        self.missed: tuple[ModelRequest, Lookup] | None = None  # a retried request is not looked up twice

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def tier(self) -> str:
        return self.inner.tier

    def cost(self, response: ModelResponse):
        return self.inner.cost(response)

    def cost_at_most(self, *, prompt_tokens: int, max_tokens: int | None):
        return self.inner.cost_at_most(prompt_tokens=prompt_tokens, max_tokens=max_tokens)

    async def complete(self, request: ModelRequest, *, on_chunk=None) -> ModelResponse:
        from mas_core.runner import db

        if request.temperature != 0:  # the agent's settings forbid it; a sampled answer is never reused
            return await self.inner.complete(request, on_chunk=on_chunk)
        if self.missed is not None and self.missed[0] is request:
            return await self._call(request, self.missed[1], on_chunk)
        lookup = await db(cache_lookup)(team_id=self.team_id, model=self.model_key, request=request,
                                        similarity=self.similarity, ttl_s=self.ttl_s)
        if lookup.entry is not None:
            saved = lookup.entry.response.get("usage") or {}
            await self.emit("cache_hit", {
                "entry": lookup.entry.id, "similarity": lookup.similarity, "model": self.model_key,
                "cached_prompt": lookup.entry.prompt[:300],
                "saved_tokens": {"prompt_tokens": saved.get("prompt_tokens", 0),
                                 "completion_tokens": saved.get("completion_tokens", 0)},
            })
            response = replayed(lookup.entry)
            await emit_chunk(on_chunk, response.text)
            return response
        await self.emit("cache_miss", {"model": self.model_key, "closest_similarity": lookup.similarity})
        self.missed = (request, lookup)
        return await self._call(request, lookup, on_chunk)

    async def _call(self, request: ModelRequest, lookup: Lookup, on_chunk) -> ModelResponse:
        from mas_core.runner import db

        response = await self.inner.complete(request, on_chunk=on_chunk)
        await db(cache_store)(team_id=self.team_id, agent=self.agent, model=self.model_key, lookup=lookup,
                              response=response, run_id=self.run_id, ttl_s=self.ttl_s)
        return response


def cached_model(model, *, enabled: bool, similarity: float, ttl_s: int, model_key: str, team_id: int, run_id,
                 agent: str, emit: Callable[[str, dict[str, Any]], Awaitable[None]]):
    """``model`` behind the semantic cache when the agent enabled it, else ``model`` itself."""
    if not enabled:
        return model
    return CachedModel(model, model_key=model_key, team_id=team_id, run_id=run_id, agent=agent,
                       similarity=similarity, ttl_s=ttl_s, emit=emit)
