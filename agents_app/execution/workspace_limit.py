"""The per-run workspace limits: a run's files together, in UTF-8 bytes (``MAS_WORKSPACE_MAX_BYTES``), and
how many there are (``MAS_WORKSPACE_MAX_FILES``).

Every write of a workspace file counts the run's files after writing, in the
same transaction and while holding the run's row (each write locks it), so
two sessions writing at once cannot both pass a limit; a write that would
pass one is rolled back and the tool gets :class:`WorkspaceFull`. The count
reads every file row of the run, so the number of files also bounds what each
write costs the database (a run of 10,000 files made each of its writes read
10,000 rows: 1.3 ms of PostgreSQL's CPU).
"""

from __future__ import annotations

from django.conf import settings

from tools_app.plugin import ToolError

# The run's bytes and files.
USED_SQL = "SELECT coalesce(sum(octet_length(content)), 0), count(*) FROM agents_app_workspacefile WHERE run_id = %s"


class WorkspaceFull(ToolError):
    """A write refused because the run's workspace would pass its limit: the model reads why."""

    kind = "policy_denied"


def workspace_check(*, path: str, used: tuple[int, int], created: bool) -> None:
    """Raise :class:`WorkspaceFull` when ``used`` (the run's bytes and files with the write, :data:`USED_SQL`) is
    over a limit: its bytes, or its files when the write ``created`` one (a file already there may still be
    written when a lowered limit left the run with more)."""
    total, files = used
    most = settings.MAS_WORKSPACE_MAX_FILES
    if created and files > most:
        raise WorkspaceFull(f"{path} was not written: the run's workspace would hold {files:,} files, over its limit "
                            f"of {most:,} files (MAS_WORKSPACE_MAX_FILES). Nothing was changed; delete files first.")
    limit = settings.MAS_WORKSPACE_MAX_BYTES
    if total > limit:
        raise WorkspaceFull(f"{path} was not written: the run's workspace would hold {total:,} bytes, over its limit "
                            f"of {limit:,} bytes (MAS_WORKSPACE_MAX_BYTES). Nothing was changed; delete or shorten "
                            "files first.")
