"""A web process works on ``MAS_WEB_CONCURRENCY`` requests at once; the others wait their turn in its loop.

Requests go through the ASGI interface of the handler ``mas_project.asgi`` serves; a wrapper around
Django's own view-calling step counts how many are inside at once, each held there a tenth of a second.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.core import signals
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler

from mas_project.request_gate import GatedASGIHandler

ROOT = Path(__file__).resolve().parents[2]

SCOPE = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
         "path": "/no-such-page/", "raw_path": b"/no-such-page/", "query_string": b"", "headers": [],
         "server": ("testserver", 80), "client": ("127.0.0.1", 5000)}


async def get(handler, scope: dict | None = None) -> int:
    """The status of one request to ``handler`` (``SCOPE`` unless another is given)."""
    received = [{"type": "http.request", "body": b"", "more_body": False}]
    sent: list[dict] = []

    async def receive():
        if received:
            return received.pop()
        await asyncio.Future()  # the client stays: Django listens for a disconnect until it has answered

    async def send(message):
        sent.append(message)

    await handler(dict(scope or SCOPE), receive, send)
    return sent[0]["status"]


def inside_at_most(handler_class, monkeypatch, requests: int) -> tuple[int, list[int]]:
    """How many of ``requests`` sent at once were inside their views together, at most; and their statuses.
    (Django's own handler calls views through ``_get_response_async``, the gated one through ``_get_response``
    in the request's thread.)"""
    real, real_async = BaseHandler._get_response, BaseHandler._get_response_async
    state = {"inside": 0, "most": 0}
    lock = threading.Lock()

    def enter():
        with lock:
            state["inside"] += 1
            state["most"] = max(state["most"], state["inside"])

    def leave():
        with lock:
            state["inside"] -= 1

    def counted(self, request):
        enter()
        time.sleep(0.1)  # long enough for every request sent to arrive
        try:
            return real(self, request)
        finally:
            leave()

    async def counted_async(self, request):
        enter()
        await asyncio.sleep(0.1)
        try:
            return await real_async(self, request)
        finally:
            leave()

    monkeypatch.setattr(BaseHandler, "_get_response", counted)
    monkeypatch.setattr(BaseHandler, "_get_response_async", counted_async)

    async def main():
        handler = handler_class()
        return await asyncio.gather(*(get(handler) for _ in range(requests)))

    statuses = asyncio.run(main())
    return state["most"], statuses


def test_at_most_its_places_are_inside_at_once_and_every_request_is_answered(monkeypatch, settings):
    settings.MAS_WEB_CONCURRENCY = 2
    most, statuses = inside_at_most(GatedASGIHandler, monkeypatch, requests=7)
    assert most == 2
    assert statuses == [404] * 7


def test_one_place_takes_the_requests_one_by_one(monkeypatch, settings):
    settings.MAS_WEB_CONCURRENCY = 1
    most, statuses = inside_at_most(GatedASGIHandler, monkeypatch, requests=3)
    assert (most, statuses) == (1, [404] * 3)


def test_without_the_gate_every_request_is_inside_at_once(monkeypatch, settings):
    """What the gate changes: Django's own handler lets all of them in (a thread each)."""
    settings.MAS_WEB_CONCURRENCY = 2
    most, statuses = inside_at_most(ASGIHandler, monkeypatch, requests=7)
    assert (most, statuses) == (7, [404] * 7)


def test_the_served_application_is_gated():
    from mas_project import asgi

    assert type(asgi.django_asgi_app) is GatedASGIHandler


def places(**env: str) -> str:
    """``MAS_WEB_CONCURRENCY`` as the settings read it in a fresh process with ``env``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "MAS_ENV", "MAS_WEB"))}
    result = subprocess.run(
        [sys.executable, "-c", "import mas_project.settings as s; print(s.MAS_WEB_CONCURRENCY)"],
        cwd=ROOT, env={**clean, "DATABASE_URL": "postgresql://u@127.0.0.1:1/x", **env},
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_two_places_by_default_as_the_settings_page_says_and_never_none():
    assert (places(), places(MAS_WEB_CONCURRENCY="9"), places(MAS_WEB_CONCURRENCY="0")) == ("2", "9", "1")


def hops(handler_class, monkeypatch, scope: dict | None = None, status: int = 404) -> int:
    """How many times one request's handling (``SCOPE`` unless another is given) went from the loop to a
    thread."""
    from asgiref import sync

    real = sync.SyncToAsync.__call__
    count = 0

    async def counted(self, *args, **kwargs):
        nonlocal count
        count += 1
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(sync.SyncToAsync, "__call__", counted)

    async def main():
        return await get(handler_class(), scope)

    assert asyncio.run(main()) == status
    return count


def test_a_request_goes_to_its_thread_once_for_its_signals_the_middleware_and_the_view(monkeypatch):
    """One hop: request_started, the middleware with the view, and the made response's close
    (request_finished). Django's own handler: fifteen (one per method of each middleware as well, back to the
    loop around WhiteNoise, and one for each signal)."""
    assert hops(GatedASGIHandler, monkeypatch) == 1
    assert hops(ASGIHandler, monkeypatch) == 15


def test_each_signal_fires_once_in_the_requests_thread_and_a_stream_is_closed_once_sent(monkeypatch):
    """request_started before the view, request_finished after it: once each, in the thread the view ran in
    (the database connection they take and give back is that thread's). A streaming response is closed after
    its body was sent: a second hop."""
    from django.http import StreamingHttpResponse

    fired: list[tuple[str, int]] = []
    real = BaseHandler._get_response

    async def parts():
        yield b"a"
        yield b"b"

    def view(self, request):
        fired.append(("view", threading.get_ident()))
        if request.path == "/stream/":
            return StreamingHttpResponse(parts())
        return real(self, request)

    def started(**kwargs):
        fired.append(("started", threading.get_ident()))

    def finished(**kwargs):
        fired.append(("finished", threading.get_ident()))

    monkeypatch.setattr(BaseHandler, "_get_response", view)
    signals.request_started.connect(started)
    signals.request_finished.connect(finished)
    try:
        assert asyncio.run(get(GatedASGIHandler())) == 404
        made, fired[:] = list(fired), []
        assert hops(GatedASGIHandler, monkeypatch, {**SCOPE, "path": "/stream/", "raw_path": b"/stream/"},
                    status=200) == 2
    finally:
        signals.request_started.disconnect(started)
        signals.request_finished.disconnect(finished)
    assert [name for name, _ in made] == ["started", "view", "finished"]
    assert len({ident for _, ident in made}) == 1 and made[0][1] != threading.get_ident()
    assert [name for name, _ in fired] == ["started", "view", "finished"]


def test_a_request_django_cannot_make_is_answered_400_with_its_signals_in_one_hop(monkeypatch):
    fired: list[str] = []

    def started(**kwargs):
        fired.append("started")

    def finished(**kwargs):
        fired.append("finished")

    signals.request_started.connect(started)
    signals.request_finished.connect(finished)
    try:
        assert hops(GatedASGIHandler, monkeypatch, {**SCOPE, "query_string": b"q=\xff"}, status=400) == 1
    finally:
        signals.request_started.disconnect(started)
        signals.request_finished.disconnect(finished)
    assert fired == ["started", "finished"]


def in_order(monkeypatch, requests: list[tuple[float, str, str]], inside) -> list[str]:
    """What happened, in order, to ``requests`` — (seconds after the first, path, bearer token) — sent to the
    served application one place strong, each calling ``inside(path, log)`` in its thread in place of its view."""
    from mas_project import asgi

    log: list[str] = []
    lock = threading.Lock()

    def say(entry: str) -> None:
        with lock:
            log.append(entry)

    def view(self, request):
        say(f"{request.path} in")
        try:
            inside(request.path, say)
        finally:
            say(f"{request.path} out")
        return real(self, request)

    real = BaseHandler._get_response
    monkeypatch.setattr(BaseHandler, "_get_response", view)
    monkeypatch.setattr(asgi, "django_asgi_app", GatedASGIHandler())  # its chain made with the view above

    async def send(after: float, path: str, token: str) -> int:
        await asyncio.sleep(after)
        return await get(asgi.http_app, {**SCOPE, "path": path, "raw_path": path.encode(),
                                         "headers": [(b"authorization", f"Bearer {token}".encode())]})

    async def main():
        return await asyncio.gather(*(send(*request) for request in requests))

    assert asyncio.run(main()) == [404] * len(requests)
    return log


def test_a_request_waiting_away_lets_another_in_and_takes_its_place_again_in_turn(monkeypatch, settings):
    """One place: /slow/ gives it up for 0.2 s (as an MCP server's Test does while the server answers), /fast/
    comes in meanwhile and keeps it 0.4 s, and /slow/ goes on only once /fast/ has left."""
    from asgiref.sync import async_to_sync

    from mas_core import webgate

    settings.MAS_WEB_CONCURRENCY = 1

    async def away(say) -> None:
        async with webgate.away():
            say("/slow/ away")
            await asyncio.sleep(0.2)
        say("/slow/ back")

    def inside(path: str, say) -> None:
        if path == "/slow/":
            async_to_sync(away)(say)  # on the web process's loop, as an async view runs
        else:
            time.sleep(0.4)

    log = in_order(monkeypatch, [(0, "/slow/", "a"), (0.05, "/fast/", "b")], inside)
    assert log == ["/slow/ in", "/slow/ away", "/fast/ in", "/fast/ out", "/slow/ back", "/slow/ out"]


def test_without_going_away_a_waiting_request_keeps_its_place(monkeypatch, settings):
    """The same requests, /slow/ waiting without ``away``: /fast/ comes in only after it."""
    from asgiref.sync import async_to_sync

    settings.MAS_WEB_CONCURRENCY = 1

    def inside(path: str, say) -> None:
        if path == "/slow/":
            async_to_sync(asyncio.sleep)(0.2)
        else:
            time.sleep(0.4)

    log = in_order(monkeypatch, [(0, "/slow/", "a"), (0.05, "/fast/", "b")], inside)
    assert log == ["/slow/ in", "/slow/ out", "/fast/ in", "/fast/ out"]


def test_waiting_requests_are_let_in_one_caller_at_a_time_in_turn(monkeypatch, settings):
    """One place: caller a sends five requests at once, caller b one a moment later. b's goes in after a's
    first (inside) and a's second (a's turn), not after all five: one caller's burst waits behind itself."""
    settings.MAS_WEB_CONCURRENCY = 1
    requests = [(0, f"/a{i}/", "a") for i in range(1, 6)] + [(0.05, "/b1/", "b")]
    log = in_order(monkeypatch, requests, lambda path, say: time.sleep(0.1))
    entered = [entry.split()[0] for entry in log if entry.endswith(" in")]
    assert entered == ["/a1/", "/a2/", "/b1/", "/a3/", "/a4/", "/a5/"]


def test_requests_one_after_another_run_in_one_kept_thread(monkeypatch, settings):
    """Django's handler starts a thread for each request; the gated one keeps its threads: five requests one
    after another run their views in the same thread, and two at once in two."""
    settings.MAS_WEB_CONCURRENCY = 2
    threads: list[tuple[int, str]] = []
    real = BaseHandler._get_response

    def view(self, request):
        threads.append((threading.get_ident(), threading.current_thread().name))
        if request.path == "/together/":
            time.sleep(0.1)
        return real(self, request)

    monkeypatch.setattr(BaseHandler, "_get_response", view)

    async def main():
        handler = GatedASGIHandler()
        alone = [await get(handler) for _ in range(5)]
        scope = {**SCOPE, "path": "/together/", "raw_path": b"/together/"}
        together = await asyncio.gather(*(get(handler, scope) for _ in range(2)))
        return alone + together

    assert asyncio.run(main()) == [404] * 7
    assert len({ident for ident, _ in threads[:5]}) == 1
    assert threads[0][1].startswith("request")
    assert len({ident for ident, _ in threads[5:]}) == 2
    assert threads[0][0] in {ident for ident, _ in threads[5:]}  # the kept one serves again


def test_a_thread_still_at_work_when_its_request_ends_is_not_kept_and_no_more_than_keep_are():
    from mas_project.request_gate import RequestThreads

    threads = RequestThreads(keep=2)
    working, release = threads.take(), threading.Event()
    working.submit(release.wait, 10)  # a call of a request whose client went away, still running
    threads.give_back(working)
    assert threads.idle == []
    idle = [threads.take() for _ in range(3)]
    assert len({id(thread) for thread in idle}) == 3
    for thread in idle:
        thread.submit(lambda: None).result(5)
        threads.give_back(thread)
    assert threads.idle == idle[:2]
    assert threads.take() is idle[1]  # the last given back serves first
    release.set()
    working.shutdown(wait=True)  # ended once its call was done
    assert not working.busy
