#!/usr/bin/env python3
"""Hundreds of runs waiting for a person at once: what do they hold, and how fast do they resume when approved?

One real worker (64 task threads) and daphne. ``--runs`` runs start at once; each
agent's first turn calls ``vfs_write``, which its policy says needs approval, so
every run suspends with one pending request. While they all wait, the worker's
busy task threads are sampled (``celery inspect active``; ideal 0), with its
threads, resident memory and the database's connections. Then every request is
approved through the API (``POST /api/approvals/{id}``, 16 clients at once).

Figures:

- busy worker task threads while every run waited (max over the samples);
- per approval: the POST's round trip, and the decision (``decided_at``) -> the
  session's resumed ``session_start`` (p50 / p95);
- time from the first POST until every run has resumed, and until every run
  has finished.

    .venv/bin/python bench/approvals.py [--runs 500] [--clients 16]

Private database, queue and Redis DB as the other benches (bench/_common.py);
``MAS_BENCH_DB`` and ``MAS_BENCH_REDIS_URL`` move them.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402

SCRIPT = {"clerk": [{"tool_calls": [{"name": "vfs_write", "arguments": {"path": "note.md", "content": "ok"}}]},
                    {"text": "filed"}]}


def post(url: str, token: str, body: dict) -> tuple[int, float, datetime]:
    """POST JSON; the status, the round trip in seconds and when it was answered."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status = response.status
    except urllib.error.HTTPError as error:
        status = error.code
    return status, time.perf_counter() - started, datetime.now(UTC)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    c.say(f"approvals: {args.runs} runs waiting for approval at once, approved through the API by "
          f"{args.clients} clients")
    c.say(f"machine {c.machine()}, {c.now_utc()}, load average {c.os.getloadavg()[0]:.2f}")
    c.django_setup()
    c.say(f"database {c.BENCH_DB}: created and migrated in {c.database_create():.1f} s")
    c.redis_flush()
    from agents_app.execution.runs import run_start
    from agents_app.models import ApprovalRequest, Event, Run, Session
    from mas_core.teams import api_token_create, membership_set, user_create

    team = c.team_with_agent(slug="approvals-bench", agent="clerk",
                             frontmatter="tools: [vfs_write]\napproval: [vfs_write]\n")
    user = user_create(username="approver", password="bench-password-1")
    membership_set(team=team, user=user, role="operator")
    token = api_token_create(user=user, team=team).token
    port = c.free_port()
    daphne = c.start_daphne(port)
    worker = c.Worker(concurrency=64).start()
    try:
        started = time.perf_counter()
        ids = [run_start(team=team, agent="clerk", input=f"File note {i}", script=SCRIPT).id for i in range(args.runs)]
        c.say(f"{args.runs} runs started in {time.perf_counter() - started:.1f} s")
        deadline = time.monotonic() + 600
        while Session.objects.filter(run_id__in=ids, status="suspended").count() < args.runs:
            if time.monotonic() > deadline:
                raise SystemExit("the runs did not all suspend within 600 s")
            time.sleep(0.5)
        waiting_after = time.perf_counter() - started
        c.say(f"every run waiting for a person {waiting_after:.1f} s after the first start")
        assert Run.objects.filter(pk__in=ids, status="waiting").count() == args.runs

        from mas_project.celery import app

        inspect = app.control.inspect([worker.name], timeout=1.0)
        busy, threads, rss, backends = [], [], [], []
        for _ in range(10):
            active = inspect.active() or {}
            busy.append(sum(len(tasks) for tasks in active.values()))
            threads.append(worker.threads_now())
            rss.append(worker.rss_now())
            backends.append(c.db_backends())
            time.sleep(0.3)
        c.say(f"while {args.runs} runs waited: busy worker task threads max {max(busy)} over {len(busy)} samples "
              f"(target 0); worker OS threads {max(threads)}, RSS {c.mib(max(rss))}, database connections "
              f"{max(backends)}")

        requests = list(ApprovalRequest.objects.filter(run_id__in=ids, status="pending").values_list("id", "run_id"))
        base = f"http://127.0.0.1:{port}/api/approvals/"
        round_trips: list[float] = []
        statuses: dict[int, int] = {}
        lock = threading.Lock()

        def approve(item) -> None:
            request_id, run_id = item
            status, seconds, answered = post(base + str(request_id), token, {"decision": "approve"})
            with lock:
                statuses[status] = statuses.get(status, 0) + 1
                round_trips.append(seconds)

        first_post = datetime.now(UTC)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(approve, requests))
        posting = time.perf_counter() - t0
        c.say(f"{len(requests)} approvals posted in {posting:.1f} s; answers {statuses}")
        deadline = time.monotonic() + 600
        while Event.objects.filter(run_id__in=ids, type="session_start", data__resumed=True).count() < args.runs:
            if time.monotonic() > deadline:
                raise SystemExit("not every run resumed within 600 s")
            time.sleep(0.2)
        resumed = dict(Event.objects.filter(run_id__in=ids, type="session_start", data__resumed=True)
                       .values_list("run_id", "created_at"))
        all_resumed = (max(resumed.values()) - first_post).total_seconds()
        done = c.runs_wait(ids, timeout=600)
        all_done = (max(run.finished_at for run in done) - first_post).total_seconds()
        # Both stamped where they happened: the decision in the web process, the resumption on the worker.
        decided_at = dict(ApprovalRequest.objects.filter(run_id__in=ids).values_list("run_id", "decided_at"))
        to_resume = [(resumed[run_id] - decided_at[run_id]).total_seconds() for run_id in resumed]
        c.say("")
        c.say(f"approval POST round trip: {c.summary_ms(round_trips)}")
        c.say(f"decision recorded -> session resumed on the worker: {c.summary_ms(to_resume)}")
        c.say(f"first approval posted -> every run resumed: {all_resumed:.1f} s; -> every run finished: "
              f"{all_done:.1f} s")
        c.say(f"busy worker task threads while waiting: {max(busy)} (target 0)")
    finally:
        worker.stop()
        daphne.terminate()
        daphne.wait(20)
    c.database_drop()
    c.redis_flush()


if __name__ == "__main__":
    main()
