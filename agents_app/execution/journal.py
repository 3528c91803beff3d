"""Append-only checkpoints: a session's history as ``SessionEntry`` rows, written as it grows.

The store stages each checkpoint through a :class:`Journal`, which knows the
messages already stored (by identity, with their entry numbers): a step that
appended messages adds one ``message`` entry per new message; a history that
was rewritten (compacted) adds its new messages and one ``compaction`` entry
listing, in order, the entries it is made of — the entries it dropped are
marked ``replaced_by`` it. The digests of the tool results seen (the loop's
progress check) are appended as ``seen`` entries. :func:`journal_load` rebuilds
the history from the entries still in use. The other counters (steps, tokens,
…) are small and kept on ``Session.state``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from agents_app.kernel.loop import SessionState
from mas_core import jsontext
from mas_core.llm_types import Message


@dataclass
class Staged:
    """What one checkpoint adds: entries to insert (seq, kind, payload, replaced_by) and (seq, replaced_by)
    marks of entries stored before."""

    entries: list[tuple[int, str, str, int | None]] = field(default_factory=list)
    marks: list[tuple[int, int]] = field(default_factory=list)


class Journal:
    def __init__(self, messages: list[Message] | None = None, seqs: list[int] | None = None, *,
                 next_seq: int = 1, compaction: int | None = None) -> None:
        self.messages = list(messages or [])
        self.seqs = list(seqs or [])
        self.next_seq = next_seq
        self.compaction = compaction  # seq of the compaction entry in force, if any
        self.seen_last: str | None = None  # the last result digest stored

    def stage_seen(self, seen: list[str]) -> list[tuple[int, str, str, int | None]]:
        """Entries for the digests appended to ``seen`` since the last call (it only grows at its end)."""
        new = seen
        if self.seen_last is not None and self.seen_last in seen:
            new = seen[len(seen) - seen[::-1].index(self.seen_last):]
        entries = []
        for digest in new:
            entries.append((self.next_seq, "seen", digest, None))
            self.next_seq += 1
        if seen:
            self.seen_last = seen[-1]
        return entries

    def stage(self, messages: list[Message]) -> Staged:
        staged = Staged()
        stored = len(self.messages)
        if len(messages) >= stored and all(a is b for a, b in zip(messages, self.messages)):
            for message in messages[stored:]:
                staged.entries.append((self.next_seq, "message", jsontext.dumps(message.to_dict()), None))
                self.seqs.append(self.next_seq)
                self.next_seq += 1
            self.messages = list(messages)
            return staged
        # Rewritten (compacted): what is kept keeps its entry, what is new gets one.
        known = {id(message): seq for message, seq in zip(self.messages, self.seqs)}
        order = []
        for message in messages:
            seq = known.get(id(message))
            if seq is None:
                seq = self.next_seq
                self.next_seq += 1
                staged.entries.append((seq, "message", jsontext.dumps(message.to_dict()), None))
            order.append(seq)
        compaction = self.next_seq
        self.next_seq += 1
        staged.entries.append((compaction, "compaction", jsontext.dumps({"order": order}), None))
        kept = set(order)
        dropped = [seq for seq in self.seqs if seq not in kept]
        if self.compaction is not None:
            dropped.append(self.compaction)
        staged.marks = [(seq, compaction) for seq in dropped]
        self.messages, self.seqs, self.compaction = list(messages), order, compaction
        return staged


ENTRIES_SQL = """
SELECT seq, kind, payload FROM agents_app_sessionentry
WHERE session_id = %s AND replaced_by IS NULL AND kind IN ('message', 'compaction') ORDER BY seq
"""
SEEN_SQL = """
SELECT payload FROM (SELECT seq, payload FROM agents_app_sessionentry WHERE session_id = %s AND kind = 'seen'
                     ORDER BY seq DESC LIMIT %s) AS last ORDER BY seq
"""
SEEN_KEPT = 200  # as many as the loop keeps (agents_app.kernel.loop._record)


def journal_load(*, session_id, counters: dict[str, Any]) -> tuple[SessionState, Journal]:
    """The session's state rebuilt from its entries in use and its stored counters, and the journal that
    continues it. A checkpoint written before entries existed (``messages`` in the counters) is read as is."""
    with connection.cursor() as cursor:
        cursor.execute(ENTRIES_SQL, [session_id])
        rows = cursor.fetchall()
        cursor.execute("SELECT COALESCE(max(seq), 0) FROM agents_app_sessionentry WHERE session_id = %s",
                       [session_id])
        last = cursor.fetchone()[0]
        cursor.execute(SEEN_SQL, [session_id, SEEN_KEPT])
        seen = [row[0] for row in cursor.fetchall()]
    if "messages" in counters:  # a whole-state checkpoint: its messages are stored as entries at the next one
        state = SessionState.from_dict(counters)
        return state, Journal(next_seq=last + 1)
    messages: dict[int, Message] = {}
    compaction: tuple[int, list[int]] | None = None
    for seq, kind, payload in rows:
        data = json.loads(payload)
        if kind == "compaction":
            compaction = (seq, data["order"])
        else:
            messages[seq] = Message.from_dict(data)
    if compaction is None:
        seqs = sorted(messages)
    else:
        seqs = [*compaction[1], *sorted(seq for seq in messages if seq > compaction[0])]
    history = [messages[seq] for seq in seqs]
    state = SessionState(messages=history, **{**counters, "seen_results": seen})
    journal = Journal(history, seqs, next_seq=last + 1, compaction=compaction[0] if compaction else None)
    journal.seen_last = seen[-1] if seen else None
    return state, journal


def session_messages(*, session_id) -> list[Message]:
    """A session's history as its checkpoints hold it (for the admin, tests, replay)."""
    from agents_app.models import Session

    counters = Session.objects.filter(pk=session_id).values_list("state", flat=True).first() or {}
    counters = {key: value for key, value in counters.items() if key in SessionState.__dataclass_fields__}
    return journal_load(session_id=session_id, counters=counters)[0].messages
