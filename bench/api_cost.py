#!/usr/bin/env python3
"""What one API request costs the server: CPU of daphne and of PostgreSQL per request, one at a time.

``bench/load.py`` measures the API under a burst, where its latency is mostly
the queue of everything else the two cores do. This measures the requests
themselves: ``--requests`` POST /api/runs, then as many GET /api/runs/{id},
sent one after another to a real daphne on the bench database (no worker:
the runs stay queued), and the CPU seconds the daphne process and the
PostgreSQL server used meanwhile (from /proc), divided by the requests. CPU
time, unlike latency, hardly moves with what else the machine runs.

    .venv/bin/python bench/api_cost.py [--requests 200]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402

WARM = 20


def http(method: str, url: str, token: str, body: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body else None,
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, json.loads(response.read())


def measured(server, requests: list[tuple[str, str, dict | None]], token: str) -> tuple[float, float, float, list]:
    """CPU ms of daphne and of PostgreSQL per request, wall ms per request, and the answers."""
    import psutil

    daphne = psutil.Process(server.pid)
    cpu, pg, wall = sum(daphne.cpu_times()[:2]), c.pg_cpu_seconds(), time.perf_counter()
    answers = [http(method, url, token, body) for method, url, body in requests]
    wall = time.perf_counter() - wall
    cpu, pg = sum(daphne.cpu_times()[:2]) - cpu, c.pg_cpu_seconds() - pg
    n = len(requests)
    return cpu / n * 1000, pg / n * 1000, wall / n * 1000, answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    c.say(f"api_cost: {args.requests} POST /api/runs, then {args.requests} GET /api/runs/{{id}}, one at a time")
    c.say(f"machine {c.machine()}, {c.now_utc()}, load average {c.os.getloadavg()[0]:.2f}")
    c.django_setup()
    c.say(f"database {c.BENCH_DB}: created and migrated in {c.database_create():.1f} s")
    c.redis_flush()
    (c.ROOT / "var" / "log").mkdir(parents=True, exist_ok=True)

    team = c.team_with_agent(slug="bench-api", agent="worker")
    token = c.member_token(team, username="bench-api")
    port = c.free_port()
    base = f"http://127.0.0.1:{port}"
    c.os.environ["MAS_RUNS_PER_MIN"] = str(10 * (args.requests + WARM))  # the per-team start limit, raised
    server = c.start_daphne(port)
    body = {"agent": "worker", "input": "Write the parts", "script": {"worker": [{"text": "done"}]}}
    try:
        post = ("POST", f"{base}/api/runs", body)
        measured(server, [post] * WARM, token)
        post_cpu, post_pg, post_wall, answers = measured(server, [post] * args.requests, token)
        if any(status != 201 for status, _ in answers):
            raise SystemExit(f"a POST failed: {next(a for a in answers if a[0] != 201)}")
        gets = [("GET", f"{base}/api/runs/{payload['id']}", None) for _, payload in answers]
        measured(server, gets[:WARM], token)
        get_cpu, get_pg, get_wall, _ = measured(server, gets, token)
    finally:
        server.terminate()
        server.wait(10)
    c.say("")
    c.say(f"POST /api/runs:     daphne {post_cpu:.2f} ms + PostgreSQL {post_pg:.2f} ms of CPU per request; "
          f"{post_wall:.2f} ms each, one at a time")
    c.say(f"GET /api/runs/{{id}}: daphne {get_cpu:.2f} ms + PostgreSQL {get_pg:.2f} ms of CPU per request; "
          f"{get_wall:.2f} ms each, one at a time")
    c.database_drop()
    c.redis_flush()


if __name__ == "__main__":
    main()
