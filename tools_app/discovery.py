"""Which tools the model is offered when an agent has many: hybrid search over names and descriptions.

Two rankings of the session's tools against the task — PostgreSQL full text
(``ts_rank_cd`` over a ``VALUES`` list, no table needed) and cosine similarity
of all-MiniLM-L6-v2 embeddings (cached per tool text in the process) — fused
by reciprocal rank fusion. Above ``MAS_TOOL_DISCOVERY_THRESHOLD`` tools a
session offers the top ``MAS_TOOL_DISCOVERY_K`` plus ``tool_search``, which
finds others and offers them from the next model turn on. Tools not offered
stay callable: offering is about what the model reads, not what it may do.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Iterable

from django.conf import settings
from django.db import connection

RRF_K = 60
# The fusion sessions use: measured on 100 tools and 100 paraphrased queries (bench/discovery.py), plain RRF
# (k 60, equal weights) let full-text matches on incidental words outvote the embeddings (top-5 0.76 against
# 0.88 for vectors alone); with the text ranking at a fifth of the weight and k 1 it is 0.88, and an exact
# word match still breaks ties among close vectors.
TOOL_RRF_K = 1
TEXT_WEIGHT = 0.2
ALWAYS_OFFERED = ("tool_search", "set_output")
_vectors: dict[str, list[float]] = {}


def _text(name: str, description: str) -> str:
    words = re.sub(r"[_\-]+", " ", name)
    return f"{words}. {description}"


def _vector(texts: list[str]) -> list[list[float]]:
    from mas_core.embeddings import embed

    keys = [hashlib.sha256(text.encode()).hexdigest() for text in texts]
    missing = [text for key, text in zip(keys, texts) if key not in _vectors]
    if missing:
        if len(_vectors) > 20_000:
            _vectors.clear()
        for text, vector in zip(missing, embed(missing)):
            _vectors[hashlib.sha256(text.encode()).hexdigest()] = vector
    return [_vectors[key] for key in keys]


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def text_ranking(query: str, tools: list[tuple[str, str]]) -> list[str]:
    """Names whose text matches any word of ``query`` (PostgreSQL full text, English), best first."""
    if not tools or not query.strip():
        return []
    values = ", ".join(["(%s, %s)"] * len(tools))
    params: list[str] = []
    for name, description in tools:
        params += [name, _text(name, description)]
    words = " | ".join(re.findall(r"[A-Za-z0-9]+", query)[:64]) or "x"
    sql = (f"SELECT name FROM (VALUES {values}) AS t(name, body), to_tsquery('english', %s) AS q "
           "WHERE to_tsvector('english', body) @@ q "
           "ORDER BY ts_rank_cd(to_tsvector('english', body), q) DESC, name")
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, words])
        return [row[0] for row in cursor.fetchall()]


def vector_ranking(query: str, tools: list[tuple[str, str]]) -> list[str]:
    if not tools or not query.strip():
        return []
    vectors = _vector([_text(name, description) for name, description in tools] + [query])
    target = vectors[-1]
    scored = sorted(((_cosine(vector, target), name) for (name, _), vector in zip(tools, vectors)), reverse=True)
    return [name for _, name in scored]


def fuse(*rankings: Iterable[str], weights: Iterable[float] | None = None, k: int = RRF_K) -> list[str]:
    """Reciprocal rank fusion: sum of weight / (k + rank) over the rankings that list a name."""
    scores: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights or [1.0] * len(rankings)):
        for rank, name in enumerate(ranking, start=1):
            scores[name] = scores.get(name, 0.0) + weight / (k + rank)
    return sorted(scores, key=lambda name: (-scores[name], name))


def rank(query: str, tools: list[tuple[str, str]]) -> list[str]:
    """Every tool name, the most relevant to ``query`` first (hybrid)."""
    fused = fuse(text_ranking(query, tools), vector_ranking(query, tools), weights=[TEXT_WEIGHT, 1.0], k=TOOL_RRF_K)
    return fused + [name for name, _ in tools if name not in fused]


def offered_names(task: str, tools: list[tuple[str, str]]) -> list[str] | None:
    """The names to offer for ``task``, or None when the agent has few enough tools to offer them all."""
    if len(tools) <= settings.MAS_TOOL_DISCOVERY_THRESHOLD:
        return None
    present = {name for name, _ in tools}
    always = [name for name in ALWAYS_OFFERED if name in present]
    ranked = [name for name in rank(task, tools) if name not in always]
    return always + ranked[: settings.MAS_TOOL_DISCOVERY_K]
