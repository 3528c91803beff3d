#!/usr/bin/env python3
"""What a change of the schema costs or saves a step in PostgreSQL's CPU, alternated in one process.

``kernel_overhead.py`` runs each tree in a process of its own, minutes apart: on a shared VM its figures move
by 20-40 % between runs of one tree, more than most schema changes. Here one process runs ``--runs`` runs of
``--steps`` tool steps through the real worker path (``step_instructions.py``'s: a ``WorkerLoop`` on this
process's session loop, its writes to PostgreSQL, its pushes to Redis), as the schema is and with
``--variant`` applied, in turns (ABBA...), ``--rounds`` times each, and prints PostgreSQL's CPU per step
(postmaster and backends, from /proc) and the worker's, per round and their medians.

Variants (each the other side of a choice made, to check it again):

- ``fk``: the foreign keys the step's tables no longer have (``db_constraint=False``: events, history
  entries, workspace files, file versions), added back as before (deferred, checked at commit).
- ``event-session-index``: the events' ``session_id`` index dropped.

    .venv/bin/python bench/step_schema.py [--variant fk] [--rounds 8] [--runs 8] [--steps 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import step_instructions as si  # noqa: E402

FOREIGN_KEYS = [  # table, column, the table it points at
    ("agents_app_event", "run_id", "agents_app_run"), ("agents_app_event", "session_id", "agents_app_session"),
    ("agents_app_sessionentry", "session_id", "agents_app_session"),
    ("agents_app_workspacefile", "run_id", "agents_app_run"),
    ("agents_app_workspacefile", "session_id", "agents_app_session"),
    ("agents_app_workspacefileversion", "run_id", "agents_app_run"),
]
VARIANTS = {
    "fk": (
        "foreign keys checked at commit",
        [f"ALTER TABLE {table} ADD CONSTRAINT bench_{table}_{column} FOREIGN KEY ({column}) REFERENCES {to} (id) "
         "DEFERRABLE INITIALLY DEFERRED NOT VALID" for table, column, to in FOREIGN_KEYS],
        [f"ALTER TABLE {table} DROP CONSTRAINT bench_{table}_{column}" for table, column, _ in FOREIGN_KEYS],
    ),
    "event-session-index": (
        "no index on the events' session_id",
        ["DROP INDEX agents_app_event_session_id_df739db3"],
        ["CREATE INDEX agents_app_event_session_id_df739db3 ON agents_app_event (session_id)"],
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="fk")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    label, apply, undo = VARIANTS[args.variant]
    os.environ.update(si.QUIET | {"MAS_LIVE_EVENT_DELAY_MS": "20"})  # the live writes as in a worker
    c.say(f"step_schema: the schema as it is against '{label}', {args.rounds} rounds each alternated, "
          f"{args.runs} runs of {args.steps} tool steps a round")
    c.say(f"machine {c.machine()}, {c.now_utc()}, load average {os.getloadavg()[0]:.2f}")
    c.django_setup()
    from django.db import connection

    def ddl(statements: list[str]) -> None:
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
        connection.close()

    c.say(f"database {c.BENCH_DB}: created and migrated in {c.database_create():.1f} s")
    c.redis_flush()
    steps = args.runs * args.steps
    figures: dict[str, list[tuple[float, float]]] = {"as it is": [], label: []}
    try:
        c.team_with_agent(slug="bench-instructions", agent=si.AGENT,
                          frontmatter=f"limits:\n  max_steps: {args.steps + 5}\n")
        si.child_worker(3, args.steps)  # warm: imports, connections, prepared statements
        for round_ in range(args.rounds):
            for side in (("as it is", label) if round_ % 2 == 0 else (label, "as it is")):
                if side == label:
                    ddl(apply)
                pg, cpu = c.pg_cpu_seconds(), time.process_time()
                si.child_worker(args.runs, args.steps)
                figures[side].append(((c.pg_cpu_seconds() - pg) / steps * 1000,
                                      (time.process_time() - cpu) / steps * 1000))
                if side == label:
                    ddl(undo)
    finally:
        c.database_drop()
        c.redis_flush()
    c.say("\nCPU per step, ms (PostgreSQL: postmaster and backends; this process: the worker's loop, its database "
          "threads and the main thread waiting):")
    for side, rows in figures.items():
        c.say(f"  {side:<36} PostgreSQL {' '.join(f'{pg:.2f}' for pg, _ in rows)} "
              f"(median {statistics.median(pg for pg, _ in rows):.2f}); "
              f"worker median {statistics.median(w for _, w in rows):.2f}")
    lower = sum(a[0] < b[0] for a, b in zip(figures["as it is"], figures[label]))
    c.say(f"  PostgreSQL lower as it is in {lower} of {args.rounds} rounds")


if __name__ == "__main__":
    main()
