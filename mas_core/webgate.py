"""A web process's places: how many requests it works on at once (``MAS_WEB_CONCURRENCY``), the others waiting
in its event loop — taken by Django's requests (``mas_project.request_gate``, which says why) and by the doors
beside Django (``agents_app.doors``) for their database work.
"""

from __future__ import annotations

import asyncio

from django.conf import settings

from mas_core.loops import loop_local


class _Gate:
    """A loop's places (a web process has one loop; tests run several, one after another)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.places = asyncio.Semaphore(settings.MAS_WEB_CONCURRENCY)


_gates: dict[int, _Gate] = {}


def gate_places() -> asyncio.Semaphore:
    """The running loop's places: ``async with gate_places():`` around work a request does."""
    return loop_local(_gates, _Gate).places
