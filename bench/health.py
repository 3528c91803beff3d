#!/usr/bin/env python3
"""How long ``GET /api/health`` takes, as `make demo` serves it: daphne and one real worker.

The bench database and Redis database (see _common.py); daphne with the
embedding model warmed (as `make demo` starts it) and one Celery worker on the
bench queue. After 10 warm-up calls, N calls one after another over one
keep-alive-less HTTP connection each (as a monitoring probe makes them);
prints p50/p95/max of the whole request and, from the report itself, the
median time of each check.

    .venv/bin/python bench/health.py [--calls 100]

The same script measured the code before the heartbeat (a Celery ping per
request) and after it: run it in each checkout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c


def call(url: str) -> tuple[float, int, dict]:
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            status, body = response.status, json.load(response)
    except urllib.error.HTTPError as error:
        status, body = error.code, json.load(error)
    return time.perf_counter() - started, status, body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    c.say(f"# bench/health.py — {c.now_utc()} on {c.machine()}, load average {open('/proc/loadavg').read().split()[0]}")
    c.database_create()
    c.redis_flush()
    c.django_setup()
    worker = c.Worker(concurrency=8).start()
    port = c.free_port()
    c.ENV["MAS_WARM_EMBEDDINGS"] = "1"  # as `make demo` starts daphne
    try:
        web = c.start_daphne(port)
    except BaseException:
        worker.stop()
        raise
    url = f"http://127.0.0.1:{port}/api/health"
    try:
        deadline = time.monotonic() + 120
        while True:  # until the worker is seen and the model loaded
            try:
                _, status, _ = call(url)
            except (urllib.error.URLError, OSError):
                status = None
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        for _ in range(10):
            call(url)
        times, statuses, checks = [], [], {}
        for _ in range(args.calls):
            seconds, status, body = call(url)
            times.append(seconds)
            statuses.append(status)
            for name, check in body["checks"].items():
                checks.setdefault(name, []).append(check["ms"])
        c.say(f"GET /api/health × {args.calls}: {c.summary_ms(times)}, max {max(times) * 1000:.1f} ms; "
              f"statuses {sorted(set(statuses))}")
        for name, values in checks.items():
            c.say(f"  {name:<11} median {statistics.median(values):.1f} ms, max {max(values):.1f} ms")
    finally:
        web.terminate()
        try:
            web.wait(30)
        except subprocess.TimeoutExpired:
            web.kill()
            web.wait(10)
        worker.stop()
        c.redis_flush()
        c.database_drop()


if __name__ == "__main__":
    main()
