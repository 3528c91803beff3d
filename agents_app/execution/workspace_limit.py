"""The per-run workspace limit (``MAS_WORKSPACE_MAX_BYTES``): a run's files together, in UTF-8 bytes.

Every write of a workspace file counts the run's files after writing, in the
same transaction and while holding the run's row (each write locks it), so
two sessions writing at once cannot both pass the limit; a write that would
pass it is rolled back and the tool gets :class:`WorkspaceFull`.
"""

from __future__ import annotations

from django.conf import settings

from tools_app.plugin import ToolError

USED_SQL = "SELECT coalesce(sum(octet_length(content)), 0) FROM agents_app_workspacefile WHERE run_id = %s"


class WorkspaceFull(ToolError):
    """A write refused because the run's workspace would pass its limit: the model reads why."""

    kind = "policy_denied"


def workspace_check(*, path: str, used: int) -> None:
    """Raise :class:`WorkspaceFull` when ``used`` (the run's bytes with the write) is over the limit."""
    limit = settings.MAS_WORKSPACE_MAX_BYTES
    if used > limit:
        raise WorkspaceFull(f"{path} was not written: the run's workspace would hold {used:,} bytes, over its limit "
                            f"of {limit:,} bytes (MAS_WORKSPACE_MAX_BYTES). Nothing was changed; delete or shorten "
                            "files first.")
