"""How many requests a web process works on at once: the others wait their turn in its event loop.

daphne runs the Django code of each request in a thread of its own. A hundred requests at once were a
hundred threads taking turns at the one interpreter lock with the event loop that carries the websockets'
live events: the loop got its turn behind them, and a live event waited for a burst of API calls to be
answered (``bench/load.py``). More threads do not answer sooner either: the work is Python, which runs on
one core per process whatever the number of threads. So the web process works on ``MAS_WEB_CONCURRENCY``
requests at once (default 2: a request waiting for the database leaves the core to the other) and the rest
wait as coroutines of the loop — which keeps its turn — let in lane by lane, a lane per caller
(``mas_core.webgate``): one client's burst waits behind itself, not in front of everyone else's requests.
A request that waits for something outside (an MCP server's Test) gives its place up meanwhile
(``webgate.away``): before it did, two Tests waiting out their connect timeout held up every other request
(``tests/tools_app/test_mcp_sandbox.py``), and the default was 4. ``bench/load.py`` alternated three times
(2026-11-28, bench/RESULTS.md): with 2 places live events reached their clients sooner (p99 144–184 against
209–356 ms) and another team's request during a burst of POSTs was answered sooner (p50 49–82 against
114–187 ms); the burst's own POSTs later (p95 603–685 against 480–620 ms).

The gate holds a request from the moment its body is read (Django reads it first: a slow client holds no
place) through its middleware and view, until the response is made; a streaming response's body is sent
after, outside the gate. Websockets do not pass it (their reads have their own threads, see
``agents_app.ws_reads``).
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler

from mas_core import webgate


class GatedASGIHandler(ASGIHandler):
    """Django's ASGI handler, at most ``MAS_WEB_CONCURRENCY`` requests past its gate at once (per process),
    each through the middleware and its view in one thread.

    Django's own runs the middleware that can be async on the loop: each of Django's middlewares then hops
    to a thread for its ``process_request`` and back, and again for ``process_response`` (and WhiteNoise,
    sync only, from a thread back to the loop): about fifteen hops between the loop and a thread per
    request, a third of the web process's CPU for an API call. Here the whole chain is the synchronous one
    (as under WSGI), run in one hop to the request's thread.
    """

    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)
        self._in_thread = sync_to_async(self.get_response, thread_sensitive=True)

    async def get_response_async(self, request):
        async with webgate.place():
            return await self._in_thread(request)
