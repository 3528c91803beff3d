"""Listeners a higher layer adds at start-up, for news a lower one has.

A message published on a run's channel (memory_app) may start a workflow
(workflows_app, two layers up): workflows_app connects its listener in
``AppConfig.ready`` instead of memory_app importing it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Called after commit with run_id=, channel=, content= of every message published on a run's channel.
CHANNEL_PUBLISHED: list[Callable[..., Any]] = []


def channel_published_connect(listener: Callable[..., Any]) -> None:
    """Add a listener once (a second ``ready()`` adds nothing)."""
    if listener not in CHANNEL_PUBLISHED:
        CHANNEL_PUBLISHED.append(listener)


def channel_published(*, run_id, channel: str, content: str) -> None:
    for listener in list(CHANNEL_PUBLISHED):
        listener(run_id=run_id, channel=channel, content=content)
