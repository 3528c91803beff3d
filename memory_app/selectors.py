"""Finding memories: hybrid search (vector + full text, reciprocal rank fusion), always k rows when k exist.

The vector leg uses the HNSW index with pgvector 0.8's iterative scan, so a
filter (the agent's own memories plus the team's shared ones, a type, tags)
does not starve the result; when the index still returns fewer rows than
asked — the visible set is small and scattered — the same query runs as an
exact search over just the visible rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from mas_core.embeddings import embed
from memory_app.models import Memory

RRF_K = 60
FTS = "to_tsvector('english'::regconfig, COALESCE(content, ''))"


@dataclass(frozen=True)
class Hit:
    memory: Memory
    score: float  # reciprocal rank fusion of the two legs
    similarity: float | None  # cosine similarity to the query, when the vector leg found it


def _visible(*, team_id: int, agent: str | None, types: list[str] | None, tags: list[str] | None,
             shared_only: bool) -> tuple[str, list[Any]]:
    where, params = ["team_id = %s", "superseded_by_id IS NULL"], [team_id]
    if shared_only:
        where.append("shared")
    elif agent:
        where.append("(agent = %s OR shared)")
        params.append(agent)
    # else: every memory of the team (its members' view, in the API and admin)
    if types:
        where.append("type = ANY(%s)")
        params.append(list(types))
    if tags:
        where.append("tags ?| %s")
        params.append(list(tags))
    return " AND ".join(where), params


def _vector_leg(vector: list[float], where: str, params: list[Any], n: int) -> list[tuple[int, float]]:
    literal = "[" + ",".join(f"{x:.7g}" for x in vector) + "]"
    with transaction.atomic(), connection.cursor() as cursor:
        # Both for this transaction only, in one statement; set_config takes its value as a parameter bound by the
        # server too (SET does not: "SET LOCAL hnsw.ef_search = $1" is a syntax error with server-side binding).
        cursor.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), "
                       "set_config('hnsw.ef_search', %s, true)", [str(max(40, 2 * n))])
        # relaxed_order may return near-ties out of order: sort the candidates again.
        cursor.execute(
            f"SELECT id, distance FROM (SELECT id, embedding <=> %s::vector AS distance FROM memory_app_memory "
            f"WHERE {where} ORDER BY embedding <=> %s::vector LIMIT %s) found ORDER BY distance",
            [literal, *params, literal, n],
        )
        rows = cursor.fetchall()
        if len(rows) < n:
            # Fewer than asked from the index: read the visible rows exactly (they are few).
            cursor.execute(
                f"WITH visible AS MATERIALIZED (SELECT id, embedding FROM memory_app_memory WHERE {where}) "
                "SELECT id, embedding <=> %s::vector AS distance FROM visible ORDER BY distance LIMIT %s",
                [*params, literal, n],
            )
            rows = cursor.fetchall()
    return [(row[0], 1 - row[1]) for row in rows]


def _text_leg(query: str, where: str, params: list[Any], n: int) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM memory_app_memory WHERE {where} AND {FTS} @@ plainto_tsquery('english', %s) "
            f"ORDER BY ts_rank({FTS}, plainto_tsquery('english', %s)) DESC, id LIMIT %s",
            [*params, query, query, n],
        )
        return [row[0] for row in cursor.fetchall()]


def memory_search(*, team_id: int, query: str, k: int = 5, agent: str | None = None,
                  types: list[str] | None = None, tags: list[str] | None = None, shared_only: bool = False,
                  track: bool = True, vector: list[float] | None = None) -> list[Hit]:
    """The ``k`` memories most relevant to ``query`` that ``agent`` may see (its own and the team's shared).

    Without ``agent``, every memory of the team is searched (for people, not agents).
    """
    where, params = _visible(team_id=team_id, agent=agent, types=types, tags=tags, shared_only=shared_only)
    candidates = max(k * 4, 20)
    by_vector = _vector_leg(vector if vector is not None else embed([query])[0], where, params, candidates)
    by_text = _text_leg(query, where, params, candidates)
    scores: dict[int, float] = {}
    for rank, (memory_id, _) in enumerate(by_vector, start=1):
        scores[memory_id] = scores.get(memory_id, 0.0) + 1 / (RRF_K + rank)
    for rank, memory_id in enumerate(by_text, start=1):
        scores[memory_id] = scores.get(memory_id, 0.0) + 1 / (RRF_K + rank)
    top = sorted(scores, key=lambda memory_id: (-scores[memory_id], memory_id))[:k]
    similarity = dict(by_vector)
    rows = Memory.objects.in_bulk(top)
    if track and top:
        Memory.objects.filter(pk__in=top).update(access_count=F("access_count") + 1,
                                                 last_accessed_at=timezone.now())
    return [Hit(rows[memory_id], scores[memory_id], similarity.get(memory_id)) for memory_id in top]


def memory_nearest(*, team_id: int, vector: list[float], shared_only: bool = True,
                   agent: str | None = None) -> tuple[Memory, float] | None:
    """The visible memory closest to ``vector`` and its cosine similarity (for de-duplication)."""
    where, params = _visible(team_id=team_id, agent=agent, types=None, tags=None, shared_only=shared_only)
    found = _vector_leg(vector, where, params, 1)
    if not found:
        return None
    memory_id, similarity = found[0]
    return Memory.objects.get(pk=memory_id), similarity


def memory_prompt_section(hits: list[Hit]) -> str:
    """What an agent remembers, as a section of its system prompt."""
    return "\n".join(f"- ({hit.memory.type}) {hit.memory.content}" for hit in hits)


MAX_FINDINGS = 20
FINDING_CHARS = 300


# The findings of a run so far (SPEC §2, execution context): the shared knowledge its agents added
# (``knowledge_contribute``, ``memory_store`` with ``shared``, or a consolidation merging into a shared
# memory), the latest ``MAX_FINDINGS`` in the order added, as a JSON array of [content, agent] (NULL for
# none). A column of a new session's reads (agents_app.execution.session), with parameters %(team)s and
# %(run)s; :func:`run_findings` makes their text.
FINDINGS_SQL = f"""SELECT json_agg(json_build_array(content, source_agent) ORDER BY created_at, id)::text
FROM (SELECT content, source_agent, created_at, id FROM memory_app_memory
      WHERE team_id = %(team)s AND run_id = %(run)s AND shared AND superseded_by_id IS NULL
      ORDER BY created_at DESC, id DESC LIMIT {MAX_FINDINGS}) latest"""


def run_findings(found: str | None) -> list[str]:
    """The findings :data:`FINDINGS_SQL` read, each cut to ``FINDING_CHARS`` characters and naming the agent
    that added it."""
    findings = []
    for content, agent in json.loads(found) if found else []:
        text = " ".join(content.split())
        if len(text) > FINDING_CHARS:
            text = text[:FINDING_CHARS - 1].rstrip() + "…"
        findings.append(f"{text} (from {agent})" if agent else text)
    return findings
