"""Consolidation: after a session succeeds, its agent's model picks what is worth remembering.

1. The model reads the session (task, tool calls and results, answer) and
   returns candidate memories as JSON: ``[{"content": ..., "type": ...}]``.
2. Each candidate is compared with the most similar memory the agent can
   see. Nothing close (cosine < 0.5): it is added. Otherwise the model
   decides, as JSON ``{"decision": "ADD" | "UPDATE" | "SKIP", "content": ...}``:
   ADD stores it, UPDATE stores the merged text and marks the old memory
   ``superseded_by`` the new one (its text is kept), SKIP stores nothing.

Every decision is an event (``memory_stored``, ``memory_updated``,
``memory_skipped``) with its provenance (run, session, agent); the model
calls are ``llm_request``/``llm_response`` events counted in the run's
totals. With the scripted provider these calls take the agent's next turns.
"""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

from mas_core.llm_types import Message, ModelRequest
from memory_app.models import MemoryType

SIMILAR = 0.5
MAX_CANDIDATES = 5

EXTRACT = (
    "You review a finished working session of yours and pick what is worth remembering for future tasks: "
    "facts learned, procedures that worked, mistakes to avoid, preferences. At most 5, each self-contained. "
    "Reply with JSON only: a list of objects {\"content\": ..., \"type\": one of "
    + ", ".join(MemoryType.values) + "}. Reply [] when nothing is worth keeping."
)
DECIDE = (
    "A new memory candidate and the most similar memory you already have. Decide: ADD (it is new), UPDATE "
    "(merge both into one better memory; give the merged text) or SKIP (already known). Reply with JSON only: "
    "{\"decision\": \"ADD\" | \"UPDATE\" | \"SKIP\", \"content\": merged text when UPDATE}."
)


class ConsolidationError(ValueError):
    pass


def transcript(messages: list[Message], limit: int = 12_000) -> str:
    lines = []
    for message in messages[1:]:  # not the system prompt
        if message.role == "assistant" and message.tool_calls:
            lines += [f"tool call {call.name} {json.dumps(call.arguments)[:500]}" for call in message.tool_calls]
        if message.content:
            lines.append(f"{message.role}: {message.content[:1500]}")
    return "\n".join(lines)[-limit:]


def _json(text: str) -> Any:
    text = text.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConsolidationError(f"the model's reply is not JSON ({error.msg}): {text[:200]}") from None


async def consolidate(*, messages: list[Message], model, agent: str, ask: Callable[[ModelRequest], Awaitable[str]],
                      nearest: Callable[[str], Awaitable[tuple[Any, float] | None]],
                      apply: Callable[..., Awaitable[None]]) -> list[str]:
    """Run the two stages; returns the decisions taken, in order. ``apply(decision, candidate, existing, merged)``
    writes one decision (and its event)."""

    def request(system: str, user: str) -> ModelRequest:
        return ModelRequest(model=model.model, messages=[Message(role="system", content=system),
                                                         Message(role="user", content=user)],
                            temperature=0, agent=agent)

    candidates = _json(await ask(request(EXTRACT, transcript(messages))))
    if not isinstance(candidates, list):
        raise ConsolidationError("the model's reply is not a list of memories")
    decisions = []
    for candidate in candidates[:MAX_CANDIDATES]:
        if not isinstance(candidate, dict) or not str(candidate.get("content", "")).strip():
            raise ConsolidationError(f"not a memory: {str(candidate)[:200]}")
        candidate = {"content": str(candidate["content"]).strip(),
                     "type": candidate.get("type") if candidate.get("type") in MemoryType.values else "fact"}
        found = await nearest(candidate["content"])
        if found is None or found[1] < SIMILAR:
            await apply("ADD", candidate, None, None)
            decisions.append("ADD")
            continue
        existing, similarity = found
        verdict = _json(await ask(request(DECIDE, f"Candidate: {candidate['content']}\n\n"
                                                  f"Existing memory (similarity {similarity:.2f}): {existing.content}")))
        decision = str(verdict.get("decision", "")).upper() if isinstance(verdict, dict) else ""
        if decision not in {"ADD", "UPDATE", "SKIP"}:
            raise ConsolidationError(f"unknown decision {decision or verdict!r}")
        merged = str(verdict.get("content") or "").strip() if decision == "UPDATE" else None
        if decision == "UPDATE" and not merged:
            raise ConsolidationError("UPDATE without the merged content")
        await apply(decision, candidate, existing, merged)
        decisions.append(decision)
    return decisions
