"""Forks: a new run that starts from an event of any run, finished or still going (issue 19 §5, SPEC §9).

The fork point is an event of the parent run, by its ``seq``. The fork gets,
as they were once that event was written:

- every agent's work: the activations queued by then; a session that had
  ended ``ok`` is kept as done; any other session is restored from its
  checkpoints up to that event (its ``SessionEntry`` rows with ``event_seq``
  at most the fork point, its counters as that last checkpoint stored them)
  and resumed by a worker like a session whose worker died; an activation
  with no checkpoint by then starts afresh;
- the workspace files (``WorkspaceFileVersion``, agents_app.execution.filehistory);
- the run's pub/sub channels: the messages published by then and each subscriber's ack
  (memory_app.board.channels_restore);
- the scripted provider's positions (from the restored checkpoints).

Options: ``versions`` pins other definition versions (as ``run_start``);
``tool_result`` replaces, in the restored history, the result of the tool
call the fork point names (a ``tool_call`` or ``tool_result`` event). The
parent run is only read. What is not restored: the run's blackboard and
memories (shared state outside the run's sessions), and the parent's events
(the fork's log starts with its own ``run_start``).

A workflow run's fork is rebuilt by the workflow app (``RUN_HOOKS.run_fork``,
workflows_app.forks): the steps settled by the fork point are kept with their
outputs, and the steps in progress then are restored by :func:`sessions_restore`
(the one restoring code of both) and resume from their checkpoints.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from mas_core.definitions.kinds import KINDS_BY_NAME
from mas_core.eventlog import event_append
from agents_app.execution.filehistory import file_version_keep, files_at, history_gap
from agents_app.execution.agents import agent_resolve
from agents_app.execution.errors import RunError
from agents_app.execution.hooks import RUN_HOOKS
from agents_app.scheduler import dispatch_later
from agents_app.models import Activation, DefinitionVersion, Event, Run, Session, SessionEntry, WorkspaceFile
from memory_app.board import BoardError, channels_restore
from agents_app.models.runs import ActivationStatus, RunStatus, SessionStatus

logger = logging.getLogger(__name__)

TOOL_RESULT_MAX_CHARS = 100_000
MAX_PINS = 20
MAX_ACTIVATIONS = 1_000  # agents restored in one fork
PIN_KEY = re.compile(r"^(agent|tool|mcp|skill):[a-z0-9][a-z0-9_-]{0,99}$")
TOOL_EVENTS = ("tool_call", "tool_result")


class ForkError(RunError):
    """The fork cannot start from that point (422); ``field`` names the input at fault."""

    def __init__(self, message: str, *, field: str = "seq") -> None:
        super().__init__(message)
        self.field = field


def _bad_versions(message: str) -> ForkError:
    return ForkError(message, field="versions")


def _bad_result(message: str) -> ForkError:
    return ForkError(message, field="tool_result")


@dataclass
class Restored:
    activation: Activation
    session: Session | None
    entries: list[SessionEntry]


def run_fork(*, run: Run, seq: int, user=None, versions: dict[str, int] | None = None,
             tool_result: str | None = None) -> Run:
    """Start a new run from event ``seq`` of ``run``; returns the fork.

    A run still queued, running or waiting is forked from its committed history: the parent's row is
    locked while the fork reads it, so its writers (events and checkpoints go out in one statement that
    updates that row) wait, and everything numbered up to ``seq`` is on disk; the parent then goes on
    untouched. A checkpoint its session had not written yet by then is not in the fork, which resumes
    that session from its checkpoint before, as after a worker's death. Raises :class:`ForkError` for a
    point that cannot be forked from (no such event, a ``tool_result`` for an event that is not a tool
    call, unknown versions, a history not kept that far).
    """
    with transaction.atomic():
        parent = Run.objects.select_for_update().get(pk=run.pk, team_id=run.team_id)
        event = _point_check(parent, seq=seq, tool_result=tool_result)
        pins = _pins_check(parent, versions or {})
        fork = Run(
            team_id=parent.team_id, agent=parent.agent, workflow=parent.workflow, input=parent.input,
            limits=parent.limits, budget=parent.budget, provider=parent.provider, script=parent.script,
            approvals=parent.approvals, guardrails=parent.guardrails, versions={**parent.versions, **pins},
            is_eval=parent.is_eval,
            forked_from=parent, fork_seq=seq, created_by=user if getattr(user, "pk", None) else None,
            status=RunStatus.QUEUED,
        )
        if not parent.workflow:
            agent_resolve(run=fork, slug=parent.agent)  # still there, at the versions asked for
        fork.save(force_insert=True)
        start = event_append(run_id=fork.id, type="run_start", agent=fork.agent, data={
            **({"workflow": fork.workflow} if fork.workflow else {"agent": fork.agent}), "input": fork.input,
            "limits": fork.limits, "budget": fork.budget,
            "forked_from": str(parent.id), "fork_seq": seq, **({"versions": pins} if pins else {}),
            **({"tool_result": {"event": seq, "id": event.data.get("id"), "chars": len(tool_result)}}
               if tool_result is not None else {}),
        })
        base = start["seq"]
        restored: list[Restored] = []
        edit = (event, tool_result) if tool_result is not None else None
        positions = RUN_HOOKS.run_fork(parent=parent, fork=fork, seq=seq, base=base, edit=edit)  # None: no workflow
        if positions is None:
            if parent.workflow:
                raise ForkError(f"run {parent.id} is a run of workflow {parent.workflow}, and no workflow app is "
                                "installed to fork it")
            restored = sessions_restore(parent=parent, fork=fork, seq=seq, base=base, edit=edit)
            positions = positions_of(restored)
        files = files_at(run_id=parent.id, seq=seq)
        WorkspaceFile.objects.bulk_create(
            WorkspaceFile(run=fork, path=path, content=content, author="fork") for path, content in files.items())
        file_version_keep(run_id=fork.id, seq=base, files=dict(files))
        try:
            channels = channels_restore(parent_id=parent.id, fork_id=fork.id, seq=seq)
        except BoardError as error:
            raise ForkError(f"run {parent.id} had {error}") from None
        fork.script_cursor = positions
        fork.save(update_fields=["script_cursor"])
        logger.info("run forked", extra={"run": str(parent.id), "fork": str(fork.id), "seq": seq,
                                         "workflow": parent.workflow, "activations": len(restored),
                                         "files": len(files), "channels": len(channels)})
        transaction.on_commit(lambda: dispatch_later(run_id=fork.id))
    return fork


# -- checks ---------------------------------------------------------------------------------


def _point_check(parent: Run, *, seq: int, tool_result: str | None) -> Event:
    event = Event.objects.filter(run=parent, seq=seq).first()
    if event is None:
        raise ForkError(f"run {parent.id} has no event {seq} (its events are numbered 1 to {parent.next_seq})")
    if tool_result is not None:
        if event.type not in TOOL_EVENTS or event.session_id is None or not event.data.get("id"):
            raise _bad_result(f"event {seq} is a {event.type} event: tool_result replaces a tool call's result, so "
                            "fork from a tool_call or tool_result event")
        if len(tool_result) > TOOL_RESULT_MAX_CHARS:
            raise _bad_result(f"tool_result has {len(tool_result):,} characters; at most {TOOL_RESULT_MAX_CHARS:,}")
    if SessionEntry.objects.filter(session__run=parent, event_seq__isnull=True).exists():
        raise ForkError(f"run {parent.id} was recorded before forks existed: its checkpoints are not numbered "
                        "by event, so it cannot be forked")
    if history_gap(run_id=parent.id, seq=seq):
        raise ForkError(f"run {parent.id} kept its files' history only up to an earlier event "
                        "(MAS_WORKSPACE_HISTORY_MAX_BYTES): fork from an earlier event")
    return event


def _pins_check(parent: Run, versions: dict[str, Any]) -> dict[str, int]:
    if not isinstance(versions, dict):
        raise _bad_versions('versions: an object like {"agent:writer": 2}')
    if len(versions) > MAX_PINS:
        raise _bad_versions(f"versions: at most {MAX_PINS} pins, not {len(versions)}")
    pins: dict[str, int] = {}
    for key, number in versions.items():
        if not isinstance(key, str) or not PIN_KEY.match(key):
            raise _bad_versions(f"versions: {key!r} is not a definition key like agent:writer "
                                "(kinds: agent, tool, mcp, skill)")
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise _bad_versions(f"versions: {key} must name a version number (1 or more), not {number!r}")
        kind, slug = key.split(":", 1)
        if not DefinitionVersion.objects.filter(team_id=parent.team_id, kind=KINDS_BY_NAME[kind].name, slug=slug,
                                                number=number).exists():
            kept = sorted(DefinitionVersion.objects.filter(team_id=parent.team_id, kind=kind, slug=slug)
                          .values_list("number", flat=True)[:100])
            raise _bad_versions(f"versions: {kind} {slug!r} has no version {number} (kept versions: "
                                f"{', '.join(map(str, kept)) or 'none'})")
        pins[key] = number
    return pins


# -- what the parent was at the fork point -----------------------------------------------------


def sessions_restore(*, parent: Run, fork: Run, seq: int, base: int, edit: tuple[Event, str] | None = None,
                     roots: set[str] | None = None) -> list[Restored]:
    """Copy the parent's activations and sessions as they were at event ``seq`` into ``fork``.

    ``roots`` (the ids of activations with no parent) keeps only those and the agents under them — a workflow
    fork's steps in progress —; None restores every agent, and starts the run's root agent when none was queued
    yet. ``base`` is the fork's ``run_start``, the event its restored checkpoints are numbered with. ``edit``
    gives a tool call of a restored session another result (:class:`ForkError` when none of them made it).
    """
    queued: dict[str, None] = {}
    last_session: dict[str, str] = {}  # activation → its last session started by then
    ended: dict[str, str] = {}  # session → status, for those that had ended by then
    marks = (Event.objects.filter(run=parent, seq__lte=seq, type__in=["activation_queued", "session_start",
                                                                       "session_end"])
             .order_by("seq").values_list("type", "session_id", "data"))
    for type_, session_id, data in marks.iterator(chunk_size=500):
        if type_ == "activation_queued":
            queued[data["activation"]] = None
            if data.get("session"):  # restored by a fork with its session: forked again, that session counts
                last_session[data["activation"]] = data["session"]
            if len(queued) > MAX_ACTIVATIONS:
                raise ForkError(f"run {parent.id} had more than {MAX_ACTIVATIONS:,} agents at event {seq}: "
                                "too many to fork")
        elif type_ == "session_start":
            last_session[data["activation"]] = str(session_id)
        else:
            ended[str(session_id)] = data.get("status", "")
    activations = {str(a.id): a for a in Activation.objects.filter(run=parent, pk__in=list(queued))}
    sessions = {str(s.id): s for s in Session.objects.filter(run=parent, pk__in=list(last_session.values()))}
    edited_key = f"{edit[0].session_id}:{edit[0].data['id']}" if edit else None

    new_ids: dict[str, uuid.UUID] = {}
    session_ids: dict[str, uuid.UUID] = {}  # parent's session → fork's, for the children's call keys
    restored: list[Restored] = []
    now = timezone.now()
    for old_id in queued:
        old = activations.get(old_id)
        if old is None or old.kind == "tool":
            continue  # a custom tool's worker runs inside its caller's call, which asks for it again
        if old.parent_id is not None and str(old.parent_id) not in new_ids:
            continue  # under a worker left out
        if old.parent_id is None and roots is not None and old_id not in roots:
            continue  # a workflow's step the workflow fork keeps (or had not started) itself
        if edited_key and old.ctx.tool_call == edited_key:
            continue  # the call whose result the fork gives
        source = sessions.get(last_session.get(old_id, ""))
        entries = (list(SessionEntry.objects.filter(session=source, event_seq__lte=seq).order_by("seq"))
                   if source is not None else [])
        done = source is not None and ended.get(str(source.id)) == SessionStatus.OK
        context = old.ctx if done else old.ctx.replace(outcome=None)
        if not done and context.outputs is not None:  # a step's outputs as set by the fork point, not by its end
            context = context.replace(outputs=_outputs_at(parent, source, entries, seq=seq))
        call_key = context.tool_call
        if call_key and call_key.split(":", 1)[0] in session_ids:
            old_session, call = call_key.split(":", 1)
            context = context.replace(tool_call=f"{session_ids[old_session]}:{call}")
        activation = Activation.objects.create(
            run=fork, agent=old.agent, input=old.input, kind=old.kind,
            parent_id=new_ids[str(old.parent_id)] if old.parent_id else None, depth=old.depth,
            priority=old.priority, context=context.to_json(),
            status=ActivationStatus.DONE if done else ActivationStatus.QUEUED,
            result=source.result if done else "", attempts=source.attempt if source and (done or entries) else 0,
        )
        new_ids[old_id] = activation.id
        session = None
        if source is not None and (done or entries):
            counters = next((json.loads(e.counters) for e in reversed(entries) if e.counters), None) or {"steps": 0}
            session = Session.objects.create(
                run=fork, activation=activation, agent=source.agent, attempt=source.attempt, tier=source.tier,
                provider=source.provider, model=source.model,
                status=SessionStatus.OK if done else SessionStatus.SUSPENDED, state=counters,
                result=source.result if done else "", meta=source.meta if done else {},
                finished_at=now if done else None,
            )
            session_ids[str(source.id)] = session.id
        restored.append(Restored(activation=activation, session=session, entries=entries))
    if not restored and roots is None:  # forked before its root agent was queued: the fork starts it
        root = Activation.objects.create(run=fork, agent=fork.agent, input=fork.input, kind="root")
        restored.append(Restored(activation=root, session=None, entries=[]))
    if edit is not None:
        _edit_result(restored, session_ids, event=edit[0], text=edit[1], seq=seq)
    for item in restored:
        if item.session is not None:
            kept = {entry.seq for entry in item.entries}
            SessionEntry.objects.bulk_create(
                SessionEntry(session=item.session, seq=e.seq, kind=e.kind, payload=e.payload,
                             replaced_by=e.replaced_by if e.replaced_by in kept else None, event_seq=base,
                             counters=e.counters)
                for e in item.entries)
        _restored_events(fork, item)
    return restored


def _edit_result(restored: list[Restored], session_ids: dict[str, uuid.UUID], *, event: Event, text: str,
                 seq: int) -> None:
    """Give the tool call of ``event`` the result ``text`` in its restored session's history."""
    call_id = event.data["id"]
    target = session_ids.get(str(event.session_id))
    item = next((item for item in restored if item.session is not None and item.session.id == target), None)
    if item is None or item.session.status != SessionStatus.SUSPENDED:
        raise _bad_result(f"event {seq}: its session has no checkpoint to continue from at that point")
    in_use = [e for e in item.entries if e.kind == "message" and (e.replaced_by is None or e.replaced_by not in
                                                                   {x.seq for x in item.entries})]
    messages = [(e, json.loads(e.payload)) for e in in_use]
    for entry, message in messages:
        if message.get("role") == "tool" and message.get("tool_call_id") == call_id:
            entry.payload = json.dumps({**message, "content": text}, ensure_ascii=False)
            break
    else:
        asked = any(call.get("id") == call_id for _, message in messages if message.get("role") == "assistant"
                    for call in message.get("tool_calls") or [])
        if not asked:
            raise _bad_result(f"event {seq}: tool call {call_id} is not in its session's history at that point")
        name = event.data.get("name", "")
        next_seq = max((e.seq for e in item.entries), default=0) + 1
        item.entries.append(SessionEntry(seq=next_seq, kind="message", payload=json.dumps(
            {"role": "tool", "content": text, "tool_call_id": call_id, "name": name}, ensure_ascii=False)))
    state = dict(item.session.state)
    if call_id in (state.get("waiting") or []):  # a suspended call (delegate, approval) is answered now
        state["waiting"] = [waiting for waiting in state["waiting"] if waiting != call_id]
        item.session.state = state
        item.session.save(update_fields=["state"])


def _restored_events(fork: Run, item: Restored) -> None:
    """The fork's log says what it starts with: each agent restored, and those done by the fork point."""
    activation, session = item.activation, item.session
    event_append(run_id=fork.id, type="activation_queued", agent=activation.agent, data={
        "activation": str(activation.id), "kind": activation.kind, "priority": activation.priority,
        "parent": str(activation.parent_id) if activation.parent_id else None, "depth": activation.depth,
        "restored": True, "checkpoints": len(item.entries), "session": str(session.id) if session else None})
    if session is not None and session.status == SessionStatus.OK:
        event_append(run_id=fork.id, type="session_start", agent=session.agent, session_id=session.id, data={
            "activation": str(activation.id), "attempt": session.attempt, "tier": session.tier, "resumed": False,
            "kind": activation.kind, "depth": activation.depth, "restored": True,
            "parent": str(activation.parent_id) if activation.parent_id else None})
        event_append(run_id=fork.id, type="session_end", agent=session.agent, session_id=session.id, data={
            "status": "ok", "result": session.result[:2000], "meta": session.meta, "failure": None,
            "restored": True})


def _outputs_at(parent: Run, source: Session | None, entries: list[SessionEntry], *, seq: int) -> dict[str, Any]:
    """The outputs a step had set by event ``seq``: each set_output call of its session whose result (an event
    by then) says it was set, with the value its checkpointed call gave (an edited result does not unset it)."""
    if source is None:
        return {}
    set_ids = set(Event.objects.filter(run=parent, seq__lte=seq, session_id=source.id, type="tool_result",
                                       data__name="set_output", data__ok=True).values_list("data__id", flat=True))
    outputs: dict[str, Any] = {}
    for entry in entries:
        if entry.kind != "message":
            continue
        for call in json.loads(entry.payload).get("tool_calls") or []:
            arguments = call.get("arguments")
            if call.get("name") == "set_output" and call.get("id") in set_ids and isinstance(arguments, dict):
                outputs[str(arguments.get("name"))] = arguments.get("value")
    return outputs


def positions_of(restored: list[Restored]) -> dict[str, int]:
    """The scripted provider's positions at the fork point: the furthest any restored checkpoint had reached."""
    positions: dict[str, int] = {}
    for item in restored:
        if item.session is None:
            continue
        for key, position in (item.session.state.get("cursor") or {}).items():
            positions[key] = max(positions.get(key, 0), int(position))
    return positions
