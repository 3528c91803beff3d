"""How many requests a web process works on at once: the others wait their turn in its event loop.

daphne runs the Django code of each request in a thread of its own. A hundred requests at once were a
hundred threads taking turns at the one interpreter lock with the event loop that carries the websockets'
live events: the loop got its turn behind them, and a live event waited for a burst of API calls to be
answered (``bench/load.py``). More threads do not answer sooner either: the work is Python, which runs on
one core per process whatever the number of threads. So the web process works on ``MAS_WEB_CONCURRENCY``
requests at once (default 4: a request waiting for the database leaves the core to another) and the rest
wait, in arrival order, as coroutines of the loop — which keeps its turn.

The gate holds a request from the moment its body is read (Django reads it first: a slow client holds no
place) through its middleware and view, until the response is made; a streaming response's body is sent
after, outside the gate. Websockets do not pass it (their reads have their own threads, see
``agents_app.ws_reads``).
"""

from __future__ import annotations

import asyncio

from django.conf import settings
from django.core.handlers.asgi import ASGIHandler

from mas_core.loops import loop_local


class _Gate:
    """A loop's places (a web process has one loop; tests run several, one after another)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.places = asyncio.Semaphore(settings.MAS_WEB_CONCURRENCY)


_gates: dict[int, _Gate] = {}


class GatedASGIHandler(ASGIHandler):
    """Django's ASGI handler, at most ``MAS_WEB_CONCURRENCY`` requests in their views at once (per process)."""

    async def get_response_async(self, request):
        async with loop_local(_gates, _Gate).places:
            return await super().get_response_async(request)
