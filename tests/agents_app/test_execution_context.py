"""The execution context reaches the model: checked by the scripted provider's ``expect`` on the real request."""

import pytest

from workflows_app.kinds import WORKFLOW
from agents_app.execution.runs import run_start
from agents_app.models import WorkspaceFile
from tests.runs import agent, call, define, events, finish
from workflows_app.services import workflow_run_start

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

FLOW = """---
name: Notes
inputs: [topic]
steps:
- id: research
  agent: researcher
  prompt: "Research {topic}"
  outputs: [findings, sources]
- id: review
  agent: reviewer
  depends_on: [research]
  prompt: "Review the research on {topic}"
  outputs: [verdict]
---
"""


def test_a_step_sees_its_dependencies_outputs_and_answer_and_the_files_earlier_steps_wrote(
        team_a, celery_worker_process):
    agent(team_a, "Researcher")
    agent(team_a, "Reviewer")
    define(team_a, WORKFLOW, FLOW)
    script = {
        "researcher": [
            {"tool_calls": [call("vfs_write", path="notes.md", content="tidal notes")["tool_calls"][0],
                            {"name": "set_output", "arguments": {"name": "findings", "value": "The moon pulls."}},
                            {"name": "set_output", "arguments": {"name": "sources", "value": "NOAA"}}]},
            {"text": "Research complete."}],
        "reviewer": [{"expect": ["Review the research on tides", "## Results of earlier steps", "### research",
                                 "**findings**:\nThe moon pulls.", "**sources**:\nNOAA",
                                 "**final answer**:\nResearch complete.",
                                 "## Files in the workspace\n- notes.md (11 B, by researcher)"],
                      "text": "approve"}],
    }
    run = finish(workflow_run_start(team=team_a, workflow="notes", inputs={"topic": "tides"}, script=script))
    assert (run.status, run.error) == ("succeeded", "")
    assert [e.data["outputs"] for e in events(run, "step_complete")] == [
        {"findings": "The moon pulls.", "sources": "NOAA"}, {"verdict": "approve"}]


def test_a_context_too_long_for_a_small_model_is_written_to_a_file_the_child_can_read(
        team_a, celery_worker_process):
    agent(team_a, "Lead")
    agent(team_a, "Helper", "tier: small\n")
    context = "".join(f"fact {i}: the tide table for day {i}.\n" for i in range(200))  # ~7 KB
    [path] = ["context/helper-"]  # followed by the activation's short id
    script = {
        "lead": [{"tool_calls": [{"name": "delegate", "arguments": {"agent": "helper", "task": "Summarise",
                                                                   "context": context}}]},
                 {"expect": "fact 199", "text": "ok"}],
        "helper": [{"expect": ["## Context from lead", "fact 0:", f"the full text is in `{path}",
                               {"regex": r"\[… \d+ bytes in all"}],
                    "tool_calls": [{"name": "vfs_list", "arguments": {"prefix": "context/"}}]},
                   {"text": "fact 199 noted"}],
    }
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script))
    assert (run.status, run.error) == ("succeeded", "")
    [spilled] = WorkspaceFile.objects.filter(run=run, path__startswith="context/helper-")
    assert spilled.path.endswith("/parent-context.md") and spilled.content == context.strip()
    assert spilled.author == "helper"
