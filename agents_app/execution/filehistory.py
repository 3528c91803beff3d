"""Versions of a run's workspace files, kept so a fork can restore them as they were at an event.

The session store writes a file's version in the statement that writes the
file (agents_app.execution.store); the services' writes and seeded files go
through :func:`file_version_keep`. Versions are kept while the run's
``history_bytes`` stays within ``MAS_WORKSPACE_HISTORY_MAX_BYTES``: past it
the history stops (a fork from a later event is refused), the files do not.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection

KEEP_SQL = """
WITH r AS (
  UPDATE agents_app_run SET history_bytes = history_bytes + %(bytes)s WHERE id = %(run)s::uuid
  RETURNING history_bytes AS history
)
INSERT INTO agents_app_workspacefileversion (run_id, path, seq, content)
SELECT %(run)s::uuid, x.path, %(seq)s, x.content FROM r, unnest(%(paths)s::text[], %(contents)s::text[]) AS x(path, content)
WHERE r.history <= %(history_max)s
"""


def file_version_keep(*, run_id, seq: int, files: dict[str, str | None]) -> None:
    """Keep the versions ``files`` (path → content, None: deleted) as of event ``seq`` (inside the caller's
    transaction; ``seq`` 0: before any event, as a run's seeded files)."""
    if not files:
        return
    size = sum(len(content.encode("utf-8")) for content in files.values() if content is not None)
    with connection.cursor() as cursor:
        cursor.execute(KEEP_SQL, {"run": str(run_id), "bytes": size, "seq": seq, "paths": list(files),
                                  "contents": list(files.values()),
                                  "history_max": settings.MAS_WORKSPACE_HISTORY_MAX_BYTES})


def files_at(*, run_id, seq: int) -> dict[str, str]:
    """The run's files as they were once event ``seq`` was written (path → content)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT ON (path) path, content FROM agents_app_workspacefileversion "
            "WHERE run_id = %s AND seq <= %s ORDER BY path, seq DESC, id DESC", [str(run_id), seq])
        return {path: content for path, content in cursor.fetchall() if content is not None}


def history_gap(*, run_id, seq: int) -> bool:
    """True when some file change up to event ``seq`` has no kept version (the history stopped before it)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM agents_app_event WHERE run_id = %(run)s AND type = 'file_change' "
            "AND seq <= %(seq)s) > (SELECT count(*) FROM agents_app_workspacefileversion WHERE run_id = %(run)s "
            "AND seq BETWEEN 1 AND %(seq)s)", {"run": str(run_id), "seq": seq})
        return cursor.fetchone()[0]
