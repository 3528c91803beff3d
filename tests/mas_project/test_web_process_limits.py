"""What one hostile request does to the web process: a real daphne, measured from outside.

Each request is sent over a socket with an editor's token; the test asserts the
exact 4xx, that it cost daphne under a quarter second of CPU (from /proc: its wall time
grows with whatever else loads the machine, its CPU time does not), and that the
daphne process grew by under 20 MB (VmRSS from /proc). Before these limits, a YAML alias bomb of 520 bytes
grew daphne by gigabytes, deep nesting answered 500 with a RecursionError, and
a 100,000-character query string got its connection closed with no answer.
"""

from __future__ import annotations

import asyncio
import json
from typing import NamedTuple

import pytest
import websockets

from agents_app.kinds import AGENT
from mas_core.definitions.services import definition_parse, definition_save
from agents_app.models import Agent, DefinitionVersion
from tests.web import Answer, WebServer

# alone: measures daphne's CPU time and memory, and the time its answers take.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.alone]

CPU_LIMIT_S = 0.25  # of daphne's CPU for one hostile request (a line of 5,000 "[" cost 0.63 s before the scanner counted)
MAX_GROWTH_KB = 20 * 1024
VALID = "---\nname: X\ndescription: fine\n---\n\nYou work.\n"


def laughs(levels: int = 9, width: int = 9) -> str:
    """The probe's file: nested aliases, 9 levels of 9, in 520 bytes."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "---\nname: X\n" + "\n".join(lines) + "\n---\n"


@pytest.fixture(scope="module")
def web(django_db_setup, django_db_blocker):
    server = WebServer(label="limits")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def editor(team_a, make_member, make_token):
    definition_save(kind=AGENT, team=team_a, parsed=definition_parse(kind=AGENT, team=team_a, text=VALID), slug="x")
    return make_token(team_a, make_member(team_a, role="editor"))


class Cost(NamedTuple):
    answer: Answer
    growth_kb: int  # how much daphne's resident memory grew
    cpu_s: float  # the CPU time daphne spent meanwhile


def measured(web: WebServer, method: str, path: str, body: str | bytes | None = None, **options) -> Cost:
    """The answer and what it cost daphne, after a harmless request of the same kind has warmed it up."""
    web.request("PUT", "/api/agents/x/markdown", VALID, token=options.get("token", ""), content_type="text/markdown")
    web.request("GET", "/api/memories?q=warm", token=options.get("token", ""))
    before, cpu_before = web.rss_kb(), web.cpu_s()
    answer = web.request(method, path, body, **options)
    cost = Cost(answer, web.rss_kb() - before, web.cpu_s() - cpu_before)
    print(f"{method} {path[:40]}: {cost.cpu_s:.2f} s CPU, {answer.seconds:.2f} s wall, {cost.growth_kb} kB")
    return cost


def assert_nothing_saved(team) -> None:
    row = Agent.objects.get(team=team, slug="x")
    assert (row.version, row.description) == (1, "fine")
    assert DefinitionVersion.objects.filter(team=team, slug="x").count() == 1


@pytest.mark.parametrize(
    "markdown, line, message",
    [
        (laughs(), 7, "the alias *a3 repeats 7381 keys and values, making in all more than 10000 keys and values "
                      "(limit MAS_YAML_MAX_NODES)"),
        ("---\nname: X\nk: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n---\n", 3,
         "lists and mappings are nested more than 32 deep (limit MAS_YAML_MAX_DEPTH)"),
        ("---\nname: X\nk: " + "[" * 5000 + "\n---\n", 3,
         "lists and mappings are nested more than 32 deep (limit MAS_YAML_MAX_DEPTH)"),
        ("---\nname: X\n? " + "k" * 200_000 + "\n: v\n---\n", 3,
         "a key of 200000 characters; keys are limited to 256 (limit MAS_YAML_MAX_KEY_CHARS)"),
    ],
    ids=["alias-bomb", "3000-flow-maps", "5000-brackets", "200k-key"],
)
def test_hostile_markdown_is_a_quick_422_and_the_process_stays_small(web, editor, team_a, markdown, line, message):
    answer, growth, cpu = measured(web, "PUT", "/api/agents/x/markdown", markdown, token=editor,
                              content_type="text/markdown", timeout=10)

    assert answer.status == 422, answer.body[:300]
    assert json.loads(answer.body) == {"detail": [
        {"loc": ["body"], "msg": message, "type": "invalid_definition", "line": line}]}
    assert cpu < CPU_LIMIT_S
    assert growth < MAX_GROWTH_KB, f"daphne grew by {growth} kB"
    assert_nothing_saved(team_a)


def test_deep_json_is_a_quick_400(web, editor, team_a):
    body = '{"markdown": ' + "[" * 5000 + "]" * 5000 + "}"
    answer, growth, cpu = measured(web, "PUT", "/api/agents/x/markdown", body, token=editor,
                              content_type="application/json", timeout=10)
    assert (answer.status, json.loads(answer.body)) == (
        400, {"detail": "the JSON body is nested more than 64 levels deep (limit MAS_MAX_JSON_DEPTH)"})
    assert cpu < CPU_LIMIT_S
    assert growth < MAX_GROWTH_KB, f"daphne grew by {growth} kB"
    assert_nothing_saved(team_a)


@pytest.mark.parametrize("length", [100_000, 10_000])
def test_an_overlong_query_string_is_answered_414(web, editor, length):
    # 100,000 characters is past daphne's own line buffer (16 KB), 10,000 only past MAS_MAX_URL_CHARS.
    path = "/api/memories?q=" + "a" * (length - len("/api/memories?q="))
    answer, growth, cpu = measured(web, "GET", path, token=editor, timeout=10)

    assert answer.status == 414
    assert answer.headers["content-type"] == "application/json"
    if length > 16384:
        assert json.loads(answer.body) == {"detail": "the request line is longer than 16384 bytes; URLs are limited "
                                                     "to 8192 characters (MAS_MAX_URL_CHARS)"}
    else:
        assert json.loads(answer.body) == {"detail": "the URL is 10000 characters long; the limit is 8192 "
                                                     "(MAS_MAX_URL_CHARS)"}
    assert cpu < CPU_LIMIT_S
    assert growth < MAX_GROWTH_KB, f"daphne grew by {growth} kB"
    # The server goes on answering.
    assert web.request("GET", "/api/memories?q=ok", token=editor).status == 200


def test_an_overlong_header_line_is_answered_431(web, editor):
    answer, growth, cpu = measured(web, "GET", "/api/agents", token=editor, timeout=10, headers={"X-Pad": "p" * 20_000})
    assert (answer.status, json.loads(answer.body)) == (431, {"detail": "a header line is longer than 16384 bytes"})
    assert cpu < CPU_LIMIT_S
    assert growth < MAX_GROWTH_KB, f"daphne grew by {growth} kB"


def test_a_url_within_the_limit_is_served(web, editor):
    path = "/api/agents/x/markdown?pad=" + "a" * (8192 - len("/api/agents/x/markdown?pad="))
    answer, growth, cpu = measured(web, "GET", path, token=editor, timeout=10)
    assert (answer.status, answer.body.decode()) == (200, VALID)
    assert cpu < CPU_LIMIT_S
    assert growth < MAX_GROWTH_KB, f"daphne grew by {growth} kB"


def test_an_overlong_websocket_url_is_refused_before_the_consumer(web, editor):
    async def status_of(url: str) -> int:
        try:
            async with websockets.connect(url, open_timeout=5,
                                          additional_headers={"Authorization": f"Bearer {editor}"}):
                return 101
        except websockets.InvalidStatus as refused:
            return refused.response.status_code

    base = f"ws://127.0.0.1:{web.port}/ws/runs/"
    assert asyncio.run(status_of(base)) == 101
    assert asyncio.run(status_of(base + "?pad=" + "a" * 9000)) == 403


def test_a_form_body_is_left_to_the_application(web, editor, team_a):
    # Twisted parsed a POST's form body into request.args, which daphne never reads: a multipart body it could not
    # parse (here: no boundary) got Twisted's bare 400, no JSON, and a closed connection (mas_project.http_limits).
    # The application reads the body, and answers.
    body = "--x\r\nContent-Disposition: form-data; name=\"agent\"\r\n\r\nx\r\n--x--\r\n"
    answer, growth, cpu = measured(web, "POST", "/api/agents", body, token=editor,
                                   content_type="multipart/form-data", timeout=10)
    assert (answer.status, answer.headers["content-type"]) == (415, "application/json; charset=utf-8")
    assert json.loads(answer.body) == {"detail": "send JSON with Content-Type: application/json, not "
                                                 "'multipart/form-data'"}
    assert cpu < CPU_LIMIT_S
    assert_nothing_saved(team_a)
