"""Reading definitions: team-scoped lookups and how a row compares with its file."""

from __future__ import annotations

from django.http import Http404

from mas_core.definitions import storage
from mas_core.definitions.kinds import Kind
from mas_core.definitions.sync import sync_action
from mas_core.models import Definition, Team

# What sync_markdown would do, as a status of the row; labels for people.
SYNC_STATUS_LABELS: dict[str, str] = {
    "in_sync": "in sync",
    "file_missing": "file missing (export pending)",
    "deleted_on_disk": "deleted on disk (kept; `sync_markdown --export` writes it again)",
    "db_changed": "changed in the database (export pending)",
    "disk_changed": "changed on disk (import pending)",
    "conflict": "conflict: changed in the database and on disk",
}


def definition_get(*, kind: Kind, team: Team, slug: str, lock: bool = False) -> Definition:
    """The ``kind`` definition ``slug`` of ``team``; 404 when it does not exist *in this team*."""
    rows = kind.model.objects.filter(team=team, slug=slug)
    row = (rows.select_for_update() if lock else rows).first()
    if row is None:
        raise Http404(f"no {kind.label.lower()} {slug!r}")
    return row


def definition_sync_status(*, kind: Kind, row: Definition) -> str:
    """The row compared with its markdown file, by the hashes ``sync_markdown`` keeps."""
    on_disk = storage.read_item(kind, storage.team_defs_dir(row.team), row.slug)
    action = sync_action(
        file_hash=on_disk.hash if on_disk else None, row_hash=row.content_hash, synced_hash=row.synced_hash
    )
    return {
        "unchanged": "in_sync",
        "import": "disk_changed",
        "export": "file_missing" if on_disk is None else "db_changed",
        "deleted": "deleted_on_disk",
        "conflict": "conflict",
    }[action]
