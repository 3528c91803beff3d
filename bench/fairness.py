#!/usr/bin/env python3
"""Fairness between teams: how long one team's small run waits behind another team's burst.

Team A starts ``--a-runs`` runs (1,000) of ``--a-turns`` model turns (5: four
``vfs_write`` then the answer), every turn ``latency_ms`` = ``--turn-s`` (1 s),
all created in one transaction so their activations reach the broker together
at commit. ``--b-delay-s`` (2 s) after that commit, team B starts one run of
one instant turn (a zero-latency answer). Figures per try:

- B's completion: B's ``run_start`` call .. the run's ``finished_at`` (the
  worker's clock; same machine), and B's wait: .. its ``session_start`` event;
- what B found when it started: A's root activations by status (ready =
  admitted and waiting for a worker's slot, claimed by a worker, running), A's
  sessions running, A's runs finished, and the length of the Celery queue in
  Redis (which no longer carries sessions: 0 since the scheduler);
- A's throughput: A's model turns (``llm_response`` events) ÷ (A's first
  ``session_start`` .. last ``session_end``), and A's makespan (commit .. last
  run finished).

The same A burst without B runs first and last (``--baseline-tries``, 2), for
A's throughput without B. Every try waits until all of A's runs are finished
and the broker's queue is empty before the next begins (a try that overruns
``--try-timeout-s`` has A's runs cancelled and drained), so tries do not
overlap. One worker process, as ``make demo`` runs it: ``--pool threads
--concurrency 256`` (``MAS_WORKER_CONCURRENCY``'s default; ``--concurrency``).

Runs are started with the service ``run_start``, the function ``POST
/api/runs`` calls after its rate check, so ``MAS_RUNS_PER_MIN`` (which only the
API counts) does not stop the burst; the script still raises it to 1,000,000 in
its environment and the worker's, as the issue asks, so a version of the bench
that goes through the API measures the same thing.

Default sizes: one burst of 1,000 runs x 5 turns takes about 75-80 s on the
2-core machine of bench/RESULTS.md today (about 70 steps/s; creating the runs
5 s, publishing their 1,000 messages 12-20 s), so 12 bursts would take 16
minutes: ``--budget-s`` (900) starts no try with B that would end the bench
past it, and says how many tries it ran (the last baseline still runs).
Publishing is slow enough that at +2 s most of A's messages are not in the
broker yet: B's message overtakes them (see ``broker queue`` at B's start).

    .venv/bin/python bench/fairness.py [--a-runs 1000] [--a-turns 5] [--turn-s 1.0] [--tries 10]
        [--b-delay-s 2] [--baseline-tries 2] [--concurrency 256] [--keep-db]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

os.environ["MAS_RUNS_PER_MIN"] = "1000000"  # before _common copies the environment to its workers

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

AGENT = "worker"
FINISHED = ("succeeded", "failed", "cancelled")


def script_a(turns: int, turn_s: float) -> dict:
    latency = round(turn_s * 1000)
    writes = [{"latency_ms": latency, "tool_calls": [
        {"name": "vfs_write", "arguments": {"path": f"out/{i}.md", "content": f"part {i}"}}]} for i in range(turns - 1)]
    return {AGENT: writes + [{"latency_ms": latency, "text": "done"}]}


SCRIPT_B = {AGENT: [{"text": "done"}]}
WARM_UP = {AGENT: [{"text": "warm"}]}


def broker_queued() -> int:
    """Messages waiting in the bench queue in Redis (Celery's list and its priority lists)."""
    import redis

    client = redis.Redis.from_url(c.BENCH_REDIS_URL)
    try:
        return sum(client.llen(key) for key in [c.BENCH_QUEUE] + [f"{c.BENCH_QUEUE}\x06\x16{p}" for p in (3, 6, 9)])
    finally:
        client.close()


def a_state(run_ids: list) -> dict:
    """Where A's burst stands: root activations by status, sessions running, runs finished, broker queue."""
    from django.db.models import Count

    from agents_app.models import Activation, Run, Session

    activations = dict(Activation.objects.filter(run_id__in=run_ids).values_list("status")
                       .annotate(n=Count("id")).values_list("status", "n"))
    return {
        "ready": activations.get("ready", 0),
        "dispatched": activations.get("dispatched", 0), "running": activations.get("running", 0),
        "sessions_running": Session.objects.filter(run_id__in=run_ids, status="running").count(),
        "runs_finished": Run.objects.filter(pk__in=run_ids, status__in=FINISHED).count(),
        "broker": broker_queued(),
    }


def wait_finished(run_ids: list, *, timeout: float, poll: float = 0.5) -> bool:
    from agents_app.models import Run

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Run.objects.filter(pk__in=run_ids).exclude(status__in=FINISHED).exists():
            return True
        time.sleep(poll)
    return False


def drain(run_ids: list) -> int:
    """Cancel what is left of ``run_ids`` and wait until the broker's queue is empty; returns runs cancelled."""
    from agents_app.execution.runs import run_cancel
    from agents_app.models import Run

    left = list(Run.objects.filter(pk__in=run_ids).exclude(status__in=FINISHED))
    for run in left:
        run_cancel(run=run)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (broker_queued() or not wait_finished(run_ids, timeout=1)):
        time.sleep(0.5)
    time.sleep(2)  # running sessions notice the cancel within a second
    return len(left)


def b_run(team_b) -> dict:
    """Start B's one-turn run now and wait for it; its completion and wait from the start call."""
    from django.utils import timezone

    from agents_app.execution.runs import run_start
    from agents_app.models import Event, Run

    submitted = timezone.now()
    run = run_start(team=team_b, agent=AGENT, input="one instant turn", script=SCRIPT_B)
    while Run.objects.filter(pk=run.pk).exclude(status__in=FINISHED).exists():
        time.sleep(0.1)  # the figures come from the rows' timestamps, not from this poll
    run = Run.objects.get(pk=run.pk)
    started = Event.objects.filter(run_id=run.pk, type="session_start").values_list("created_at", flat=True).first()
    # Where B's time went: each of its events (stamped when the worker emitted it) from the start call, in ms.
    timeline = [(kind, round((at - submitted).total_seconds() * 1000))
                for kind, at in Event.objects.filter(run_id=run.pk).order_by("seq").values_list("type", "created_at")]
    timeline.append(("finished_at", round((run.finished_at - submitted).total_seconds() * 1000)))
    return {"timeline": timeline, "status": run.status, "completion": (run.finished_at - submitted).total_seconds(),
            "wait": (started - submitted).total_seconds() if started else float("nan"), "finished_at": run.finished_at,
            "submitted": submitted, "started": started}


class BSide(threading.Thread):
    """``--b-delay-s`` after A's commit: what A's burst looks like, then B's run (``with_b``).

    A thread of its own, because the thread that committed A's runs is still
    publishing their messages then.
    """

    def __init__(self, team_b, args, *, with_b: bool) -> None:
        super().__init__(daemon=True)
        self.team_b, self.args, self.with_b = team_b, args, with_b
        self.result: dict = {}
        self.error: BaseException | None = None

    def start_after(self, committed: float, ids: list) -> None:
        self.committed, self.ids = committed, ids
        self.start()

    def run(self) -> None:
        from django.db import connection

        try:
            time.sleep(max(0.0, self.committed + self.args.b_delay_s - time.monotonic()))
            self.result["b_at"] = time.monotonic() - self.committed
            self.result["at_b"] = a_state(self.ids)
            if self.with_b:
                self.result["b"] = b_run(self.team_b)
        except BaseException as error:  # noqa: BLE001 - handed to the main thread
            self.error = error
        finally:
            connection.close()


def burst(team_a, team_b, args, *, with_b: bool) -> dict:
    """One try: A's burst, B's run (``with_b``) after the delay, then A to the end."""
    from django.db import transaction
    from django.utils import timezone

    from agents_app.execution.runs import run_start
    from agents_app.models import Event, Run

    script = script_a(args.a_turns, args.turn_s)
    created = time.monotonic()
    mark: dict = {}
    side = BSide(team_b, args, with_b=with_b)

    def at_commit() -> None:
        mark.update(committed=time.monotonic(), committed_at=timezone.now())
        side.start_after(mark["committed"], ids)

    with transaction.atomic():
        # Registered first, so it runs at commit before the runs' own hooks publish their activations
        # (one message each, which takes seconds for 1,000): B's clock starts at A's commit, not after.
        transaction.on_commit(at_commit)
        ids = [run_start(team=team_a, agent=AGENT, input="Wait for the model", script=script).id
               for _ in range(args.a_runs)]
    committed, committed_at = mark["committed"], mark["committed_at"]
    result: dict = {"with_b": with_b, "create_s": committed - created, "published_s": time.monotonic() - committed,
                    "load": os.getloadavg()[0]}
    side.join()
    if side.error:
        raise side.error
    result.update(side.result)
    if with_b:
        result["b"]["a_finished_before"] = Run.objects.filter(
            pk__in=ids, status__in=FINISHED, finished_at__lte=result["b"]["finished_at"]).count()
        result["b"]["a_started_while_waiting"] = Event.objects.filter(
            run_id__in=ids, type="session_start", created_at__gt=result["b"]["submitted"],
            created_at__lte=result["b"]["started"] or result["b"]["finished_at"]).count()
    done = wait_finished(ids, timeout=args.try_timeout_s)
    result["cancelled"] = 0 if done else drain(ids)
    if broker_queued():
        drain(ids)
    rows = list(Event.objects.filter(run_id__in=ids, type__in=["session_start", "session_end", "llm_response"])
                .values_list("type", "created_at"))
    starts = [at for kind, at in rows if kind == "session_start"]
    ends = [at for kind, at in rows if kind == "session_end"]
    steps = sum(1 for kind, _ in rows if kind == "llm_response")
    window = (max(ends) - min(starts)).total_seconds()
    last = max(Run.objects.filter(pk__in=ids).values_list("finished_at", flat=True))
    statuses = dict.fromkeys(FINISHED, 0)
    for status in Run.objects.filter(pk__in=ids).values_list("status", flat=True):
        statuses[status] = statuses.get(status, 0) + 1
    result.update(steps=steps, window=window, throughput=steps / window,
                  makespan=(last - committed_at).total_seconds(), statuses=statuses,
                  first_start=(min(starts) - committed_at).total_seconds(),
                  a_waits=[(at - committed_at).total_seconds() for at in starts])
    return result


def report(index: str, r: dict, args) -> None:
    s = r["at_b"]
    line = (f"  {index:>10}: A {r['steps']} turns in {r['window']:.1f} s = {r['throughput']:.1f} steps/s, "
            f"makespan {r['makespan']:.1f} s (created in {r['create_s']:.1f} s, published in {r['published_s']:.1f} s, "
            f"first session {r['first_start']:.2f} s after commit; load {r['load']:.2f}; try took {r['took']:.0f} s)")
    if r["cancelled"] or r["statuses"]["failed"]:
        line += f"; A runs {r['statuses']}, cancelled at the try's timeout {r['cancelled']}"
    c.say(line)
    c.say(f"{'':>14}A's sessions started after the commit: p50 {c.percentile(r['a_waits'], 50):.1f} s, "
          f"max {max(r['a_waits']):.1f} s")
    c.say(f"{'':>14}at +{r['b_at']:.1f} s: A activations ready {s['ready']}, claimed {s['dispatched']}, running "
          f"{s['running']}; sessions running {s['sessions_running']}; A runs finished {s['runs_finished']}; "
          f"broker queue {s['broker']}")
    if r["with_b"]:
        b = r["b"]
        c.say(f"{'':>14}B: {b['status']}, completion {b['completion']:.2f} s, waited {b['wait']:.2f} s for its "
              f"session to start, while {b['a_started_while_waiting']} of A's sessions started; "
              f"{b['a_finished_before']} of A's {args.a_runs} runs finished before it")
        c.say(f"{'':>17}B's events, ms after its start call: " + ", ".join(f"{kind} {ms}" for kind, ms in b["timeline"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a-runs", type=int, default=1000, help="team A's runs per try")
    parser.add_argument("--a-turns", type=int, default=5, help="model turns per A run")
    parser.add_argument("--turn-s", type=float, default=1.0, help="latency of each A model turn")
    parser.add_argument("--tries", type=int, default=10, help="tries with B")
    parser.add_argument("--b-delay-s", type=float, default=2.0, help="B starts this long after A's commit")
    parser.add_argument("--baseline-tries", type=int, default=2,
                        help="A's burst without B: the first before the tries, the rest after")
    parser.add_argument("--concurrency", type=int, default=256, help="Celery threads of the worker")
    parser.add_argument("--db-threads", type=int, default=12, help="MAS_DB_THREADS of the worker")
    parser.add_argument("--try-timeout-s", type=float, default=300, help="cancel A's runs still open after this")
    parser.add_argument("--budget-s", type=float, default=900,
                        help="start no try with B that would end the bench past this (0: no limit)")
    parser.add_argument("--keep-db", action="store_true", help="leave mas_bench in place for inspection")
    args = parser.parse_args()
    began = time.monotonic()
    c.say(f"fairness: team A starts {args.a_runs} runs of {args.a_turns} scripted turns of {args.turn_s:g} s "
          f"({args.a_turns - 1} x vfs_write + answer) in one transaction; {args.b_delay_s:g} s after its commit "
          f"team B starts one run of one instant turn. {args.tries} tries with B, {args.baseline_tries} without "
          f"(first and last); each try waits for all of A's runs")
    c.say(f"machine {c.machine()}, {c.now_utc()}, load average {c.os.getloadavg()[0]:.2f}")
    c.django_setup()
    c.say(f"database {c.BENCH_DB}: created and migrated in {c.database_create():.1f} s; "
          f"server {c.server_settings()}")
    c.redis_flush()
    results: list[dict] = []
    worker = None
    try:
        team_a = c.team_with_agent(slug="bench-fair-a", agent=AGENT)
        team_b = c.team_with_agent(slug="bench-fair-b", agent=AGENT)
        worker = c.Worker(concurrency=args.concurrency, db_threads=args.db_threads).start()
        c.say(f"worker: MAS_RUNS_PER_MIN={os.environ['MAS_RUNS_PER_MIN']} {worker.command_line()}")
        from agents_app.execution.runs import run_start

        c.runs_wait([run_start(team=team, agent=AGENT, input="warm-up", script=WARM_UP).id
                     for team in (team_a, team_b) for _ in range(10)], timeout=60)
        plan = ([False] if args.baseline_tries else []) + [True] * args.tries + [False] * max(0, args.baseline_tries - 1)
        counts = {True: 0, False: 0}

        def one(with_b: bool) -> None:
            counts[with_b] += 1
            started = time.monotonic()
            result = burst(team_a, team_b, args, with_b=with_b)
            result["took"] = time.monotonic() - started
            report(f"try {counts[True]}" if with_b else f"without B {counts[False]}", result, args)
            results.append(result)

        for position, with_b in enumerate(plan):
            later_baselines = plan[position + 1:].count(False)
            took = [r["took"] for r in results]
            # Leave room for this try and the baselines that come after it.
            if with_b and took and args.budget_s and (
                    time.monotonic() - began + max(took) * (1 + later_baselines) > args.budget_s):
                c.say(f"  stopping the tries with B after {counts[True]} of {args.tries}: the next would end the "
                      f"bench past --budget-s {args.budget_s:.0f} s")
                for _ in range(later_baselines):
                    one(False)
                break
            one(with_b)
    finally:
        if worker is not None:
            worker.stop()
        if not args.keep_db:
            c.database_drop()
        c.redis_flush()
    with_b = [r for r in results if r["with_b"]]
    without_b = [r for r in results if not r["with_b"]]
    c.say(f"\nsummary ({args.a_runs} A runs x {args.a_turns} turns of {args.turn_s:g} s, B after "
          f"{args.b_delay_s:g} s, worker --concurrency {args.concurrency}; bench took "
          f"{time.monotonic() - began:.0f} s)")
    if with_b:
        completion = [r["b"]["completion"] for r in with_b]
        wait = [r["b"]["wait"] for r in with_b]
        c.say(f"  B's run, completion over {len(with_b)} tries: p50 {c.percentile(completion, 50):.2f} s, "
              f"p95 {c.percentile(completion, 95):.2f} s, max {max(completion):.2f} s "
              f"(target: p95 under 1.5 s); its session waited p50 {c.percentile(wait, 50):.2f} s, "
              f"max {max(wait):.2f} s")
        c.say(f"  A's runs finished before B's: p50 {c.percentile([r['b']['a_finished_before'] for r in with_b], 50):.0f}"
              f" of {args.a_runs}; at B's start, broker queue p50 "
              f"{c.percentile([r['at_b']['broker'] for r in with_b], 50):.0f}, A activations ready p50 "
              f"{c.percentile([r['at_b']['ready'] for r in with_b], 50):.0f}, claimed p50 "
              f"{c.percentile([r['at_b']['dispatched'] for r in with_b], 50):.0f}, A sessions running p50 "
              f"{c.percentile([r['at_b']['sessions_running'] for r in with_b], 50):.0f}")
    for label, group in (("with B", with_b), ("without B", without_b)):
        if group:
            values = [r["throughput"] for r in group]
            c.say(f"  A's throughput {label}: mean {statistics.fmean(values):.1f} steps/s "
                  f"(min {min(values):.1f}, max {max(values):.1f}, n={len(values)}); makespan mean "
                  f"{statistics.fmean(r['makespan'] for r in group):.1f} s; ideal "
                  f"{min(args.a_runs, args.concurrency) / args.turn_s:.0f} steps/s "
                  f"({min(args.a_runs, args.concurrency)} sessions at once)")
    if with_b and without_b:
        ratio = statistics.fmean(r["throughput"] for r in with_b) / statistics.fmean(r["throughput"] for r in without_b)
        c.say(f"  A's throughput with B / without B: {ratio:.2f} (target: no lower than 1.00, within noise)")


if __name__ == "__main__":
    main()
