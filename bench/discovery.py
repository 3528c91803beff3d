#!/usr/bin/env python3
"""Tool discovery precision: 100 tool descriptions, 100 labelled queries, top-1 and top-5 hit rates.

Each query (bench/data/tools_100.json) was written for one tool, mostly in
words its description does not use ("will it rain in Lisbon" for
weather_forecast). The rankings are those of ``tools_app.discovery``: full
text (PostgreSQL ``ts_rank_cd``), vectors (all-MiniLM-L6-v2 cosine), and the
hybrid (reciprocal rank fusion) that sessions use. Needs the database server
(any database: the full-text query uses no table).

    .venv/bin/python bench/discovery.py
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mas_project.settings")


def main() -> None:
    import django

    django.setup()
    from tools_app.discovery import fuse, rank, text_ranking, vector_ranking

    data = json.loads((ROOT / "bench" / "data" / "tools_100.json").read_text())
    tools = [(tool["name"], tool["description"]) for tool in data["tools"]]
    rankers = {"full text": text_ranking, "vectors": vector_ranking, "plain RRF (k 60, equal weights)":
               lambda q, t: fuse(text_ranking(q, t), vector_ranking(q, t)), "hybrid (weighted RRF, as sessions)": rank}
    print(f"discovery: {len(tools)} tools, {len(data['queries'])} labelled queries; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    vector_ranking("warm up", tools)  # embeds and caches the tool texts once
    print("| ranking | top-1 | top-5 | ms per query |")
    print("|---|---|---|---|")
    misses = []
    for label, ranker in rankers.items():
        top1 = top5 = 0
        started = time.perf_counter()
        for item in data["queries"]:
            ranked = ranker(item["query"], tools)
            top1 += ranked[:1] == [item["tool"]]
            top5 += item["tool"] in ranked[:5]
            if label.startswith("hybrid (weighted") and item["tool"] not in ranked[:5]:
                misses.append((item["query"], item["tool"], ranked[:3]))
        per = (time.perf_counter() - started) * 1000 / len(data["queries"])
        n = len(data["queries"])
        print(f"| {label} | {top1 / n:.2f} | {top5 / n:.2f} | {per:.1f} |")
    print(f"\nhybrid misses (not in the top 5): {len(misses)}")
    for query, tool, got in misses:
        print(f"  {query!r}: wanted {tool}, got {got}")


if __name__ == "__main__":
    main()
