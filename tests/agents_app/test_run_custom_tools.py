"""Custom tools run a worker agent on the filled prompt and return its (validated) result."""

import json
import time

import pytest

from agents_app.kinds import AGENT

from tools_app.kinds import TOOL
from mas_core.definitions.services import definition_parse, definition_save
from agents_app.execution.runs import run_start
from agents_app.models import Activation, Event, Run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

LEAD = """---
name: Lead
tools:
- vfs_write
- shout
custom_tools:
- name: summarize
  description: Summarize a text.
  parameters:
    text:
      description: The text.
    words:
      type: integer
      required: false
  prompt: 'Summarize in {{words}} words: {{text}}'
  result_schema:
    type: object
    properties:
      summary:
        type: string
    required:
    - summary
---

You delegate the boring parts.
"""

SHOUT = "---\nname: shout\ndescription: Shout a word.\nparameters:\n  word: {}\nprompt: 'Shout {{word}}'\n---\n"


def setup_team(team):
    for kind, text in ((TOOL, SHOUT), (AGENT, LEAD)):
        definition_save(kind=kind, team=team, parsed=definition_parse(kind=kind, team=team, text=text))


def finish(run):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run.pk)
        if run.status in {"succeeded", "failed", "cancelled"}:
            return run
        time.sleep(0.1)
    raise AssertionError(run.status)


def results(run):
    return [(e.data["name"], e.data["ok"], e.data["error_kind"], e.data["content"])
            for e in Event.objects.filter(run=run, type="tool_result").order_by("seq")]


def test_a_custom_tool_returns_its_workers_validated_result(team_a, celery_worker_process):
    setup_team(team_a)
    script = {
        "lead": [{"tool_calls": [
            {"name": "summarize", "arguments": {"text": "A very long story.", "words": 3}},
            {"name": "shout", "arguments": {"word": "hey"}},
        ]}, {"text": "Done."}],
        "summarize": [{"text": '```json\n{"summary": "short story"}\n```'}],
        "shout": [{"text": "HEY!"}],
    }
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script))
    assert (run.status, run.result) == ("succeeded", "Done.")
    assert results(run) == [("summarize", True, None, '{"summary": "short story"}'),
                            ("shout", True, None, "HEY!")]
    workers = Activation.objects.filter(run=run, kind="tool").order_by("created_at")
    assert [(a.agent, a.input, a.status) for a in workers] == [
        ("summarize", "Summarize in 3 words: A very long story.", "done"), ("shout", "Shout hey", "done")]
    request = Event.objects.filter(run=run, type="session_start", agent="summarize").get()
    assert request.data["kind"] == "tool"


def test_a_result_that_does_not_match_the_schema_is_a_clear_tool_error(team_a, celery_worker_process):
    setup_team(team_a)
    script = {
        "lead": [{"tool_calls": [{"name": "summarize", "arguments": {"text": "x"}}]}, {"text": "Noted."}],
        "summarize": [{"text": json.dumps({"gist": "x"})}],
    }
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script))
    assert results(run) == [(
        "summarize", False, "validation_failed",
        "summarize: the worker's result does not match result_schema at (root): 'summary' is a required property",
    )]
    assert run.status == "succeeded"


def test_arguments_that_fail_the_tools_schema_never_start_a_worker(team_a, celery_worker_process):
    setup_team(team_a)
    script = {"lead": [{"tool_calls": [{"name": "summarize", "arguments": {"words": "many"}}]}, {"text": "ok"}]}
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script))
    [(name, ok, kind, content)] = results(run)
    assert (name, ok, kind) == ("summarize", False, "invalid_arguments")
    assert content.startswith("Invalid arguments for summarize: ")
    assert "text: Field required" in content
    assert not Activation.objects.filter(run=run, kind="tool").exists()
