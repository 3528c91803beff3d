"""What both benchmarks share: a private database, queue and Redis DB, real worker processes.

Nothing here touches the developer's demo data. Before Django is imported the
environment is pointed at

- the database ``mas_bench`` on the same PostgreSQL server (embedded under
  var/pgdata unless DATABASE_URL is set), dropped and migrated afresh by
  :func:`database_create` and dropped again by :func:`database_drop`;
- the Celery queue ``mas-bench`` and Redis database 8 (broker, results and
  the Channels layer, prefix ``mas-bench``), flushed before and after;
- a temporary folder for the definitions' markdown mirror.

Workers are real ``celery worker`` processes started by :class:`Worker` with
the environment above; their resident memory (with children) is sampled
every 100 ms.
"""

from __future__ import annotations

import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DB = os.environ.get("MAS_BENCH_DB", "mas_bench")
BENCH_QUEUE = "mas-bench"
_redis_base = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0").rsplit("/", 1)[0]
# Not 9-15: the test suite's (mas_project/settings_test.py), which a bench run beside it would flush.
BENCH_REDIS_URL = os.environ.get("MAS_BENCH_REDIS_URL", _redis_base + "/8")

ENV = {
    "DJANGO_SETTINGS_MODULE": "mas_project.settings",
    "MAS_DATABASE_NAME": BENCH_DB,
    "MAS_CELERY_QUEUE": BENCH_QUEUE,
    "REDIS_URL": BENCH_REDIS_URL,
    "CELERY_BROKER_URL": BENCH_REDIS_URL,
    "CELERY_RESULT_BACKEND": BENCH_REDIS_URL,
    "CHANNELS_REDIS_URL": BENCH_REDIS_URL,
    "MAS_CHANNELS_PREFIX": "mas-bench",
    "MAS_DEFS_ROOT": tempfile.mkdtemp(prefix="mas-bench-defs-"),
    "MAS_LOG_LEVEL": "WARNING",
    "MAS_WARM_EMBEDDINGS": "0",
    "DJANGO_DEBUG": "0",  # as in production: no per-query log in the worker
}
os.environ.update(ENV)
sys.path.insert(0, str(ROOT))


def say(message: str) -> None:
    print(message, flush=True)


def machine() -> str:
    return f"{platform.node()} ({os.cpu_count()} cores, Python {platform.python_version()})"


def now_utc() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def summary_ms(values_s: list[float]) -> str:
    ms = [v * 1000 for v in values_s]
    return (f"p50 {percentile(ms, 50):.1f} ms, p95 {percentile(ms, 95):.1f} ms, "
            f"mean {statistics.fmean(ms):.1f} ms (n={len(ms)})")


# -- the private database and Redis DB ---------------------------------------------


def _conn_params(dbname: str) -> dict:
    from django.db import connection

    conn_params = {**connection.get_connection_params(), "dbname": dbname}
    for django_only in ("cursor_factory", "context", "prepare_threshold"):  # psycopg's, not libpq's
        conn_params.pop(django_only, None)
    return conn_params


def conninfo(*, dbname: str) -> str:
    """A libpq connection string for ``dbname`` on the project's PostgreSQL server."""
    import psycopg

    return psycopg.conninfo.make_conninfo(**{k: v for k, v in _conn_params(dbname).items() if v not in (None, "")})


def admin_query(sql: str, params=None, *, dbname: str = "postgres"):
    """Run SQL on the server of the project's settings (the ``postgres`` maintenance database by default)."""
    import psycopg

    with psycopg.connect(**_conn_params(dbname), autocommit=True) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else None


def database_create() -> float:
    """Drop and re-create ``mas_bench``, migrate it in a subprocess; returns seconds taken."""
    started = time.monotonic()
    admin_query(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
    admin_query(f'CREATE DATABASE "{BENCH_DB}"')
    result = subprocess.run([sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"], cwd=ROOT,
                            env={**os.environ, **ENV}, capture_output=True, text=True, check=False)
    if result.returncode:
        raise SystemExit(f"migrate of {BENCH_DB} failed:\n{result.stdout}\n{result.stderr}")
    return time.monotonic() - started


def database_drop() -> None:
    from django.db import connections

    connections.close_all()
    admin_query(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
    shutil.rmtree(ENV["MAS_DEFS_ROOT"], ignore_errors=True)


def redis_flush() -> None:
    import redis

    client = redis.Redis.from_url(BENCH_REDIS_URL)
    client.flushdb()
    client.close()


def server_settings() -> dict[str, str]:
    names = ["max_connections", "shared_buffers", "synchronous_commit", "server_version"]
    return {name: admin_query(f"SHOW {name}")[0][0] for name in names}


def db_counters() -> dict[str, int]:
    """Commits and row writes of the bench database (pg_stat_database), after the stats flush."""
    time.sleep(1.2)  # backends flush their statistics about once a second when idle
    row = admin_query(
        "SELECT xact_commit, tup_inserted, tup_updated, tup_fetched FROM pg_stat_database WHERE datname = %s",
        [BENCH_DB],
    )[0]
    return dict(zip(["commits", "inserted", "updated", "fetched"], row))


def pg_cpu_seconds() -> float:
    """CPU seconds of the PostgreSQL server so far: postmaster, live and exited backends."""
    import psutil

    data_dir = admin_query("SHOW data_directory")[0][0]
    postmaster = psutil.Process(int((Path(data_dir) / "postmaster.pid").read_text().split()[0]))
    times = postmaster.cpu_times()
    total = times.user + times.system + times.children_user + times.children_system
    for child in postmaster.children():
        try:
            child_times = child.cpu_times()
        except psutil.Error:
            continue
        total += child_times.user + child_times.system
    return total


def db_backends() -> int:
    return admin_query("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [BENCH_DB])[0][0]


# -- Django in this process ------------------------------------------------------------


def django_setup() -> None:
    import django

    django.setup()


def team_with_agent(*, slug: str, agent: str, frontmatter: str = "") -> object:
    from agents_app.kinds import AGENT
    from mas_core.definitions.services import definition_parse, definition_save
    from mas_core.teams import team_create

    team = team_create(slug=slug, name=slug, defs_dir=str(Path(ENV["MAS_DEFS_ROOT"]) / slug))
    text = f"---\nname: {agent}\n{frontmatter}---\n\nYou work.\n"
    definition_save(kind=AGENT, team=team, parsed=definition_parse(kind=AGENT, team=team, text=text))
    return team


def member_token(team, *, username: str, role: str = "operator") -> str:
    """An API token of a new member of ``team`` with ``role``."""
    from mas_core.teams import api_token_create, membership_set, user_create

    user = user_create(username=username)
    membership_set(team=team, user=user, role=role)
    return api_token_create(user=user, team=team, role=role).token


def runs_wait(run_ids: list, *, timeout: float) -> list:
    from agents_app.models import Run

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        open_runs = Run.objects.filter(pk__in=run_ids).exclude(status__in=["succeeded", "failed", "cancelled"])
        if not open_runs.exists():
            break
        time.sleep(0.1)
    runs = list(Run.objects.filter(pk__in=run_ids))
    unfinished = [r for r in runs if r.status not in {"succeeded", "failed", "cancelled"}]
    if unfinished:
        raise SystemExit(f"{len(unfinished)} of {len(runs)} runs still running after {timeout:.0f} s")
    failed = [r for r in runs if r.status != "succeeded"]
    if failed:
        raise SystemExit(f"{len(failed)} runs did not succeed, e.g. {failed[0].id}: {failed[0].error}")
    return runs


# -- worker processes ----------------------------------------------------------------------


@dataclass
class Worker:
    """A real ``celery worker`` on the bench queue; peak RSS sampled while it lives."""

    concurrency: int
    db_threads: int = 12
    pool: str = "threads"
    name: str = field(default_factory=lambda: f"bench-{os.getpid()}-{time.monotonic_ns()}@localhost")
    process: subprocess.Popen | None = None
    peak_rss: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _sampler: threading.Thread | None = None

    def argv(self) -> list[str]:
        return ["celery", "-A", "mas_project", "worker", "-Q", BENCH_QUEUE, "--pool", self.pool,
                "--concurrency", str(self.concurrency), "-n", self.name, "-l", "warning",
                "--without-gossip", "--without-mingle", "--without-heartbeat"]

    def command_line(self) -> str:
        return f"MAS_DB_THREADS={self.db_threads} " + " ".join(self.argv())

    def start(self, timeout: float = 60) -> Worker:
        from mas_project.celery import app

        log_dir = ROOT / "var" / "log"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / "bench-worker.log"
        self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._log = log = open(self.log_path, "ab")  # noqa: SIM115 - the worker writes to it for its whole life
        self.process = subprocess.Popen(
            [sys.executable, "-m", *self.argv()], cwd=ROOT,
            env={**os.environ, **ENV, "MAS_DB_THREADS": str(self.db_threads)},
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"celery worker exited with {self.process.returncode}; see {self.log_path}")
            if app.control.ping(destination=[self.name], timeout=0.5):
                break
        else:
            self.stop()
            raise SystemExit(f"celery worker did not answer within {timeout:.0f} s; see {self.log_path}")
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()
        return self

    def _sample(self) -> None:
        import psutil

        root = psutil.Process(self.process.pid)
        while not self._stop.is_set():
            try:
                rss = sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
            except psutil.Error:
                break
            self.peak_rss = max(self.peak_rss, rss)
            time.sleep(0.1)

    def rss_now(self) -> int:
        import psutil

        root = psutil.Process(self.process.pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])

    def threads_now(self) -> int:
        import psutil

        return psutil.Process(self.process.pid).num_threads()

    def log_count(self, text: str) -> int:
        """How often ``text`` appears in what this worker logged (e.g. "event push failed")."""
        with open(self.log_path, "rb") as log:
            log.seek(self.log_offset)
            return log.read().decode("utf-8", "replace").count(text)

    def cpu_seconds(self) -> float:
        import psutil

        times = psutil.Process(self.process.pid).cpu_times()
        return times.user + times.system

    def reset_peak(self) -> None:
        """Start measuring: peak RSS from now, CPU seconds from now."""
        self.peak_rss = self.rss_now()
        self.cpu_start = self.cpu_seconds()

    def cpu_used(self) -> float:
        return self.cpu_seconds() - self.cpu_start

    def stop(self) -> None:
        self._stop.set()
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        if getattr(self, "_log", None) is not None:
            self._log.close()


def mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


# -- the web server -----------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_daphne(port: int) -> subprocess.Popen:
    """daphne serving the project on the bench database (log: var/log/bench-daphne.log)."""
    log = open(ROOT / "var" / "log" / "bench-daphne.log", "ab")  # noqa: SIM115
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "mas_project.asgi:application"],
        cwd=ROOT, env={**os.environ, **ENV}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return process
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("daphne did not start; see var/log/bench-daphne.log")
