"""The start form's "Try without a model" examples: one per built-in tool, each a script the API takes, each
calling its tool with arguments its parameters accept — and, run on a real worker, doing what it says."""

from __future__ import annotations

import pytest

from agents_app.execution.runs import run_start
from agents_app.llm.scripted import validate_script
from agents_app.models import ApprovalRequest, Run, Session
from agents_app.script_examples import EXAMPLES, script_example
from agents_app.kinds import SKILL
from tests.runs import agent, define, events, finish, wait_until
from tools_app.builtin import BUILTIN_TOOL_CLASSES
from tools_app.catalog import BUILTIN_TOOLS

# The example tools whose result depends on the world outside (no network, no search engine here): they are
# called and answered, ok or not.
OUTSIDE = {"web_fetch", "web_search"}


def test_every_builtin_tool_has_an_example_whose_calls_fit_the_tools_parameters():
    assert sorted(EXAMPLES) == sorted(BUILTIN_TOOLS) and len(EXAMPLES) == 24
    for tool in BUILTIN_TOOLS:
        script = script_example(tool=tool, agent="greeter", other="writer", skill="citation-style")
        assert validate_script(script) == script
        calls = [call for turns in script.values() for turn in turns for call in turn.get("tool_calls", [])]
        assert tool in {call["name"] for call in calls}, tool
        for call in calls:
            BUILTIN_TOOL_CLASSES[call["name"]].Parameters.model_validate(call["arguments"])  # raises if not
        assert script["greeter"][-1] == {"text": script["greeter"][-1]["text"]}  # ends with an answer


def test_the_delegate_example_names_the_other_agent_and_needs_one():
    assert script_example(tool="delegate", agent="greeter", other="writer")["greeter"][0] == {
        "tool_calls": [{"name": "delegate", "arguments": {"agent": "writer",
                                                          "task": "Say in one line what you can do."}}]}
    for other in ("", "greeter"):
        with pytest.raises(ValueError, match="another agent of the team"):
            script_example(tool="delegate", agent="greeter", other=other)
    with pytest.raises(ValueError, match="one of the agent's skills"):
        script_example(tool="skill_load", agent="greeter")


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_each_example_runs_its_tool_on_a_worker(team_a, celery_worker_process, api_for, settings):
    settings.MAS_TEAM_SECRETS = ""
    define(team_a, SKILL, "---\nname: Citation style\ndescription: How to cite.\n---\n\nCite the source.\n")
    agent(team_a, "Greeter", "skills:\n- citation-style\ntools:\n" + "".join(f"- {tool}\n" for tool in BUILTIN_TOOLS))
    agent(team_a, "Writer")
    agent(team_a, "Signaller", "tools:\n- signal_parent\n")
    runs = {tool: run_start(team=team_a, agent="greeter", input=f"Show {tool}",
                            script=script_example(tool=tool, agent="greeter", other="writer", skill="citation-style"))
            for tool in BUILTIN_TOOLS}

    question = wait_until(lambda: ApprovalRequest.objects.filter(run=runs["ask_human"], status="pending").first(),
                          90, "the ask_human example's question")
    wait_until(lambda: Session.objects.filter(run=runs["ask_human"], status="suspended").exists(), 30,
               "its session to suspend")
    answered = api_for(team_a, "operator").post(f"/api/approvals/{question.id}",
                                                {"decision": "answer", "answer": "Hello"})
    assert answered.status_code == 200, answered.content

    for tool, run in runs.items():
        run = finish(run, timeout=120)
        assert (run.status, run.error) == ("succeeded", ""), tool
        results = [e.data for e in events(run, "tool_result") if e.data["name"] == tool]
        assert len(results) == 1, (tool, results)
        if tool not in OUTSIDE:
            assert results[0]["ok"], (tool, results[0])
        assert run.result == EXAMPLES[tool][-1]["text"].replace("{other}", "writer").replace(
            "{skill}", "citation-style"), tool
    assert Run.objects.filter(team=team_a).count() == len(BUILTIN_TOOLS)
