"""The runs API: start, list, detail with the session tree, events, files, cancel; roles and team scoping.

Tests that execute sessions use a real Celery worker and committed data
(``transaction=True``); the others create runs inside the test transaction,
where nothing is dispatched (``on_commit`` never fires), so they stay queued.
"""

from __future__ import annotations

import time
from decimal import Decimal

import pytest

from agents_app.kinds import AGENT
from mas_core.definitions.services import definition_parse, definition_save
from agents_app.execution.runs import run_start
from agents_app.execution.tool_requests import workspace_write
from agents_app.models import Activation, Event, Run, Session, WorkspaceFile

BAD_ID = "not-a-uuid"


def agent(team, name, body="You work."):
    parsed = definition_parse(kind=AGENT, team=team, text=f"---\nname: {name}\n---\n\n{body}\n")
    definition_save(kind=AGENT, team=team, parsed=parsed)


def call(name, **arguments):
    return {"name": name, "arguments": arguments}


def wait_for(client, run_id, *, until=("succeeded", "failed", "cancelled"), timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get(f"/api/runs/{run_id}").json()
        if body["status"] in until:
            return body
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} still {body['status']} after {timeout} s")


def wait_until(predicate, timeout=30, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached within {timeout} s")


SCRIPT = {
    "lead": [
        {"tool_calls": [call("vfs_write", path="notes.md", content="plan"),
                        call("vfs_write", path="out/deep/report.md", content="# Report\nfound it"),
                        call("delegate", agent="helper", task="Check the report")],
         "usage": {"prompt_tokens": 10, "completion_tokens": 5}},
        {"text": "Done.", "usage": {"prompt_tokens": 7, "completion_tokens": 3}},
    ],
    "helper": [{"text": "Checked.", "usage": {"prompt_tokens": 4, "completion_tokens": 1}}],
}


# -- a whole run through the API on a real worker -------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_run_started_through_the_api_is_readable_in_full(team_a, api_for, celery_worker_process):
    agent(team_a, "Lead")
    agent(team_a, "Helper")
    operator = api_for(team_a, "operator")
    response = operator.post("/api/runs", {"agent": "lead", "input": "Investigate", "script": SCRIPT,
                                           "limits": {"max_depth": 2}, "budget": {"max_cost_usd": "5"}})
    assert response.status_code == 201, response.content
    started = response.json()
    assert started["status"] in {"queued", "running"}
    assert started["agent"] == "lead" and started["input"] == "Investigate"
    assert started["limits"] == {"max_depth": 2, "max_fanout": 5, "max_concurrency": 8, "max_retries": 2}
    assert started["budget"] == {"max_cost_usd": "5"}
    assert started["uses_script"] is True
    assert started["created_by"] == operator.user.username
    assert [a["kind"] for a in started["activations"]] == ["root"]

    run = wait_for(operator, started["id"])
    assert run["status"] == "succeeded", run["error"]
    assert run["result"] == "Done."
    assert run["error"] == ""
    assert run["versions"] == {"agent:lead": 1, "agent:helper": 1}
    totals = run["totals"]
    assert (totals["prompt_tokens"], totals["completion_tokens"]) == (21, 9)
    assert Decimal(totals["cost_usd"]) == 0
    assert totals["duration_s"] >= 0

    # The tree: the root and the delegate below it, each with one session.
    lead, helper = run["activations"]
    assert {k: lead[k] for k in ("agent", "kind", "parent", "depth", "status", "attempts", "result")} == {
        "agent": "lead", "kind": "root", "parent": None, "depth": 0, "status": "done", "attempts": 1,
        "result": "Done."}
    assert {k: helper[k] for k in ("agent", "kind", "parent", "depth", "status", "attempts", "result", "input")} == {
        "agent": "helper", "kind": "delegate", "parent": lead["id"], "depth": 1, "status": "done", "attempts": 1,
        "result": "Checked.", "input": "Check the report"}
    sessions = {a["agent"]: a["sessions"] for a in run["activations"]}
    assert [(s["attempt"], s["tier"], s["provider"], s["model"], s["status"], s["prompt_tokens"],
             s["completion_tokens"], s["failure"]) for s in sessions["lead"]] == [
        (1, "medium", "scripted", "scripted", "ok", 17, 8, None)]
    assert [(s["attempt"], s["status"], s["prompt_tokens"], s["completion_tokens"]) for s in sessions["helper"]] == [
        (1, "ok", 4, 1)]
    assert sessions["lead"][0]["meta"]["tool_calls"] == 3

    # Events: all of them, contiguous, then pages of them.
    events = operator.get(f"/api/runs/{run['id']}/events").json()
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(events) + 1))
    assert events[0]["type"] == "run_start" and events[-1]["type"] == "run_complete"
    assert set(events[0]) == {"run", "seq", "type", "agent", "session", "data", "created_at"}
    assert events[0]["run"] == run["id"]
    assert [e["data"]["path"] for e in events if e["type"] == "file_change"] == ["notes.md", "out/deep/report.md"]
    assert len(events) == Event.objects.filter(run_id=run["id"]).count()
    after = operator.get(f"/api/runs/{run['id']}/events", {"after": 5}).json()
    assert [e["seq"] for e in after] == seqs[5:]
    page = operator.get(f"/api/runs/{run['id']}/events", {"after": 2, "limit": 3}).json()
    assert [e["seq"] for e in page] == [3, 4, 5]
    assert operator.get(f"/api/runs/{run['id']}/events", {"after": seqs[-1]}).json() == []

    # Files: listed without content, read by a path with slashes.
    files = operator.get(f"/api/runs/{run['id']}/files").json()
    assert [{k: f[k] for k in ("path", "version", "author", "size")} for f in files] == [
        {"path": "notes.md", "version": 1, "author": "lead", "size": 4},
        {"path": "out/deep/report.md", "version": 1, "author": "lead", "size": 17},
    ]
    assert "content" not in files[0]
    report = operator.get(f"/api/runs/{run['id']}/files/out/deep/report.md")
    assert report.status_code == 200
    assert report.json()["content"] == "# Report\nfound it"
    assert report.json()["path"] == "out/deep/report.md"
    assert operator.get(f"/api/runs/{run['id']}/files/out/deep/missing.md").status_code == 404
    assert operator.get(f"/api/runs/{run['id']}/files/out").status_code == 404

    # Exported as a script, it replays to the same files.
    script = operator.get(f"/api/runs/{run['id']}/script").json()
    assert script == {
        "lead": [{"tool_calls": SCRIPT["lead"][0]["tool_calls"], "usage": {"prompt_tokens": 10, "completion_tokens": 5}},
                 {"text": "Done.", "usage": {"prompt_tokens": 7, "completion_tokens": 3}}],
        "helper": [{"text": "Checked.", "usage": {"prompt_tokens": 4, "completion_tokens": 1}}],
    }
    replay = operator.post("/api/runs", {"agent": "lead", "input": "Investigate", "script": script}).json()
    replay = wait_for(operator, replay["id"])
    assert replay["status"] == "succeeded" and replay["result"] == "Done."
    replayed = operator.get(f"/api/runs/{replay['id']}/files").json()
    assert [(f["path"], f["size"]) for f in replayed] == [(f["path"], f["size"]) for f in files]

    # The list and its filters.
    viewer = api_for(team_a, "viewer")
    assert [r["id"] for r in viewer.get("/api/runs").json()] == [replay["id"], run["id"]]
    assert [r["id"] for r in viewer.get("/api/runs", {"status": "succeeded", "agent": "lead", "limit": 1,
                                                      "offset": 1}).json()] == [run["id"]]
    assert viewer.get("/api/runs", {"status": "failed"}).json() == []
    assert viewer.get(f"/api/runs/{run['id']}/script").status_code == 200
    assert viewer.get("/api/runs", {"agent": "helper"}).json() == []
    assert viewer.get("/api/runs", {"workflow": "pipeline"}).json() == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_cancel_stops_the_session_and_marks_it_cancelled(team_a, api_for, celery_worker_process):
    agent(team_a, "Lead")
    operator = api_for(team_a, "operator")
    script = {"lead": [{"tool_calls": [call("vfs_write", path="late.md", content="too late")], "latency_ms": 2500},
                       {"text": "never reached"}]}
    run_id = operator.post("/api/runs", {"agent": "lead", "input": "Wait", "script": script}).json()["id"]
    wait_until(lambda: Event.objects.filter(run_id=run_id, type="llm_request").exists(), what="the model call")

    response = operator.post(f"/api/runs/{run_id}/cancel")
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert response.json()["error"] == f"cancelled by {operator.user.username}"

    wait_until(lambda: not Session.objects.filter(run_id=run_id, status="running").exists(), timeout=15,
               what="the session to stop")
    session = Session.objects.get(run_id=run_id)
    assert session.status == "cancelled"
    assert Activation.objects.get(run_id=run_id).status == "cancelled"
    body = operator.get(f"/api/runs/{run_id}").json()
    assert body["status"] == "cancelled"
    assert body["activations"][0]["sessions"][0]["status"] == "cancelled"
    # The tool call that came back after the cancel never ran.
    assert not WorkspaceFile.objects.filter(run_id=run_id).exists()
    types = [e["type"] for e in operator.get(f"/api/runs/{run_id}/events").json()]
    assert "tool_call" not in types
    assert types.count("run_complete") == 1
    # Cancelling again changes nothing.
    again = operator.post(f"/api/runs/{run_id}/cancel")
    assert again.status_code == 200 and again.json()["status"] == "cancelled"
    assert [e["type"] for e in operator.get(f"/api/runs/{run_id}/events").json()].count("run_complete") == 1


# -- starting: roles and payloads (nothing dispatched) ------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["operator", "admin"])
def test_operators_and_admins_start_runs(team_a, api_for, role):
    agent(team_a, "Lead")
    client = api_for(team_a, role)
    response = client.post("/api/runs", {"agent": "lead", "input": "Go"})
    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    assert (run.team, run.agent, run.input, run.status, run.created_by) == (team_a, "lead", "Go", "queued", client.user)
    assert run.script is None
    assert list(run.activations.values_list("agent", "kind", "depth")) == [("lead", "root", 0)]
    assert list(run.events.values_list("seq", "type")) == [(1, "run_start"), (2, "activation_queued")]


@pytest.mark.django_db
def test_the_start_answers_the_new_run_as_a_read_shows_it_in_six_statements(team_a, api_for):
    """The answer is built from what the start wrote, not read back, and equals a read's; the token with its
    member's role, the agent's row (the view's check, then the script's and the version's), the run, and the
    root activation with both events and the ready notice: six statements (two are the transaction's savepoint
    here)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    agent(team_a, "Lead")
    client = api_for(team_a, "operator")
    script = {"lead": [{"text": "Done."}]}
    assert client.post("/api/runs", {"agent": "lead", "input": "First"}).status_code == 201  # the token's first use
    with CaptureQueriesContext(connection) as queries:
        response = client.post("/api/runs", {"agent": "lead", "input": "Go", "script": script,
                                             "approvals": ["vfs_write"], "budget": {"max_cost_usd": "2"}})
    assert response.status_code == 201, response.content
    statements = [" ".join(query["sql"].split()[:3]) for query in queries]
    assert [s for s in statements if "SAVEPOINT" not in s] == [
        'SELECT t."id", t."team_id",',
        'SELECT g."id", g."team_id",',
        'INSERT INTO "agents_app_run"',
        'WITH root AS',
    ], statements
    started = response.json()
    assert started == client.get(f"/api/runs/{started['id']}").json()
    [root] = started["activations"]
    assert (root["agent"], root["kind"], root["status"], root["sessions"]) == ("lead", "root", "ready", [])
    assert (started["steps"], started["forks"], started["totals"]["cache_hits"], started["uses_script"]) == (
        None, [], 0, True)
    assert [(e["seq"], e["type"]) for e in client.get(f"/api/runs/{started['id']}/events").json()] == [
        (1, "run_start"), (2, "activation_queued")]


@pytest.mark.django_db
def test_a_read_shows_the_run_its_tree_cache_use_and_forks_in_four_statements(team_a, api_for):
    """The token with its member's role, the run with its creator, cache counts and forks, its activations with
    their sessions, and its workflow's row (none here): four statements however big the tree. Activations come
    oldest first, each with its sessions by attempt; one with no session shows none."""
    from django.core.serializers.json import DjangoJSONEncoder
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from mas_core.eventlog import event_append

    agent(team_a, "Lead")
    client = api_for(team_a, "viewer")
    run = run_start(team=team_a, agent="lead", input="Go", user=client.user)
    child = Activation.objects.create(run=run, agent="lead", kind="delegate", parent=run.root, depth=1, input="Check")
    for attempt, status in ((2, "ok"), (1, "failed")):
        Session.objects.create(run=run, activation=run.root, agent="lead", attempt=attempt, status=status,
                               cost_usd=Decimal("0.25"), meta={"tool_calls": attempt})
    for type_ in ("cache_hit", "cache_miss", "cache_hit"):
        event_append(run_id=run.id, type=type_, agent="lead")
    forks = [Run.objects.create(team=team_a, agent="lead", forked_from=run, fork_seq=seq) for seq in (4, 2)]
    assert client.get(f"/api/runs/{run.id}").status_code == 200  # the token's first use
    with CaptureQueriesContext(connection) as queries:
        response = client.get(f"/api/runs/{run.id}")
    assert response.status_code == 200, response.content
    assert len(queries) == 4, [query["sql"][:60] for query in queries]
    detail = response.json()
    assert (detail["created_by"], detail["input"], detail["steps"]) == (client.user.username, "Go", None)
    assert (detail["totals"]["cache_hits"], detail["totals"]["cache_misses"]) == (2, 1)
    assert [(a["id"], a["kind"], a["parent"], [(s["attempt"], s["status"], s["cost_usd"], s["meta"])
                                               for s in a["sessions"]]) for a in detail["activations"]] == [
        (str(run.root.id), "root", None, [(1, "failed", "0.25", {"tool_calls": 1}),
                                          (2, "ok", "0.25", {"tool_calls": 2})]),
        (str(child.id), "delegate", str(run.root.id), []),
    ]
    assert detail["forks"] == [{"id": str(fork.id), "seq": fork.fork_seq, "status": "queued",
                                "created_at": DjangoJSONEncoder().default(fork.created_at)} for fork in forks]


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["viewer", "editor"])
def test_viewers_and_editors_cannot_start_or_cancel(team_a, api_for, role):
    agent(team_a, "Lead")
    run = run_start(team=team_a, agent="lead", input="Existing")
    client = api_for(team_a, role)
    response = client.post("/api/runs", {"agent": "lead", "input": "Go"})
    assert response.status_code == 403
    assert "does not allow run" in response.json()["detail"]
    assert Run.objects.count() == 1
    assert client.post(f"/api/runs/{run.id}/cancel").status_code == 403
    run.refresh_from_db()
    assert run.status == "queued"
    # Reading is fine.
    assert client.get(f"/api/runs/{run.id}").status_code == 200
    assert client.get(f"/api/runs/{run.id}/events").status_code == 200


@pytest.mark.django_db
def test_anonymous_gets_401(team_a):
    from tests.conftest import ApiClient

    anonymous = ApiClient()
    assert anonymous.get("/api/runs").status_code == 401
    assert anonymous.post("/api/runs", {"agent": "lead", "input": "x"}).status_code == 401


def _loc_and_message(response):
    assert response.status_code == 422, response.content
    detail = response.json()["detail"]
    return detail[0]["loc"], detail[0]["msg"]


@pytest.mark.django_db
def test_malformed_start_payloads_are_422_and_start_nothing(team_a, team_b, api_for):
    agent(team_a, "Lead")
    agent(team_b, "Other")
    client = api_for(team_a, "operator")

    loc, message = _loc_and_message(client.post("/api/runs", {"agent": "ghost", "input": "x"}))
    assert loc == ["body", "agent"] and "ghost" in message
    # Another team's agent is unknown here.
    loc, _ = _loc_and_message(client.post("/api/runs", {"agent": "other", "input": "x"}))
    assert loc == ["body", "agent"]
    loc, _ = _loc_and_message(client.post("/api/runs", {"agent": "../lead", "input": "x"}))
    assert loc == ["body", "agent"]
    loc, _ = _loc_and_message(client.post("/api/runs", {"agent": "lead"}))
    assert loc == ["body", "input"]
    loc, _ = _loc_and_message(client.post("/api/runs", {"agent": "lead", "input": "x", "colour": "red"}))
    assert loc == ["body", "colour"]
    loc, message = _loc_and_message(client.post("/api/runs", {"agent": "lead", "input": "x", "script": {"lead": "hi"}}))
    assert loc == ["body", "script"] and "expected a list of turns" in message
    loc, message = _loc_and_message(client.post(
        "/api/runs", {"agent": "lead", "input": "x", "script": {"lead": [{"text": "a"}, {"error": "melted"}]}}))
    assert loc == ["body", "script"] and "turn 1" in message
    loc, _ = _loc_and_message(client.post("/api/runs", {"agent": "lead", "input": "x", "script": ["no"]}))
    assert loc[:2] == ["body", "script"]
    loc, _ = _loc_and_message(client.post("/api/runs", {"agent": "lead", "input": "x", "limits": {"max_bogus": 1}}))
    assert loc == ["body", "limits", "max_bogus"]
    loc, _ = _loc_and_message(client.post("/api/runs", {"agent": "lead", "input": "x", "limits": {"max_depth": -1}}))
    assert loc == ["body", "limits", "max_depth"]
    loc, _ = _loc_and_message(client.post("/api/runs", {"agent": "lead", "input": "x",
                                                        "budget": {"max_cost_usd": "-1"}}))
    assert loc == ["body", "budget", "max_cost_usd"]
    loc, _ = _loc_and_message(client.post("/api/runs", {"agent": "lead", "input": "x", "provider": "nowhere"}))
    assert loc == ["body", "provider"]
    loc, _ = _loc_and_message(client.post("/api/runs", {"agent": "lead", "input": 5}))
    assert loc == ["body", "input"]

    assert client.post("/api/runs", "{not json", content_type="application/json").status_code == 400
    assert client.post("/api/runs", "agent=lead", content_type="application/x-www-form-urlencoded").status_code == 415
    assert client.post("/api/runs", '{"agent": "lead", "input": "\\u0000"}',
                       content_type="application/json").status_code == 400
    assert client.post("/api/runs", "[]", content_type="application/json").status_code == 422
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_script_numbers_the_database_cannot_store_or_the_session_cannot_wait_for_are_422(team_a, api_for):
    from agents_app.kinds import AGENT as kind

    definition_save(kind=kind, team=team_a, parsed=definition_parse(
        kind=kind, team=team_a, text="---\nname: Lead\nlimits:\n  timeout_s: 30\n---\n\nYou lead.\n"))
    client = api_for(team_a, "operator")

    def refused(script):
        return _loc_and_message(client.post("/api/runs", {"agent": "lead", "input": "x", "script": script}))

    assert refused({"lead": [{"text": "x", "usage": {"completion_tokens": 1e30}}]}) == (
        ["body", "script"],
        "script for agent lead, turn 0: usage.completion_tokens must be an integer from 0 to "
        "10000000, not 1e+30")
    assert refused({"lead": [{"text": "x", "latency_ms": 10**12}]}) == (
        ["body", "script"],
        "script for agent lead, turn 0: latency_ms must be a number from 0 to 86400000, "
        "not 1000000000000")
    # Within the schema's bounds, but longer than this agent's own session timeout (30 s).
    assert refused({"lead": [{"text": "x"}, {"text": "y", "latency_ms": 30_001}]}) == (
        ["body", "script"], "script for agent lead, turn 1: latency_ms 30001 is longer than the session "
                            "timeout of 30 s")
    assert refused({"*": [{"text": "x", "latency_ms": 31_000}]}) == (
        ["body", "script"], "script for agent *, turn 0: latency_ms 31000 is longer than the session timeout "
                            "of 30 s")
    assert Run.objects.count() == 0 and Event.objects.count() == 0
    ok = client.post("/api/runs", {"agent": "lead", "input": "x", "script": {
        "lead": [{"text": "x", "latency_ms": 30_000, "usage": {"prompt_tokens": 10_000_000}}]}})
    assert ok.status_code == 201, ok.content


@pytest.mark.django_db
def test_budget_and_limits_are_stored_as_given(team_a, api_for):
    agent(team_a, "Lead")
    client = api_for(team_a, "operator")
    response = client.post("/api/runs", {"agent": "lead", "input": "x", "limits": {"max_concurrency": 2},
                                         "budget": {"max_cost_usd": 0.5, "warn_cost_usd": "0.25",
                                                    "max_large_tier_uses": 1}})
    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    assert run.limits == {"max_depth": 3, "max_fanout": 5, "max_concurrency": 2, "max_retries": 2}
    assert run.budget == {"max_cost_usd": "0.5", "warn_cost_usd": "0.25", "max_large_tier_uses": 1}


# -- reading: filters, pages, 404s ---------------------------------------------------------------


@pytest.mark.django_db
def test_list_is_newest_first_and_filters_and_pages(team_a, api_for):
    agent(team_a, "Lead")
    agent(team_a, "Helper")
    first = run_start(team=team_a, agent="lead", input="one")
    second = run_start(team=team_a, agent="helper", input="two")
    third = run_start(team=team_a, agent="lead", input="three")
    Run.objects.filter(pk=second.pk).update(status="failed")
    client = api_for(team_a, "viewer")

    def ids(**query):
        return [r["id"] for r in client.get("/api/runs", query).json()]

    assert ids() == [str(third.id), str(second.id), str(first.id)]
    assert ids(agent="lead") == [str(third.id), str(first.id)]
    assert ids(status="failed") == [str(second.id)]
    assert ids(status="queued", agent="lead", limit=1) == [str(third.id)]
    assert ids(limit=2, offset=1) == [str(second.id), str(first.id)]
    assert ids(offset=3) == []
    listed = client.get("/api/runs").json()[0]
    assert listed["totals"] == {"prompt_tokens": 0, "completion_tokens": 0, "cost_usd": "0",
                                "duration_s": None}
    assert "activations" not in listed
    for bad in ({"status": "done"}, {"limit": 0}, {"limit": 501}, {"offset": -1}, {"limit": "many"}):
        assert client.get("/api/runs", bad).status_code == 422, bad


@pytest.mark.django_db
def test_event_query_bounds(team_a, api_for):
    agent(team_a, "Lead")
    run = run_start(team=team_a, agent="lead", input="x")
    client = api_for(team_a, "viewer")
    assert [e["type"] for e in client.get(f"/api/runs/{run.id}/events").json()] == ["run_start", "activation_queued"]
    assert [e["seq"] for e in client.get(f"/api/runs/{run.id}/events", {"limit": 1}).json()] == [1]
    assert client.get(f"/api/runs/{run.id}/events", {"limit": 5000}).status_code == 200
    response = client.get(f"/api/runs/{run.id}/script")
    assert response.status_code == 409 and "still queued" in response.json()["detail"]
    for bad in ({"limit": 0}, {"limit": 5001}, {"after": -1}, {"after": "x"}):
        response = client.get(f"/api/runs/{run.id}/events", bad)
        assert response.status_code == 422, bad
        assert response.json()["detail"][0]["loc"][0] == "query"


@pytest.mark.django_db
def test_another_teams_run_is_404_everywhere(team_a, team_b, api_for):
    agent(team_b, "Lead")
    theirs = run_start(team=team_b, agent="lead", input="secret")
    workspace_write(run_id=theirs.id, path="out/secret.md", content="classified", agent="lead", session_id=None)
    for role in ("viewer", "operator", "admin"):
        client = api_for(team_a, role)
        for path in ("", "/events", "/files", "/files/out/secret.md", "/script"):
            response = client.get(f"/api/runs/{theirs.id}{path}")
            assert response.status_code == 404, (role, path)
            assert "secret" not in response.content.decode()
        assert client.get("/api/runs").json() == []
    operator = api_for(team_a, "operator")
    assert operator.post(f"/api/runs/{theirs.id}/cancel").status_code == 404
    theirs.refresh_from_db()
    assert theirs.status == "queued"
    assert list(theirs.events.values_list("type", flat=True)) == ["run_start", "activation_queued", "file_change"]
    # Their own team sees it.
    own = api_for(team_b, "viewer")
    assert own.get(f"/api/runs/{theirs.id}/files/out/secret.md").json()["content"] == "classified"


@pytest.mark.django_db
def test_ids_that_are_not_uuids_are_404(team_a, api_for):
    client = api_for(team_a, "operator")
    for path in ("", "/events", "/files", "/files/a.md", "/script"):
        response = client.get(f"/api/runs/{BAD_ID}{path}")
        assert response.status_code == 404, path
        assert response.json() == {"detail": "no such run"}
    assert client.post(f"/api/runs/{BAD_ID}/cancel").status_code == 404
    assert client.get("/api/runs/00000000-0000-0000-0000-000000000000").status_code == 404
