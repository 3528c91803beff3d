"""What tools ask of the kernel besides children: a custom tool's worker, an output, a workspace write.
"""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from agents_app.execution.errors import InvalidOutput
from agents_app.execution.filehistory import file_version_keep
from agents_app.execution.runs import activation_create
from agents_app.execution.workspace_limit import USED_SQL, workspace_check
from agents_app.models import Activation, ActivationContext, Run, WorkspaceFile
from agents_app.models.runs import (
    ActivationStatus,
)
from mas_core.eventlog import event_append as event_emit
from mas_core.outputs import describe, schema_text, value_errors


def tool_worker_activation(*, activation_id, tool_call_id: str, worker: dict[str, Any], prompt: str) -> Activation:
    """The activation that answers one custom tool call; the same one again after a crash."""
    with transaction.atomic():
        parent = Activation.objects.select_related("run").get(pk=activation_id)
        existing = parent.children.filter(kind="tool", context__tool_call=tool_call_id).first()
        if existing is not None:
            return existing
        run = Run.objects.select_for_update().get(pk=parent.run_id)
        child = activation_create(run=run, agent=worker["name"], input=prompt, kind="tool", parent=parent,
                                  priority=parent.priority, context=ActivationContext(worker=worker, tool_call=tool_call_id))
        # Run in the caller's process, never by the dispatcher.
        child.status, child.dispatched_at = ActivationStatus.DISPATCHED, timezone.now()
        child.save(update_fields=["status", "dispatched_at"])
    return child


def output_set(*, activation_id, name: str, value: Any) -> None:
    """Set a workflow step's named output; :class:`InvalidOutput` when the step's schema for it refuses it."""
    with transaction.atomic():
        activation = Activation.objects.select_for_update().get(pk=activation_id)
        schema = activation.ctx.output_schemas.get(name)
        errors = value_errors(schema, value) if schema is not None else []
        if errors:
            raise InvalidOutput(f"Output {name} was not set: its value does not match the output's schema:\n"
                                f"{describe(errors)}\n\nCall set_output again with a value that matches this JSON "
                                f"Schema (this is your one chance to correct it):\n{schema_text(schema)}")
        activation.ctx = activation.ctx.replace(outputs={**(activation.ctx.outputs or {}), name: value})
        activation.save(update_fields=["context"])


def workspace_write(*, run_id, path: str, content: str, agent: str, session_id) -> WorkspaceFile:
    """Write a run's file and its ``file_change`` event; WorkspaceFull when the workspace would pass its limit."""
    with transaction.atomic():
        list(Run.objects.select_for_update().filter(pk=run_id).values_list("pk"))  # one writer of the run at a time
        file, created = WorkspaceFile.objects.select_for_update().get_or_create(
            run_id=run_id, path=path,
            defaults={"content": content, "author": agent, "session_id": session_id},
        )
        if not created:
            file.content, file.author, file.session_id = content, agent, session_id
            file.version += 1
            file.save(update_fields=["content", "author", "session", "version", "updated_at"])
        changed = event_emit(run_id=run_id, type="file_change", agent=agent, session_id=session_id, data={
            "path": path, "version": file.version, "action": "created" if created else "updated",
            "bytes": len(content.encode("utf-8")),
        })
        file_version_keep(run_id=run_id, seq=changed["seq"], files={path: content})
        with connection.cursor() as cursor:
            cursor.execute(USED_SQL, [run_id])
            workspace_check(path=path, used=cursor.fetchone(), created=created)
    return file


def workspace_delete(*, run_id, path: str, agent: str, session_id) -> bool:
    with transaction.atomic():
        deleted, _ = WorkspaceFile.objects.filter(run_id=run_id, path=path).delete()
        if deleted:
            changed = event_emit(run_id=run_id, type="file_change", agent=agent, session_id=session_id,
                                 data={"path": path, "action": "deleted"})
            file_version_keep(run_id=run_id, seq=changed["seq"], files={path: None})
    return bool(deleted)
