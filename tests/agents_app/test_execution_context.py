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


def test_a_later_step_sees_the_runs_findings_the_shared_knowledge_its_agents_added(
        team_a, celery_worker_process):
    from agents_app.execution.journal import session_messages
    from agents_app.models import Session
    from memory_app.models import Memory

    agent(team_a, "Researcher", "tools: [knowledge_contribute, set_output]\n")
    agent(team_a, "Reviewer")
    define(team_a, WORKFLOW, FLOW)
    # Another run's shared knowledge is the team's, not this run's finding.
    Memory.objects.create(team=team_a, content="Older team knowledge.", shared=True, embedding=[0.1] * 384)
    script = {
        "researcher": [
            {"tool_calls": [call("knowledge_contribute", content="Spring tides follow the full moon.")[
                "tool_calls"][0], {"name": "set_output", "arguments": {"name": "findings", "value": "tides"}},
                {"name": "set_output", "arguments": {"name": "sources", "value": "NOAA"}}]},
            {"text": "Research complete."}],
        "reviewer": [{"expect": ["## Findings so far\n- Spring tides follow the full moon. (from researcher)"],
                      "text": "approve"}],
    }
    run = finish(workflow_run_start(team=team_a, workflow="notes", inputs={"topic": "tides"}, script=script))
    assert (run.status, run.error) == ("succeeded", "")
    assert [e.data["content"] for e in events(run, "memory_stored")] == ["Spring tides follow the full moon."]
    review = Session.objects.get(run=run, agent="reviewer")
    task = session_messages(session_id=review.id)[1].content
    findings = task[task.index("## Findings so far"):]
    assert findings.split("\n\n")[0] == "## Findings so far\n- Spring tides follow the full moon. (from researcher)"
    assert "Older team knowledge." not in task
    # The first step started before anything was found: its message has no findings section.
    research = Session.objects.get(run=run, agent="researcher")
    assert "## Findings so far" not in session_messages(session_id=research.id)[1].content
