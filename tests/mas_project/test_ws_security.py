"""Which pages may open the monitor's websockets with a browser's session: Django's CSRF origin rule.

Through the real ASGI application (Channels, the session and auth middleware,
the consumers, Redis, PostgreSQL); the handshake's scope is what daphne sends
(``server``, ``client``, the headers; no ``scheme`` for plain ``ws``). The last
test does the same against a real daphne.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from mas_core.eventlog import event_append
from agents_app.models import Run
from mas_project.asgi import application
from tests.sockets import Communicator

pytestmark = pytest.mark.django_db(transaction=True)

HOST = "127.0.0.1:8000"  # the server's own origin is http://127.0.0.1:8000
BAD_ORIGINS = ["http://127.0.0.1:9999", "http://localhost:3000", "https://127.0.0.1"]


@pytest.fixture
def viewer(team_a, make_member, make_token):
    user = make_member(team_a, role="viewer")
    run = Run.objects.create(team=team_a, agent="lead", input="x")
    with transaction.atomic():
        event_append(run_id=run.id, type="run_start", agent="lead", data={})
    browser = Client()
    browser.force_login(user)
    return {"cookie": f"sessionid={browser.cookies['sessionid'].value}", "run": run,
            "token": make_token(team_a, user)}


def paths(viewer) -> list[str]:
    return [f"/ws/runs/{viewer['run'].id}/", "/ws/runs/"]


def headers(*, cookie=None, origin=None, host=HOST, token=None, extra=()) -> list[tuple[bytes, bytes]]:
    found = [(b"host", host.encode())] + [(name.encode(), value.encode()) for name, value in extra]
    if cookie:
        found.append((b"cookie", cookie.encode()))
    if origin:
        found.append((b"origin", origin.encode()))
    if token:
        found.append((b"authorization", f"Bearer {token}".encode()))
    return found


def answer(path, sent, scheme=None) -> str | int:
    """The socket's first word: the close code, or the ``message`` of its first message."""

    async def go():
        communicator = Communicator(application, path, headers=sent)
        communicator.scope.update(server=["127.0.0.1", 8000], client=["10.9.8.7", 50000])
        if scheme:
            communicator.scope["scheme"] = scheme
        await communicator.connect()
        output = await communicator.receive_output(timeout=5)
        await communicator.disconnect()
        return output["code"] if output["type"] == "websocket.close" else json.loads(output["text"])["message"]

    return async_to_sync(go)()


OPEN = {"/ws/runs/": "subscribed"}  # what an accepted socket says first; a run's socket sends its events


def opened(path) -> str:
    return OPEN.get(path, "events")


def test_a_session_socket_from_another_scheme_host_or_port_is_refused(viewer):
    assert BAD_ORIGINS
    for path in paths(viewer):
        for origin in BAD_ORIGINS:
            assert answer(path, headers(cookie=viewer["cookie"], origin=origin)) == 4401, (path, origin)
        assert answer(path, headers(cookie=viewer["cookie"])) == 4401  # no Origin at all
        # The page's own origin, exactly: scheme, host and port.
        assert answer(path, headers(cookie=viewer["cookie"], origin=f"http://{HOST}")) == opened(path)


def test_a_trusted_origin_is_accepted_exactly_or_as_its_subdomains(viewer, settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://mas.example.com", "https://*.corp.example"]
    for path in paths(viewer):
        for origin in ("https://mas.example.com", "https://monitor.corp.example"):
            assert answer(path, headers(cookie=viewer["cookie"], origin=origin)) == opened(path), origin
        for origin in ("http://mas.example.com", "https://mas.example.com:8443", "https://evil.example.com",
                       "http://monitor.corp.example", "https://corp.example.evil"):
            assert answer(path, headers(cookie=viewer["cookie"], origin=origin)) == 4401, origin


def test_wss_wants_an_https_origin(viewer):
    path = paths(viewer)[0]
    assert answer(path, headers(cookie=viewer["cookie"], origin=f"https://{HOST}"), scheme="wss") == "events"
    assert answer(path, headers(cookie=viewer["cookie"], origin=f"http://{HOST}"), scheme="wss") == 4401
    assert answer(path, headers(cookie=viewer["cookie"], origin=f"https://{HOST}"), scheme="ws") == 4401


def test_behind_a_tls_proxy_the_forwarded_scheme_counts_as_django_reads_it(viewer, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "mas.example.com"]
    path, cookie = paths(viewer)[0], viewer["cookie"]
    proxied = [("x-forwarded-proto", "https")]
    assert answer(path, headers(cookie=cookie, host="mas.example.com", origin="https://mas.example.com",
                                extra=proxied)) == "events"
    assert answer(path, headers(cookie=cookie, host="mas.example.com", origin="http://mas.example.com",
                                extra=proxied)) == 4401
    # Without the proxy's header the socket is plain http again.
    assert answer(path, headers(cookie=cookie, host="mas.example.com", origin="https://mas.example.com")) == 4401
    assert answer(path, headers(cookie=cookie, host="mas.example.com", origin="http://mas.example.com")) == "events"


def test_a_host_not_allowed_is_no_origin_of_ours(viewer):
    # A DNS-rebinding page: its Origin equals the Host it sent, but that host is not ours.
    path = paths(viewer)[0]
    assert answer(path, headers(cookie=viewer["cookie"], host="evil.example:8000",
                                origin="http://evil.example:8000")) == 4401


def test_a_bearer_token_needs_no_origin(viewer):
    # A page cannot put an Authorization header on a browser's websocket: scripts send no Origin, or any.
    for path in paths(viewer):
        for origin in (None, "http://localhost:3000"):
            assert answer(path, headers(token=viewer["token"], origin=origin)) == opened(path)


# -- the same against a real daphne ------------------------------------------------------------------


@pytest.fixture
def daphne(django_db_setup):
    """daphne on a free port, trusting X-Forwarded-For (as behind a proxy), with 5 token failures a minute."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = Path(settings.VAR_DIR) / "log" / "test-daphne-ws-security.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "--proxy-headers", "-b", "127.0.0.1", "-p", str(port),
         "mas_project.asgi:application"],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "mas_project.settings_test", "DJANGO_ALLOW_ASYNC_UNSAFE": "",
             "MAS_DATABASE_NAME": settings.DATABASES["default"]["NAME"], "MAS_TEST_AUTH_FAILURES_PER_MIN": "5"},
        stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"daphne did not start; see {log}") from None
            time.sleep(0.1)
    yield port
    process.terminate()
    process.wait(10)


def ws_answer(url: str, *, origin: str | None = None, headers: dict | None = None) -> str | int:
    with connect(url, origin=origin, additional_headers=headers or {}, open_timeout=10) as ws:
        try:
            return json.loads(ws.recv(timeout=10))["message"]
        except ConnectionClosed as closed:
            return closed.rcvd.code


def http_me(base: str, token: str, where: str) -> tuple[int, str | None]:
    request = urllib.request.Request(f"{base}/api/me", headers={"Authorization": f"Bearer {token}",
                                                                 "X-Forwarded-For": where})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers.get("Retry-After")
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Retry-After")


def test_through_daphne_only_the_servers_own_origin_reads_with_a_session_and_guessing_tokens_is_stopped(
        viewer, daphne, whole_rate_window):
    base, ws = f"http://127.0.0.1:{daphne}", f"ws://127.0.0.1:{daphne}"
    cookie = {"Cookie": viewer["cookie"]}
    for path in paths(viewer):
        assert ws_answer(ws + path, origin=base, headers=cookie) == opened(path)
        for origin in BAD_ORIGINS:
            assert ws_answer(ws + path, origin=origin, headers=cookie) == 4401, origin
    # Five wrong tokens a minute from one address (the proxy's X-Forwarded-For), over HTTP or websockets.
    where, bearer = f"10.77.{os.getpid() % 250}.{int(time.time()) % 250}", {"Authorization": "Bearer mas_wrong"}
    assert [http_me(base, "mas_wrong", where)[0] for _ in range(3)] == [401] * 3
    assert [ws_answer(ws + "/ws/runs/", headers={**bearer, "X-Forwarded-For": where}) for _ in range(3)] == [
        4401, 4401, 4429]
    status, retry_after = http_me(base, "mas_wrong", where)
    assert status == 429 and 1 <= int(retry_after) <= 60
    # The right token from the same address is not refused, over either.
    assert http_me(base, viewer["token"], where) == (200, None)
    assert ws_answer(ws + paths(viewer)[0], headers={"Authorization": f"Bearer {viewer['token']}",
                                                     "X-Forwarded-For": where}) == "events"
