"""A multi-agent run on a real Celery worker, with the scripted provider."""

import json
import time

import pytest

from agents_app.kinds import AGENT
from mas_core.definitions.services import definition_parse, definition_save
from agents_app.execution.runs import run_start
from agents_app.models import Event, Run, Session, WorkspaceFile

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

SCOUT = "---\nname: Scout\n---\n\nYou scout and report.\n"


def agent(team, name, body="You work."):
    parsed = definition_parse(kind=AGENT, team=team, text=f"---\nname: {name}\n---\n\n{body}\n")
    definition_save(kind=AGENT, team=team, parsed=parsed)


def wait_for(run_id, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run_id)
        if run.status in {"succeeded", "failed", "cancelled"}:
            return run
        time.sleep(0.2)
    raise AssertionError(f"run still {run.status} after {timeout} s: {list(Event.objects.filter(run=run).values_list('type', flat=True))}")


def call(name, **arguments):
    return {"name": name, "arguments": arguments}


SCRIPT = {
    "lead": [
        {"tool_calls": [
            call("vfs_write", path="notes.md", content="plan: send two scouts"),
            call("spawn_agent", filename="scout.md", content=SCOUT, task="Scout the north"),
            call("spawn_agent", filename="scout2.md", content=SCOUT, task="Scout the south"),
        ]},
        # Resumed once both scouts have ended, with their outcomes as the two calls' results.
        {"text": "All done: the south has water.", "expect": ["North mapped by helper.", "the south has water",
                                                              '"path": "out/south.md"']},
    ],
    "scout": [
        {"tool_calls": [call("delegate", agent="helper", task="Map the north")]},
        {"text": "North mapped by helper.", "expect": '"result": "North mapped."'},
    ],
    "scout2": [
        {"tool_calls": [call("vfs_write", path="out/south.md", content="water")]},
        {"text": "the south has water"},
    ],
    "helper": [{"text": "North mapped.", "expect": "Map the north"}],
}


def test_root_spawns_children_one_delegates_and_each_waits_for_the_outcomes(team_a, celery_worker_process):
    agent(team_a, "Lead")
    agent(team_a, "Helper")
    run = run_start(team=team_a, agent="lead", input="Explore", script=SCRIPT)
    run = wait_for(run.id)

    assert run.status == "succeeded", run.error
    assert run.result == "All done: the south has water."
    events = list(Event.objects.filter(run=run).order_by("seq"))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    types = [e.type for e in events]
    assert types[0] == "run_start" and types[-1] == "run_complete"
    assert types.count("spawn") == 2 and types.count("delegate") == 1 and types.count("signal") == 0
    # Four sessions; the two that waited were suspended once and resumed once.
    assert types.count("session_end") == 4 and types.count("session_start") == 6
    assert sorted(e.agent for e in events if e.type == "session_suspended") == ["lead", "scout"]
    spawns = [(e.agent, e.data["to"], e.data["wait"]) for e in events if e.type == "spawn"]
    assert spawns == [("lead", "scout", True), ("lead", "scout2", True)]
    assert [(e.agent, e.data["to"]) for e in events if e.type == "delegate"] == [("scout", "helper")]
    # The lead's session, event by event: suspended after its first turn's calls, resumed with both outcomes.
    first = events[types.index("session_start")].session_id
    assert [e.type for e in events if e.session_id == first] == [
        "session_start", "llm_request", "llm_response",
        "tool_call", "file_change", "tool_result",
        "tool_call", "file_change",
        "tool_call", "file_change", "session_suspended",
        "session_start", "tool_result", "tool_result",
        "llm_request", "stream_chunk", "llm_response", "session_end",
    ]
    resumed = [e for e in events if e.session_id == first and e.type == "session_start"]
    assert [e.data["resumed"] for e in resumed] == [False, True]
    outcomes = [json.loads(e.data["content"]) for e in events if e.type == "tool_result" and e.agent == "lead"
                and e.data["name"] == "spawn_agent"]
    assert outcomes == [
        {"agent": "scout", "status": "ok", "result": "North mapped by helper.", "outputs": {}, "files": [],
         "failure": None},
        {"agent": "scout2", "status": "ok", "result": "the south has water", "outputs": {},
         "files": [{"path": "out/south.md", "bytes": 5}], "failure": None},
    ]
    files = dict(WorkspaceFile.objects.filter(run=run).values_list("path", "content"))
    assert files == {"notes.md": "plan: send two scouts", "agents/scout.md": SCOUT, "agents/scout2.md": SCOUT,
                     "out/south.md": "water"}
    sessions = Session.objects.filter(run=run)
    assert sorted(s.agent for s in sessions) == ["helper", "lead", "scout", "scout2"]
    assert all(s.status == "ok" for s in sessions)
    assert run.versions == {"agent:lead": 1, "agent:helper": 1}
    assert run.completion_tokens > 0 and run.prompt_tokens > 0


def test_a_finished_run_exported_as_a_script_replays_to_the_same_calls_and_files(team_a, celery_worker_process):
    from agents_app.execution.replay import run_script_export

    agent(team_a, "Lead")
    agent(team_a, "Helper")
    first = wait_for(run_start(team=team_a, agent="lead", input="Explore", script=SCRIPT).id)
    script = run_script_export(run=first)
    assert script["lead"][0]["tool_calls"][0] == {"name": "vfs_write",
                                                  "arguments": {"path": "notes.md", "content": "plan: send two scouts"}}
    assert [turn.get("text") for turn in script["lead"]] == [None, "All done: the south has water."]
    assert script["helper"] == [{"text": "North mapped.", "usage": script["helper"][0]["usage"]}]

    replay = wait_for(run_start(team=team_a, agent="lead", input="Explore", script=script).id)

    def calls(run):
        return sorted((e.agent, e.data["name"], repr(e.data["arguments"]))
                      for e in Event.objects.filter(run=run, type="tool_call"))

    assert replay.status == "succeeded" and replay.result == first.result
    assert calls(replay) == calls(first)
    files = lambda run: dict(WorkspaceFile.objects.filter(run=run).values_list("path", "content"))  # noqa: E731
    assert files(replay) == files(first)
    assert (replay.prompt_tokens, replay.completion_tokens) == (first.prompt_tokens, first.completion_tokens)
