"""No credential in any log line (issue 23, point 3).

An ``Authorization`` header of another scheme than ``Bearer`` was logged whole
at ERROR by django-ninja when DEBUG is on (``Unexpected auth - 'Basic cGEt…'``),
by the ``django`` logger's own console handler and by ours; a valid token sent as
``Token <t>`` ended up in ``web.log``. The lines are read where they are written:
the project's own console handler in this process, and a real daphne's output.
"""

from __future__ import annotations

import base64
import io
import logging

import pytest

from mas_core import secrets
from mas_core.secrets import RedactFilter
from tests.web import WebServer

pytestmark = pytest.mark.django_db(transaction=True)

BASIC_PASSWORD = "correct-horse-battery-staple"
DIGEST_RESPONSE = "6629fae49393a05397450978507c4ef1"


def authorizations(token: str) -> dict[str, str]:
    """Each scheme's header, and the secret it carries."""
    basic = base64.b64encode(f"alice:{BASIC_PASSWORD}".encode()).decode()
    return {
        f"Token {token}": token,
        f"Basic {basic}": basic,
        f'Digest username="alice", realm="mas", nonce="dcd98b7102dd2f0e", uri="/api/runs", '
        f'response="{DIGEST_RESPONSE}"': DIGEST_RESPONSE,
        token: token,  # no scheme at all
    }


def writing_handlers() -> list[logging.Handler]:
    """Every handler of every logger that writes somewhere (pytest's own capture handlers aside)."""
    loggers = [logging.root] + [lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    return [h for lg in loggers for h in lg.handlers
            if not isinstance(h, logging.NullHandler) and not type(h).__module__.startswith("_pytest")]


def test_every_handler_that_writes_passes_the_redact_filter():
    import redis

    import mas_project.asgi  # noqa: F401 - the web process's loggers, as daphne loads them
    from mas_core import embeddings
    from mas_core.events import live_redis_url

    embeddings.get_model()  # torch and transformers come with stderr handlers of their own
    redis.Redis.from_url(live_redis_url()).pubsub().close()  # redis-py's push_response logger (live events)
    handlers = writing_handlers()
    assert handlers
    loggers = [logging.root] + [lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    unfiltered = [f"{lg.name}: {h}" for lg in loggers for h in lg.handlers if h in handlers
                  and not any(isinstance(f, RedactFilter) for f in h.filters)]
    assert unfiltered == []


def test_other_schemes_and_a_valid_token_sent_as_token_never_reach_the_log(team_a, make_member, make_token, settings,
                                                                          client):
    settings.DEBUG = True  # ninja logged the header only with DEBUG on, as `make demo` runs
    token = make_token(team_a, make_member(team_a, role="viewer"))
    stream = io.StringIO()
    handlers = writing_handlers()
    previous = [(h, h.setStream(stream)) for h in handlers if isinstance(h, logging.StreamHandler)]
    levels = {name: logging.getLogger(name).level for name in ("", "django", "ninja", "mas_core")}
    for name in levels:
        logging.getLogger(name).setLevel(logging.DEBUG)
    try:
        for header in authorizations(token):
            assert client.get("/api/runs", HTTP_AUTHORIZATION=header).status_code == 401
    finally:
        for handler, old in previous:
            handler.setStream(old)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
    written = stream.getvalue()
    for secret in authorizations(token).values():
        assert secret not in written
    assert token[4:20] not in written and BASIC_PASSWORD not in written
    assert "authorization scheme not supported" in written  # the lines were captured


def test_a_real_daphne_logs_no_credential(team_a, make_member, make_token):
    token = make_token(team_a, make_member(team_a, role="viewer"))
    server = WebServer(label="credentials", env={"DJANGO_DEBUG": "1", "MAS_LOG_LEVEL": "DEBUG"})
    server.log_path.unlink(missing_ok=True)
    server.start()
    try:
        statuses = [server.request("GET", "/api/runs", headers={"Authorization": header}).status
                    for header in authorizations(token)]
        assert server.request("GET", "/api/runs", token=token).status == 200  # the same token, as Bearer
    finally:
        server.stop()
    assert statuses == [401] * len(statuses)
    written = server.log_path.read_text()
    for secret in authorizations(token).values():
        assert secret not in written
    assert "authorization scheme not supported" in written


@pytest.mark.parametrize(("line", "expected"), [
    ("Unexpected auth - 'Basic cGEtc3M6cGFzcw=='", "Unexpected auth - 'Basic [redacted]'"),
    ("Unexpected auth - 'Token mas_abcdefghijklmnopqrstuvwxyz0123'", "Unexpected auth - 'Token [redacted]'"),
    ('auth \'Digest username="a", response="6629fae4"\'', "auth 'Digest [redacted]'"),
    ('{"Authorization": "Bearer xyz.abc.def", "X": 1}', '{"Authorization": "Bearer [redacted]", "X": 1}'),
    ("Authorization: mas_abcdefghijklmnopq", "Authorization: [redacted]"),
    ("sent mas_abcdefghijklmnopq here", "sent mas_[redacted] here"),
    ("Token expired for run 12", "Token expired for run 12"),
    ("the basic idea of token authentication", "the basic idea of token authentication"),
])
def test_credentials_scrub_keeps_the_scheme_and_drops_the_credential(line, expected):
    assert secrets.credentials_scrub(line) == expected
