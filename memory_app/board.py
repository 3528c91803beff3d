"""A run's pub/sub channels and blackboard: rows, so they survive a worker crash and show in admin and API.

Channels number their messages (the channel row is locked while a message
takes its number); a subscriber's ``check`` returns what it has not acked
yet and acks it in the same transaction. Blackboard writes bump the key's
version and record the author.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import F

from mas_core.errors import Refused
from mas_core.eventlog import event_append
from mas_core.hooks import channel_published
from memory_app.models import BlackboardEntry, Channel, ChannelMessage, Subscription

MAX_MESSAGE_CHARS = 20_000
MAX_VALUE_CHARS = 50_000
PREVIEW_CHARS = 100


class BoardError(Refused):
    """Refused, with a message for the model."""


def _channel(run_id, name: str) -> Channel:
    name = name.strip()
    if not name or len(name) > 100:
        raise BoardError("channel: a name of 1 to 100 characters")
    channel, _ = Channel.objects.get_or_create(run_id=run_id, name=name)
    return channel


@transaction.atomic
def channel_publish(*, run_id, channel: str, sender: str, content: str, session_id=None) -> ChannelMessage:
    if not content.strip():
        raise BoardError("message: empty")
    if len(content) > MAX_MESSAGE_CHARS:
        raise BoardError(f"message: at most {MAX_MESSAGE_CHARS} characters")
    row = _channel(run_id, channel)
    Channel.objects.filter(pk=row.pk).update(next_seq=F("next_seq") + 1)
    row.refresh_from_db(fields=["next_seq"])
    message = ChannelMessage.objects.create(channel=row, seq=row.next_seq, sender=sender, content=content)
    event_append(run_id=run_id, type="channel_publish", agent=sender, session_id=session_id,
                 data={"channel": row.name, "seq": message.seq, "content": content[:2000]})
    # Workflows with ``trigger: channel`` listen here (mas_core.hooks, filled by workflows_app).
    transaction.on_commit(lambda: channel_published(run_id=run_id, channel=row.name, content=content),
                          robust=True)  # a workflow that cannot start never fails the publish
    return message


@transaction.atomic
def channel_check(*, run_id, channel: str, agent: str, session_id=None) -> list[ChannelMessage]:
    """Subscribe (if new) and take the messages not acked yet, acking them."""
    row = _channel(run_id, channel)
    subscription, _ = Subscription.objects.select_for_update().get_or_create(channel=row, agent=agent)
    pending = list(row.messages.filter(seq__gt=subscription.last_acked).order_by("seq"))
    if pending:
        subscription.last_acked = pending[-1].seq
        subscription.save(update_fields=["last_acked"])
    event_append(run_id=run_id, type="channel_subscribe", agent=agent, session_id=session_id,
                 data={"channel": row.name, "received": [m.seq for m in pending],
                       "last_acked": subscription.last_acked})
    return pending


@transaction.atomic
def blackboard_write(*, run_id, key: str, value: str, author: str, session_id=None) -> BlackboardEntry:
    key = key.strip()
    if not key or len(key) > 200:
        raise BoardError("key: 1 to 200 characters")
    if len(value) > MAX_VALUE_CHARS:
        raise BoardError(f"value: at most {MAX_VALUE_CHARS} characters")
    entry, created = BlackboardEntry.objects.select_for_update().get_or_create(
        run_id=run_id, key=key, defaults={"value": value, "author": author})
    if not created:
        entry.value, entry.author, entry.version = value, author, entry.version + 1
        entry.save(update_fields=["value", "author", "version", "updated_at"])
    event_append(run_id=run_id, type="blackboard_write", agent=author, session_id=session_id,
                 data={"key": key, "version": entry.version, "value": value[:2000]})
    return entry


def blackboard_read(*, run_id, key: str | None, agent: str, session_id=None) -> list[BlackboardEntry]:
    """One key, or every key (values cut to 100 characters when listing all)."""
    rows = BlackboardEntry.objects.filter(run_id=run_id).order_by("key")
    if key:
        rows = rows.filter(key=key.strip())
    rows = list(rows)
    with transaction.atomic():
        event_append(run_id=run_id, type="blackboard_read", agent=agent, session_id=session_id,
                     data={"key": key or None, "keys": [row.key for row in rows]})
    return rows


def board_tool_services(*, run_id, session_id, agent: str) -> dict:
    """Async callables behind ``publish``, ``subscribe``, ``blackboard_write``, ``blackboard_read``."""
    from mas_core.runner import db

    def publish(*, channel: str, message: str) -> ChannelMessage:
        return channel_publish(run_id=run_id, channel=channel, sender=agent, content=message, session_id=session_id)

    def check(*, channel: str) -> list[ChannelMessage]:
        return channel_check(run_id=run_id, channel=channel, agent=agent, session_id=session_id)

    def write(*, key: str, value: str) -> BlackboardEntry:
        return blackboard_write(run_id=run_id, key=key, value=value, author=agent, session_id=session_id)

    def read(*, key: str | None) -> list[BlackboardEntry]:
        return blackboard_read(run_id=run_id, key=key, agent=agent, session_id=session_id)

    return {"channel_publish": db(publish), "channel_check": db(check), "blackboard_write": db(write),
            "blackboard_read": db(read)}


# -- forks (agents_app.execution.forks) ----------------------------------------------------------

MAX_RESTORED_MESSAGES = 10_000  # channel messages a fork copies


def channels_restore(*, parent_id, fork_id, seq: int) -> dict[str, int]:
    """Copy the parent run's channels into the fork as they were once its event ``seq`` was written.

    A message is in when its ``channel_publish`` event is at or before ``seq`` (a message takes its number
    and its event in one transaction, the channel's row locked, so per channel these are the first N); a
    subscriber's ack is the one its last ``channel_subscribe`` by then recorded. The fork's log gets the same
    two kinds of event, marked ``restored``, so a fork of the fork rebuilds them alike; a restored message
    starts no ``trigger: channel`` workflow. Returns the messages restored per channel.
    Raises :class:`BoardError` past ``MAX_RESTORED_MESSAGES``.
    """
    from mas_core.models import Event

    published: dict[str, int] = {}
    acks: dict[tuple[str, str], int] = {}
    marks = (Event.objects.filter(run_id=parent_id, seq__lte=seq, type__in=["channel_publish", "channel_subscribe"])
             .order_by("seq").values_list("type", "agent", "data"))
    count = 0
    for type_, agent, data in marks.iterator(chunk_size=500):
        name = str(data.get("channel") or "")
        if type_ == "channel_publish":
            count += 1
            if count > MAX_RESTORED_MESSAGES:
                raise BoardError(f"more than {MAX_RESTORED_MESSAGES:,} channel messages by event {seq}: too many "
                                 "to fork")
            published[name] = max(published.get(name, 0), int(data.get("seq") or 0))
        else:
            acks[(name, agent)] = int(data.get("last_acked") or 0)
    names = sorted(set(published) | {name for name, _ in acks})
    channels = {name: Channel.objects.create(run_id=fork_id, name=name, next_seq=published.get(name, 0))
                for name in names}
    for name in names:
        if not published.get(name):
            continue
        rows = list(ChannelMessage.objects.filter(channel__run_id=parent_id, channel__name=name,
                                                  seq__lte=published[name]).order_by("seq"))
        ChannelMessage.objects.bulk_create(
            ChannelMessage(channel=channels[name], seq=row.seq, sender=row.sender, content=row.content)
            for row in rows)
        for row in rows:
            event_append(run_id=fork_id, type="channel_publish", agent=row.sender, data={
                "channel": name, "seq": row.seq, "content": row.content[:2000], "restored": True})
    for (name, agent), last_acked in sorted(acks.items()):
        Subscription.objects.create(channel=channels[name], agent=agent, last_acked=last_acked)
        event_append(run_id=fork_id, type="channel_subscribe", agent=agent, data={
            "channel": name, "received": [], "last_acked": last_acked, "restored": True})
    return {name: published.get(name, 0) for name in names}
