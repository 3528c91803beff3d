"""A web process works on ``MAS_WEB_CONCURRENCY`` requests at once; the others wait their turn in its loop.

Requests go through the ASGI interface of the handler ``mas_project.asgi`` serves; a wrapper around
Django's own ``get_response_async`` counts how many are inside at once and holds them there until the
test lets them go.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler

from mas_project.request_gate import GatedASGIHandler

ROOT = Path(__file__).resolve().parents[2]

SCOPE = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
         "path": "/no-such-page/", "raw_path": b"/no-such-page/", "query_string": b"", "headers": [],
         "server": ("testserver", 80), "client": ("127.0.0.1", 5000)}


async def get(handler) -> int:
    """The status of one request to ``handler``."""
    received = [{"type": "http.request", "body": b"", "more_body": False}]
    sent: list[dict] = []

    async def receive():
        if received:
            return received.pop()
        await asyncio.Future()  # the client stays: Django listens for a disconnect until it has answered

    async def send(message):
        sent.append(message)

    await handler(dict(SCOPE), receive, send)
    return sent[0]["status"]


def inside_at_most(handler_class, monkeypatch, requests: int) -> tuple[int, list[int]]:
    """How many of ``requests`` sent at once were inside Django together, at most; and their statuses."""
    real = BaseHandler.get_response_async
    state = {"inside": 0, "most": 0}

    async def counted(self, request):
        state["inside"] += 1
        state["most"] = max(state["most"], state["inside"])
        await asyncio.sleep(0.05)  # long enough for every request sent to arrive
        try:
            return await real(self, request)
        finally:
            state["inside"] -= 1

    monkeypatch.setattr(BaseHandler, "get_response_async", counted)

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


def test_four_places_by_default_as_the_readme_says_and_never_none():
    assert (places(), places(MAS_WEB_CONCURRENCY="9"), places(MAS_WEB_CONCURRENCY="0")) == ("4", "9", "1")
