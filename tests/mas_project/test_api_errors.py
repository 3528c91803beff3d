"""Malformed requests get a precise 4xx — never a 500 — and change nothing."""

from __future__ import annotations

import gc
import json
import logging
import tracemalloc

import pytest

from agents_app.models import Agent, DefinitionVersion
from mas_core.api_errors import json_shape_problem
from tests.agents_app.test_api_crud import CASE_IDS, CASES, create, prepare

pytestmark = pytest.mark.django_db

JSON = "application/json"
MB = 1024 * 1024

# (what, raw body, content type, expected status)
MALFORMED = [
    ("invalid JSON", b'{"name": ', JSON, 400),
    ("trailing garbage", b'{"name": "x"} {}', JSON, 400),
    ("array instead of object", b"[1, 2]", JSON, 422),
    ("string instead of object", b'"agent"', JSON, 422),
    ("number instead of object", b"42", JSON, 422),
    ("null", b"null", JSON, 422),
    ("empty body", b"", JSON, 422),
    ("NaN", b'{"name": "x", "description": NaN}', JSON, 400),
    ("Infinity", b'{"name": "x", "description": -Infinity}', JSON, 400),
    ("NUL character", b'{"name": "a\\u0000b"}', JSON, 400),
    ("NUL in a key", b'{"name": "a", "extra": {"k\\u0000": 1}}', JSON, 400),
    ("lone surrogate", b'{"name": "\\ud800"}', JSON, 400),
    ("invalid UTF-8", b'{"name": "\xff\xfe"}', JSON, 400),
    ("integer too long to parse", b'{"name": "x", "description": 1' + b"0" * 5000 + b"}", JSON, 400),
    ("nested too deeply", b"[" * 100_000 + b"]" * 100_000, JSON, 400),
    ("form content type", b"name=x", "application/x-www-form-urlencoded", 415),
    ("JSON sent as text/plain", b'{"name": "x"}', "text/plain", 415),
    ("multipart", b"--b\r\n\r\n--b--", "multipart/form-data; boundary=b", 415),
    ("over the request limit (3 MB)", b'{"name": "' + b"x" * (3 * MB) + b'"}', JSON, 413),
]


def malformed(case):
    # Valid but for its size: a definition is limited to MAS_MAX_DEFINITION_BYTES (256 KB).
    big = json.dumps({**case.payload, "body": "x" * 300_000}).encode()
    return [*MALFORMED, ("over the definition limit (300 KB)", big, JSON, 413)]


def send(api, method, url, raw, content_type):
    return getattr(api, method)(url, raw, content_type=content_type)


def state(case, team):
    rows = list(case.kind.model.objects.filter(team=team).values_list("slug", "version", "content"))
    return rows, DefinitionVersion.objects.filter(team=team).count()


@pytest.mark.parametrize("method", ["post", "put", "patch"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_malformed_json_bodies_are_4xx_and_change_nothing(case, method, team_a, api_for):
    prepare(case, team_a)
    api = api_for(team_a, "admin")
    create(api, case)
    url = f"/api/{case.plural}" + ("" if method == "post" else f"/{case.slug}")
    before = state(case, team_a)

    for what, raw, content_type, expected in malformed(case):
        response = send(api, method, url, raw, content_type)
        assert response.status_code == expected, (what, response.status_code, response.content[:300])
        assert response["Content-Type"] == "application/json; charset=utf-8", what
        detail = response.json()["detail"]
        if expected == 422:
            assert [set(item) for item in detail] == [{"loc", "msg", "type"}], (what, detail)
            assert detail[0]["loc"][0] == "body"
        else:
            assert isinstance(detail, str) and detail, what

    assert state(case, team_a) == before


@pytest.mark.parametrize("method", ["post", "put", "patch"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_wrong_types_name_every_field(case, method, team_a, api_for):
    prepare(case, team_a)
    api = api_for(team_a, "admin")
    create(api, case)
    url = f"/api/{case.plural}" + ("" if method == "post" else f"/{case.slug}")

    response = getattr(api, method)(url, {**case.payload, "name": 123, "description": ["x"], "no_such_field": 1})

    assert response.status_code == 422
    assert sorted((tuple(e["loc"]), e["type"]) for e in response.json()["detail"]) == [
        (("body", "description"), "string_type"),
        (("body", "name"), "string_type"),
        (("body", "no_such_field"), "extra_forbidden"),
    ]


def test_nested_field_paths(team_a, api_for):
    api = api_for(team_a, "editor")
    response = api.post(
        "/api/agents",
        {
            "name": "A",
            "limits": {"max_steps": 0, "timeout_s": "soon"},
            "examples": [{"task": "ok"}, {"approach": "no task"}],
            "custom_tools": [{"name": "t", "prompt": "p", "parameters": {"x": {"type": "date"}}}],
        },
    )
    assert response.status_code == 422
    assert response.json() == {
        "detail": [
            {"loc": ["body", "custom_tools", 0, "parameters", "x", "type"],
             "msg": "Input should be 'string', 'integer', 'number', 'boolean', 'array' or 'object'",
             "type": "literal_error"},
            {"loc": ["body", "limits", "max_steps"], "msg": "Input should be greater than or equal to 1",
             "type": "greater_than_equal"},
            {"loc": ["body", "limits", "timeout_s"],
             "msg": "Input should be a valid integer, unable to parse string as an integer", "type": "int_parsing"},
            {"loc": ["body", "examples", 1, "task"], "msg": "Field required", "type": "missing"},
        ]
    }


def test_service_errors_have_the_same_shape(team_a, api_for):
    api = api_for(team_a, "editor")
    response = api.post("/api/agents", {"name": "A", "custom_tools": [{"name": "t", "prompt": "p"}] * 2})
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert (error["loc"], error["type"]) == (["body", "custom_tools"], "invalid_definition")
    assert error["msg"].endswith("duplicate name(s) t")


@pytest.mark.parametrize("number", ["abc", "0", "-1", "99999999999", "1.5"])
def test_bad_version_numbers_are_422(team_a, api_for, number):
    api = api_for(team_a, "editor")
    create(api, CASES[0])
    response = api.get(f"/api/agents/researcher-x/versions/{number}")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["path", "number"]


def test_unknown_paths_and_methods_are_not_500(team_a, api_for):
    api = api_for(team_a, "editor")
    create(api, CASES[0])
    assert api.post("/api/agents/researcher-x", {"name": "x"}).status_code == 405
    assert api.delete("/api/agents").status_code == 405
    assert api.get("/api/agents/researcher-x/versions/1/extra").status_code == 404
    assert api.get("/api/" + "a" * 5000).status_code == 404


def nested_json(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = {"n": value}
    return value


DEPTH_REFUSAL = {"detail": "the JSON body is nested more than 64 levels deep (limit MAS_MAX_JSON_DEPTH)"}


@pytest.mark.parametrize("depth", [65, 500, 30_000])
def test_json_nested_past_the_limit_is_400_naming_it(team_a, api_for, depth):
    api = api_for(team_a, "editor")
    # The body's own object is level 1: "extra" adds one, each {"n": …} one more.
    raw = (b'{"name": "Deep", "extra": {"x": ' + b'{"n": ' * (depth - 2) + b"1" + b"}" * (depth - 2) + b"}}")
    response = api.post("/api/agents", raw, content_type=JSON)
    assert (response.status_code, response.json()) == (400, DEPTH_REFUSAL)
    # The markdown upload reads JSON the same way.
    markdown = api.put("/api/agents/deep/markdown", raw.replace(b'"name"', b'"markdown"', 1), content_type=JSON)
    assert (markdown.status_code, markdown.json()) == (400, DEPTH_REFUSAL)
    assert not Agent.objects.filter(team=team_a).exists()
    assert DefinitionVersion.objects.filter(team=team_a).count() == 0


def test_json_at_the_depth_limit_reaches_the_definition_limits(team_a, api_for):
    api = api_for(team_a, "editor")
    # 64 levels of JSON is accepted as JSON; as frontmatter it is 62 deep, past MAS_YAML_MAX_DEPTH (32).
    response = api.post("/api/agents", {"name": "Deep", "extra": {"x": nested_json(62)}})
    assert response.status_code == 422
    assert response.json()["detail"] == [{
        "loc": ["body", "x", *["n"] * 31], "type": "invalid_definition",
        "msg": "lists and mappings are nested more than 32 deep (limit MAS_YAML_MAX_DEPTH)"}]
    # Within both limits it is saved, and its markdown loads again.
    response = api.post("/api/agents", {"name": "Deep", "extra": {"x": nested_json(30)}})
    assert response.status_code == 201, response.content
    row = Agent.objects.get(team=team_a, slug="deep")
    assert row.extra == {"x": nested_json(30)}
    assert api.put("/api/agents/deep/markdown", row.content, content_type="text/markdown").status_code == 200


def test_json_with_more_values_than_the_limit_is_400_before_it_is_parsed(team_a, api_for):
    api = api_for(team_a, "editor")
    raw = json.dumps({"name": "Many", "extra": {"x": [0] * 200_000}}).encode()
    response = api.post("/api/agents", raw, content_type=JSON)
    assert (response.status_code, response.json()) == (
        400, {"detail": "the JSON body holds more than 100000 values (limit MAS_MAX_JSON_VALUES)"})
    assert not Agent.objects.filter(team=team_a).exists()


@pytest.mark.parametrize(
    "raw, problem",
    [
        (b'{"a": [1, 2], "b": {"c": 3}}', None),
        (b'{"a": [1, 2], "b": {"c": 3}, "d": 4, "e": 5}',
         "the JSON body holds more than 7 values (limit MAS_MAX_JSON_VALUES)"),
        (b"[[[1]]]", None),
        (b"[[[[1]]]]", "the JSON body is nested more than 3 levels deep (limit MAS_MAX_JSON_DEPTH)"),
        # Brackets and commas inside strings, escaped quotes included, are text.
        (b'{"a": "[[[[,,,,,,,,{{{{", "b": "\\"[[[[\\\\"}', None),
    ],
)
def test_json_shape_is_read_from_the_bytes(raw, problem):
    assert json_shape_problem(raw, max_depth=3, max_values=7) == problem


@pytest.mark.parametrize("window", [1, 2, 3, 5, 8, 16 * 1024])
@pytest.mark.parametrize(
    "raw, problem",
    [
        (b'{"a": [1, 2], "b": {"c": 3}}', None),
        (b'{"a": [1, 2], "b": {"c": 3}, "d": 4, "e": 5}',
         "the JSON body holds more than 7 values (limit MAS_MAX_JSON_VALUES)"),
        (b"[[[1]]]", None),
        (b"[[[[1]]]]", "the JSON body is nested more than 3 levels deep (limit MAS_MAX_JSON_DEPTH)"),
        (b'{"a": "[[[[,,,,,,,,{{{{", "b": "\\"[[[[\\\\"}', None),
        (b'["\\\\\\\\\\\\", "\\\\\\"],[,", "x\\\\"]', None),  # runs of backslashes, escaped and not
        (b'["\\\\\\\\\\\\", "\\\\\\"],[,", "x\\\\", 1, 2, 3, 4, 5]',
         "the JSON body holds more than 7 values (limit MAS_MAX_JSON_VALUES)"),
    ],
)
def test_json_shape_is_the_same_read_window_by_window(raw, problem, window, monkeypatch):
    """Strings and escapes that straddle two windows are still text, whatever the window's size."""
    monkeypatch.setattr("mas_core.api_errors.SCAN_WINDOW_BYTES", window)
    assert json_shape_problem(raw, max_depth=3, max_values=7) == problem


def _allocated_by(request) -> tuple[object, int, int]:
    """What ``request()`` returned (not the response: the test client's response keeps the request and its
    body), and the peak and retained bytes Python allocated meanwhile."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        response = request()
        gc.collect()
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return response, peak - before, current - before


@pytest.fixture
def uncaptured_request_log():
    """pytest keeps every log record of a test, and django.request's carry the request (and its body):
    that is the test's memory, not the server's, whose handlers format a record and let it go."""
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def test_a_refused_run_body_is_refused_before_it_costs_memory(team_a, api_for, uncaptured_request_log):
    """Issue 23, point 5: a 1.9 MB POST /api/runs of short values grew the server by 30-35 MB to refuse it.

    The peak counts everything the request allocated in this process (the test client's copies of the body
    included, about 2 MB each); blanking the strings of the whole body at once took 68 MB alone.
    """
    from agents_app.models import Run

    api = api_for(team_a, "operator")
    raw = b'{"agent": "lead", "input": "t", "script": {"lead": [' + b",".join([b'{"text":"a"}'] * 150_000) + b"]}}"
    assert 1.8 * MB < len(raw) < 2 * MB
    api.post("/api/runs", {"agent": "lead"})  # warm: the first request's imports and caches are not the body's

    def refused():
        response = api.post("/api/runs", raw, content_type=JSON)
        return response.status_code, json.loads(response.content)  # (response.json() ties the two in a cycle)

    answer, peak, retained = _allocated_by(refused)
    assert answer == (
        400, {"detail": "the JSON body holds more than 100000 values (limit MAS_MAX_JSON_VALUES)"})
    assert peak < 10 * MB, peak
    assert retained < 1 * MB, retained
    assert not Run.objects.exists()


@pytest.mark.django_db(transaction=True)  # committed as a server commits: a test transaction keeps every
def test_accepted_run_bodies_leave_nothing_behind(team_a, api_for, uncaptured_request_log):  # on_commit hook
    from agents_app.models import Run
    from tests.runs import agent

    agent(team_a, "Lead")
    api = api_for(team_a, "operator")
    task = "word, [and] {more}; " * 9_000  # 180,000 characters of commas and brackets inside one string
    script = {"lead": [{"text": f"turn {n}: " + "x" * 60} for n in range(20_000)]}
    body = json.dumps({"agent": "lead", "input": task, "script": script})
    assert 1 * MB < len(body) < 2 * MB
    api.post("/api/runs", body, content_type=JSON)  # warm: first-call caches (schemas, settings) are not growth
    statuses = []

    def eight():
        for _ in range(8):
            statuses.append(api.post("/api/runs", body, content_type=JSON).status_code)

    _, _, retained = _allocated_by(eight)
    assert statuses == [201] * 8
    assert retained < 2 * MB, retained
    assert Run.objects.filter(team=team_a, input=task).count() == 9
