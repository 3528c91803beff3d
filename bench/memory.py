#!/usr/bin/env python3
"""Memory in pgvector: embedding throughput, inserts, filtered search latency, recall and rows returned.

1. embeddings: ``mas_core.embeddings.embed`` against sentence-transformers'
   ``encode`` called directly on the same model and batch (the ratio is the
   engine's overhead);
2. inserts: ``memory_store`` one by one (embedding included) and bulk rows
   with vectors already made;
3. search at 10k and 100k memories across 50 agents, each query with the
   agent filter (its own + the team's shared): the vector leg as the server
   runs it (HNSW, iterative scan, exact fallback) p50/p95, recall@10 against
   exact search over the same visible rows, and rows returned (always 10);
   the full hybrid ``memory_search`` (embedding the query included) p50/p95;
4. the semantic cache: ``cache_lookup`` (embedding the request's last
   message included) over 10,000 cached answers in 200 conversations, for
   repeated requests (hits) and new ones (misses), p50/p95.

100k memories are not all embedded (~270 sentences/s here): 2,000 real
sentences are embedded and the rest are random unit vectors, which the
output says. Runs in its own database (``mas_bench``).

    .venv/bin/python bench/memory.py [--sizes 10000,100000] [--queries 200] [--cache-only]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

AGENTS = 50
REAL = 2000
K = 10
WORDS = ("river valley north pass snow bridge invoice server cache index vector model agent plan route tunnel "
         "meeting budget deploy release customer shipping warehouse comet planet recipe kettle garden").split()


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))).capitalize() + "." for _ in range(n)]


def unit(rng: random.Random, dims: int = 384) -> list[float]:
    v = [rng.gauss(0, 1) for _ in range(dims)]
    norm = sum(x * x for x in v) ** 0.5
    return [x / norm for x in v]


def fill(team_id: int, total: int, real_vectors: list[list[float]], texts: list[str], rng: random.Random) -> float:
    """Bring the team to ``total`` memories; returns rows/s of the bulk insert."""
    from memory_app.models import Memory

    have = Memory.objects.filter(team_id=team_id).count()
    rows = []
    for i in range(have, total):
        real = i < len(real_vectors)
        rows.append(Memory(team_id=team_id, agent=f"agent-{i % AGENTS}", shared=(i % 10 == 0),
                           content=texts[i] if real else f"synthetic memory {i}",
                           embedding=real_vectors[i] if real else unit(rng)))
    started = time.perf_counter()
    for start in range(0, len(rows), 2000):
        Memory.objects.bulk_create(rows[start:start + 2000])
    return len(rows) / max(time.perf_counter() - started, 1e-9)


def exact_ids(team_id: int, agent: str, vector: list[float], k: int) -> list[int]:
    from django.db import connection

    literal = "[" + ",".join(f"{x:.7g}" for x in vector) + "]"
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH visible AS MATERIALIZED (SELECT id, embedding FROM memory_app_memory WHERE team_id = %s "
            "AND superseded_by_id IS NULL AND (agent = %s OR shared)) "
            "SELECT id FROM visible ORDER BY embedding <=> %s::vector LIMIT %s", [team_id, agent, literal, k])
        return [row[0] for row in cursor.fetchall()]


def cache_section(texts: list[str], vectors: list[list[float]], queries: int,
                  conversations: int = 200, per_conversation: int = 50) -> None:
    """4. Semantic cache lookups: repeated requests hit, new ones miss; embedding the last message included."""
    from mas_core.llm_types import Message, ModelRequest
    from memory_app.cache import CachedResponse, cache_lookup, request_key
    from mas_core.embeddings import embed

    team = c.team_with_agent(slug="bench-cache", agent="agent-0")

    def request(conversation: int, text: str) -> ModelRequest:
        return ModelRequest(model="m", temperature=0, messages=[
            Message(role="system", content=f"You are agent {conversation}."), Message(role="user", content=text)])

    rows = []
    for conversation in range(conversations):
        digest = request_key(request(conversation, ""))[0]
        for j in range(per_conversation):
            index = (conversation * per_conversation + j) % len(texts)
            rows.append(CachedResponse(team_id=team.id, agent="agent-0", model="bench:m", context_digest=digest,
                                       prompt=texts[index], embedding=vectors[index], response={"text": "ok"}))
    CachedResponse.objects.bulk_create(rows, batch_size=2000)
    rng = random.Random(5)
    fresh = sentences(queries, 1234)
    times = {"hit": [], "miss": []}
    embed_times, outcomes = [], {"hit": 0, "miss": 0}
    for i in range(queries):
        conversation = rng.randrange(conversations)
        repeat = i % 2 == 0
        text = texts[(conversation * per_conversation + rng.randrange(per_conversation)) % len(texts)] if repeat \
            else fresh[i]
        started = time.perf_counter()
        embed([text])
        embed_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        found = cache_lookup(team_id=team.id, model="bench:m", request=request(conversation, text), similarity=0.96,
                             ttl_s=86400)
        kind = "hit" if repeat else "miss"
        times[kind].append(time.perf_counter() - started)
        outcomes[kind] += (found.entry is not None) == repeat
    c.say(f"[4] semantic cache, {len(rows):,} cached answers in {conversations} conversations: "
          f"lookup (embedding the last message + query) hits {c.summary_ms(times['hit'])}; "
          f"misses {c.summary_ms(times['miss'])}; of which embedding alone {c.summary_ms(embed_times)}; "
          f"expected outcome {outcomes['hit']}/{len(times['hit'])} repeats hit, "
          f"{outcomes['miss']}/{len(times['miss'])} new requests missed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--cache-only", action="store_true", help="only section 4, the semantic cache")
    args = parser.parse_args()
    c.say("memory: embeddings, inserts, filtered search in pgvector")
    c.say(f"machine {c.machine()}, {c.now_utc()}, load average {c.os.getloadavg()[0]:.2f}")
    c.django_setup()
    c.say(f"database {c.BENCH_DB}: created and migrated in {c.database_create():.1f} s; server {c.server_settings()}")
    try:
        from mas_core import embeddings
        from memory_app.selectors import _visible, _vector_leg, memory_search
        from memory_app.services import memory_store

        texts = sentences(REAL, 1)
        if args.cache_only:
            embeddings.embed(texts[:64])  # load and warm
            cache_section(texts, embeddings.embed(texts), args.queries)
            return

        # 1. embeddings
        embeddings.embed(texts[:64])  # load and warm
        model = embeddings.get_model()
        batch = texts[:1000]
        started = time.perf_counter()
        model.encode(batch, batch_size=32, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
        direct = len(batch) / (time.perf_counter() - started)
        started = time.perf_counter()
        embeddings.embed(batch)
        engine = len(batch) / (time.perf_counter() - started)
        c.say(f"\n[1] embeddings, {len(batch)} sentences, batch 32: sentence-transformers directly {direct:,.0f}/s, "
              f"engine {engine:,.0f}/s (ratio engine/direct {engine / direct:.2f})")

        # 2. inserts
        team = c.team_with_agent(slug="bench-memory", agent="agent-0")
        started = time.perf_counter()
        for text in texts[:100]:
            memory_store(team_id=team.id, agent="agent-0", content=text)
        one_by_one = 100 / (time.perf_counter() - started)
        vectors = embeddings.embed(texts)
        from memory_app.models import Memory

        Memory.objects.filter(team=team).delete()
        rng = random.Random(7)
        c.say(f"[2] inserts: memory_store one by one (embedding each) {one_by_one:,.0f}/s")

        # 3. search at each size
        for size in [int(x) for x in args.sizes.split(",")]:
            rate = fill(team.id, size, vectors, texts, rng)
            from django.db import connection

            with connection.cursor() as cursor:
                started = time.perf_counter()
                cursor.execute("ANALYZE memory_app_memory")
                cursor.execute("SELECT pg_size_pretty(pg_relation_size('memory_embedding_hnsw'))")
                index_size = cursor.fetchone()[0]
            queries = sentences(args.queries, 99)
            query_vectors = embeddings.embed(queries)
            vector_times, hybrid_times, recalls, rows = [], [], [], []
            for i, (query, vector) in enumerate(zip(queries, query_vectors)):
                agent = f"agent-{i % AGENTS}"
                where, params = _visible(team_id=team.id, agent=agent, types=None, tags=None, shared_only=False)
                started = time.perf_counter()
                found = _vector_leg(vector, where, params, K)
                vector_times.append(time.perf_counter() - started)
                truth = exact_ids(team.id, agent, vector, K)
                recalls.append(len({memory_id for memory_id, _ in found} & set(truth)) / len(truth))
                rows.append(len(found))
                started = time.perf_counter()
                hits = memory_search(team_id=team.id, agent=agent, query=query, k=K, track=False)
                hybrid_times.append(time.perf_counter() - started)
                rows.append(len(hits))
            c.say(f"[3] {size:,} memories, {AGENTS} agents (each query: one agent's own + the shared 10 %); "
                  f"{min(size, REAL):,} real sentences, the rest random unit vectors; bulk insert {rate:,.0f} rows/s; "
                  f"HNSW index {index_size}")
            c.say(f"    vector search (filtered, k={K}): {c.summary_ms(vector_times)}; "
                  f"recall@{K} vs exact {sum(recalls) / len(recalls):.3f} (min {min(recalls):.2f}); "
                  f"rows returned: min {min(rows)}, max {max(rows)} (k={K})")
            c.say(f"    hybrid memory_search (query embedding + vector + full text + RRF): "
                  f"{c.summary_ms(hybrid_times)}")
        cache_section(texts, vectors, args.queries)
    finally:
        c.database_drop()


if __name__ == "__main__":
    main()
