"""How many requests a web process works on at once: the others wait their turn in its event loop.

Django's ASGI handler runs the code of each request in a thread of its own. A hundred requests at once were a
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

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.urls import set_script_prefix

from mas_core import webgate


class RequestThread(ThreadPoolExecutor):
    """One thread, running the calls of one request at a time; ``busy`` while a call is under way or queued."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="request")
        self._calls = 0
        self._count = threading.Lock()

    def submit(self, fn, /, *args, **kwargs):
        with self._count:
            self._calls += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _future) -> None:
        with self._count:
            self._calls -= 1

    @property
    def busy(self) -> bool:
        return self._calls > 0


class RequestThreads:
    """The request threads a web process keeps: each request takes an idle one (a new one when none is) and
    gives it back once answered; beyond ``keep`` idle, a thread given back ends.

    Django's handler starts a thread for each request (its ``ThreadSensitiveContext``) and ends it after:
    here one thread serves one request after another, as a WSGI server's threads do. A thread still at work
    when its request ends (the client went away: a call in a thread cannot be stopped) is not kept; it ends
    once that work is done.
    """

    def __init__(self, *, keep: int) -> None:
        self.keep = keep
        self.idle: list[RequestThread] = []

    def take(self) -> RequestThread:
        return self.idle.pop() if self.idle else RequestThread()

    def give_back(self, thread: RequestThread) -> None:
        if not thread.busy and len(self.idle) < self.keep:
            self.idle.append(thread)
        else:
            thread.shutdown(wait=False)


class GatedASGIHandler(ASGIHandler):
    """Django's ASGI handler, at most ``MAS_WEB_CONCURRENCY`` requests past its gate at once (per process),
    each through the middleware and its view in one thread, kept from one request to the next.

    Django's own runs the middleware that can be async on the loop: each of Django's middlewares then hops
    to a thread for its ``process_request`` and back, and again for ``process_response`` (and WhiteNoise,
    sync only, from a thread back to the loop): about fifteen hops between the loop and a thread per
    request, a third of the web process's CPU for an API call. Here the whole chain is the synchronous one
    (as under WSGI), run in one hop to the request's thread; and that thread is one of ``RequestThreads``,
    not one started for the request. Everything thread-sensitive the request does (its signals, its
    response's close, an async view's ``sync_to_async``) still runs in its own thread, as under Django's
    handler: the request's ``ThreadSensitiveContext`` names it.

    The same hop sends ``request_started`` first and, for a response whose body is already made (not
    streaming), closes it after (``request_finished``: the request's database connection goes back to the
    pool before its answer is sent, not after): Django's handler takes a hop of its own for each, some
    0.14 ms of the process's CPU apiece here. A streaming response is closed once sent, as Django does.
    """

    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)
        self._in_thread = sync_to_async(self._respond, thread_sensitive=True)
        self._threads = RequestThreads(keep=settings.MAS_WEB_CONCURRENCY)

    def _respond(self, request):
        """The request, in its thread: ``request_started``, the middleware and view, and a made response closed."""
        signals.request_started.send(sender=self.__class__, scope=request.scope)
        response = self.get_response(request)
        if not response.streaming:
            response.close()
        return response

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        thread = self._threads.take()
        try:
            async with ThreadSensitiveContext(executor=thread):
                await self.handle(scope, receive, send)
        finally:
            self._threads.give_back(thread)

    async def get_response_async(self, request):
        async with webgate.place():
            return await self._in_thread(request)

    async def handle(self, scope, receive, send):
        """Django's ``ASGIHandler.handle`` (5.2) less its hops for ``request_started`` and a made response's
        close, which :meth:`_respond` does in the request's one hop."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            body_file.close()
            await self.send_response(error_response, send)
            await sync_to_async(_started_and_closed)(self.__class__, scope, error_response)
            return

        async def process_request(request, send):
            response = await self.run_get_response(request)
            try:
                await self.send_response(response, send)
            except asyncio.CancelledError:
                pass  # the client went away while its answer was sent
            return response

        # A client that goes away while its request is under way cancels it (as in Django's handler).
        tasks = [asyncio.create_task(self.listen_for_disconnect(receive)),
                 asyncio.create_task(process_request(request, send))]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done():
                try:
                    task.result()
                except RequestAborted:
                    pass
                except AssertionError:
                    body_file.close()
                    raise
            else:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        try:
            response = tasks[1].result()
        except asyncio.CancelledError:
            await signals.request_finished.asend(sender=self.__class__)
        else:
            if not response.closed:
                await sync_to_async(response.close)()
        body_file.close()


def _started_and_closed(sender, scope, response) -> None:
    """A request Django could not make (its body too large, its query string not text): its signals, in one hop."""
    signals.request_started.send(sender=sender, scope=scope)
    response.close()
