"""Runs as AG-UI events: an exposed agent started with AG-UI's RunAgentInput, and a run of the team attached to,
read as an AG-UI client reads them — each SSE event validated by ``ag-ui-protocol``'s own event models — against a
real daphne and a real worker (the agent's model a local server speaking OpenAI's wire format)."""

from __future__ import annotations

import json

import httpx
import pytest
from ag_ui.core import Event
from pydantic import TypeAdapter

from agents_app.models import Run, WorkspaceFile
from tests.agents_app.llm.fake_servers import openai_stream, sse
from tests.runs import agent
from tests.agents_app.doors import provider, run_example, token_of, web  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]
EVENTS = TypeAdapter(Event)


def read(response: httpx.Response) -> list:
    """The AG-UI events of an SSE answer, each validated by the protocol's models."""
    return [EVENTS.validate_python(json.loads(line.removeprefix("data: ")))
            for line in response.iter_lines() if line.startswith("data: ")]


def test_an_agui_client_starts_an_exposed_agent_and_reads_its_run_then_attaches_to_it(
        web, team_a, team_b, provider, make_member, make_token, celery_worker_process):
    agent(team_a, "Helper", "expose: true\ntier: medium\ntools: [vfs_write]\n")
    provider.add(sse(openai_stream(tool_calls=[("c1", "vfs_write", ['{"path": "a.md", "content": "tides"}'])],
                                   usage=(5, 5))),
                 sse(openai_stream(text=["Written ", "down."], usage=(6, 2))))
    operator = {"Authorization": f"Bearer {token_of(team_a, 'operator', make_member, make_token)}"}
    body = {"threadId": "thread-1", "runId": "client-run-1", "state": {}, "tools": [], "context": [],
            "forwardedProps": {}, "messages": [{"id": "m1", "role": "user", "content": "Note the tides"}]}
    with httpx.stream("POST", f"{web}/ag-ui/agents/helper", json=body, headers=operator, timeout=60) as answer:
        assert (answer.status_code, answer.headers["content-type"]) == (200, "text/event-stream")
        started = read(answer)
    run = Run.objects.get()
    assert (run.status, run.input, WorkspaceFile.objects.get(run=run).content) == (
        "succeeded", "Note the tides", "tides")
    assert answer.headers["x-mas-run"] == str(run.id)
    kinds = [event.type.value for event in started]
    assert kinds == ["RUN_STARTED", "STEP_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END",
                     "CUSTOM", "TOOL_CALL_RESULT", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                     "TEXT_MESSAGE_END", "STEP_FINISHED", "RUN_FINISHED"]
    assert (started[0].thread_id, started[0].run_id) == ("thread-1", "client-run-1")
    assert (started[1].step_name, started[2].tool_call_name, json.loads(started[3].delta)) == (
        "helper", "vfs_write", {"path": "a.md", "content": "tides"})
    assert started[5].name == "mas.file_change"
    assert started[8].delta == "Written down."
    assert (started[-1].thread_id, started[-1].run_id, started[-1].result) == ("thread-1", "client-run-1",
                                                                                "Written down.")

    # Attached later, the same run tells the same story, under its own id.
    viewer = {"Authorization": f"Bearer {token_of(team_a, 'viewer', make_member, make_token)}"}
    with httpx.stream("GET", f"{web}/ag-ui/runs/{run.id}", headers=viewer, timeout=60) as again:
        attached = read(again)
    assert [event.type.value for event in attached] == kinds
    assert (attached[0].thread_id, attached[0].run_id) == (str(run.id), str(run.id))

    other = {"Authorization": f"Bearer {token_of(team_b, 'admin', make_member, make_token)}"}
    refused = httpx.get(f"{web}/ag-ui/runs/{run.id}", headers=other)
    assert (refused.status_code, refused.json()["error"]["code"]) == (404, "not_found")
    viewer_starts = httpx.post(f"{web}/ag-ui/agents/helper", json=body, headers=viewer)
    assert (viewer_starts.status_code, viewer_starts.json()["error"]["code"]) == (403, "insufficient_permissions")
    bad = httpx.post(f"{web}/ag-ui/agents/helper", json={"threadId": "t"}, headers=operator)
    assert (bad.status_code, bad.json()["error"]["param"]) == (400, "runId")
    assert Run.objects.count() == 1


def test_the_manuals_example_reads_a_runs_agui_events(web, team_a, provider, make_member, make_token,
                                                      celery_worker_process, tmp_path):
    from agents_app.execution.runs import run_start
    from tests.runs import finish

    agent(team_a, "Helper", "tier: medium\n")
    provider.add(sse(openai_stream(text=["Paris."], usage=(9, 2))))
    run = finish(run_start(team=team_a, agent="helper", input="Capital of France?"))
    token = token_of(team_a, "viewer", make_member, make_token)
    done = run_example(tmp_path, "docs/reference/ag-ui.md", "TypeAdapter", web, token, str(run.id))
    assert (done.returncode, done.stdout.split()) == (0, [
        "RUN_STARTED", "STEP_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "STEP_FINISHED", "RUN_FINISHED"]), done.stderr


def test_the_readmes_example_runs_an_agent_and_prints_its_text_as_it_streams(
        web, team_a, provider, make_member, make_token, celery_worker_process, tmp_path):
    agent(team_a, "Helper", "expose: true\ntier: medium\n")
    provider.add(sse(openai_stream(text=["Par", "is."], usage=(9, 2))))
    token = token_of(team_a, "operator", make_member, make_token)
    done = run_example(tmp_path, "README.md", "/ag-ui/agents/helper", web, token)
    assert (done.returncode, done.stdout) == (0, "Paris."), done.stderr
    assert Run.objects.get().result == "Paris."
