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
import contextvars
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import FileResponse, HttpResponseBase
from django.urls import set_script_prefix

from mas_core.webgate import gate_places


class GatedASGIHandler(ASGIHandler):
    """Django's ASGI handler, at most ``MAS_WEB_CONCURRENCY`` requests past its gate at once (per process),
    each handled in one hop to one of as many threads, kept.

    Django's own runs the middleware that can be async on the loop: each of Django's middlewares then hops
    to a thread for its ``process_request`` and back, and again for ``process_response`` (and WhiteNoise,
    sync only, from a thread back to the loop): about fifteen hops between the loop and a thread per
    request, a third of the web process's CPU for an API call, and a new thread for each request (its own
    executor). Here the request's whole synchronous part — the ``request_started`` signal, the request
    made from the ASGI scope, the middleware chain (the synchronous one, as under WSGI) and the view, and
    the response's close with its ``request_finished`` signal (which lets go of the request's database
    connection) — is one call in one of the handler's threads; the loop only reads the body and sends the
    answer. A streaming response is closed after its body is sent, as Django does.
    """

    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)
        self._threads = ThreadPoolExecutor(max_workers=settings.MAS_WEB_CONCURRENCY, thread_name_prefix="request")

    async def handle(self, scope, receive, send):
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        try:
            set_script_prefix(get_script_prefix(scope))
            async with gate_places():
                context = contextvars.copy_context()  # what the request's code reads of the loop's (as sync_to_async)
                response = await asyncio.get_running_loop().run_in_executor(
                    self._threads, context.run, self._serve, scope, body_file)
            await self.send_response(response, send)
            if response.streaming:
                await sync_to_async(response.close)()
        finally:
            body_file.close()

    def _serve(self, scope, body_file) -> HttpResponseBase:
        """The request's synchronous part, in a thread of the handler."""
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            response = self.get_response(request)
        response._handler_class = self.__class__
        if isinstance(response, FileResponse):
            response.block_size = self.chunk_size  # as Django's: the server chunks what it sends
        if not response.streaming:  # its body is made: let go of what the request held, in its thread
            response.close()
        return response
