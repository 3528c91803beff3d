"""spawn_agent, signal_parent, delegate, set_output: argument checking before the kernel's services.

The services here are recorders: these tests check only what each tool hands
its service, and that nothing is called when the arguments are invalid or the
tool is unavailable. What the services do — children that run, parents that
wait for their outcome — is tested on a real worker in
tests/agents_app/test_delegation.py and tests/agents_app/test_run_end_to_end.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tools_app.plugin import ToolContext, ToolError
from tools_app.registry import ToolOutcome, registry_for_agent
from tools_app.workspace_memory import InMemoryWorkspace

KERNEL = ["spawn_agent", "signal_parent", "delegate", "set_output"]


class Recorder:
    def __init__(self, result: Any = None, error: Exception | None = None) -> None:
        self.calls: list[tuple[tuple, dict]] = []
        self.result, self.error = result, error

    async def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        if self.error:
            raise self.error
        return self.result


def run(tool: str, services: dict | None = None, **arguments) -> tuple[ToolOutcome, InMemoryWorkspace]:
    workspace = InMemoryWorkspace()
    ctx = ToolContext(run_id="run-1", agent="root", session_id="s-1", workspace=workspace, services=services or {})
    return asyncio.run(registry_for_agent(KERNEL).call(tool, arguments, ctx)), workspace


AGENT = "---\nname: researcher\n---\nFind sources."


# --- spawn_agent --------------------------------------------------------------


def test_spawn_hands_its_normalised_path_and_the_workspace_writer_to_the_service():
    spawn = Recorder(result="the service's answer")
    outcome, ws = run("spawn_agent", {"spawn": spawn}, filename="/agents/./researcher.md", content=AGENT,
                      task="find sources")
    assert outcome == ToolOutcome(True, "the service's answer", data="the service's answer")
    [(args, kwargs)] = spawn.calls
    assert args == () and {key: value for key, value in kwargs.items() if key != "write"} == {
        "filename": "agents/researcher.md", "content": AGENT, "task": "find sources", "wait": True}
    assert kwargs["write"] == ws.write
    assert ws.files == {}  # the service writes the file, once, when it starts the child


def test_spawn_without_waiting():
    spawn = Recorder(result="started")
    run("spawn_agent", {"spawn": spawn}, filename="r.md", content=AGENT, task="t", wait=False)
    assert spawn.calls[0][1]["wait"] is False


def test_spawn_limit_error_comes_back_as_the_tool_result():
    error = ToolError("max_depth 2 reached: researcher cannot spawn another level")
    error.kind = "policy_denied"
    spawn = Recorder(error=error)
    outcome, _ = run("spawn_agent", {"spawn": spawn}, filename="r.md", content=AGENT, task="t")
    assert outcome == ToolOutcome(False, "max_depth 2 reached: researcher cannot spawn another level", error_kind="policy_denied")
    assert len(spawn.calls) == 1


def test_spawn_unavailable_writes_nothing():
    outcome, ws = run("spawn_agent", {}, filename="r.md", content=AGENT, task="t")
    assert outcome == ToolOutcome(False, "spawn_agent is not available in this context", error_kind="tool_error")
    assert ws.files == {}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"filename": "r.md", "content": AGENT}, (
            "Invalid arguments for spawn_agent: task: Field required. "
            "Parameters: filename (string, required), content (string, required), task (string, required), "
            "wait (boolean, optional)."
        )),
        ({"filename": "r.md", "content": AGENT, "task": ""}, (
            "Invalid arguments for spawn_agent: task: String should have at least 1 character. "
            "Parameters: filename (string, required), content (string, required), task (string, required), "
            "wait (boolean, optional)."
        )),
        ({"filename": "r.txt", "content": AGENT, "task": "t"}, "filename 'r.txt' must end with .md (an agent definition in markdown)"),
        ({"filename": "../r.md", "content": AGENT, "task": "t"}, "path '../r.md' leaves the workspace: '..' segments are not allowed"),
    ],
)
def test_spawn_bad_arguments_call_nothing(arguments, message):
    spawn = Recorder()
    outcome, ws = run("spawn_agent", {"spawn": spawn}, **arguments)
    assert outcome.ok is False and outcome.content == message
    assert spawn.calls == [] and ws.files == {}


# --- signal_parent ------------------------------------------------------------


def test_signal_parent():
    signal = Recorder(result="parent signalled")
    outcome, _ = run("signal_parent", {"signal_parent": signal}, message="draft ready in out/draft.md")
    assert outcome == ToolOutcome(True, "parent signalled", data="parent signalled")
    assert signal.calls == [((), {"message": "draft ready in out/draft.md"})]


def test_signal_from_a_root_agent_is_an_error():
    signal = Recorder(error=ToolError("root has no parent to signal"))
    outcome, _ = run("signal_parent", {"signal_parent": signal}, message="hi")
    assert outcome == ToolOutcome(False, "root has no parent to signal", error_kind="tool_error")


def test_signal_unavailable_and_invalid():
    assert run("signal_parent", {}, message="hi")[0].content == "signal_parent is not available in this context"
    signal = Recorder()
    outcome, _ = run("signal_parent", {"signal_parent": signal}, message="")
    assert outcome.content == (
        "Invalid arguments for signal_parent: message: String should have at least 1 character. "
        "Parameters: message (string, required)."
    )
    assert signal.calls == []


# --- delegate -----------------------------------------------------------------


def test_delegate_hands_its_defaults_to_the_service():
    delegate = Recorder(result="the service's answer")
    outcome, _ = run("delegate", {"delegate": delegate}, agent="writer", task="summarise")
    assert outcome.content == "the service's answer"
    assert delegate.calls == [((), {"agent": "writer", "task": "summarise", "priority": None, "context": None,
                                    "wait": True})]


def test_delegate_with_priority_structured_context_and_no_wait():
    delegate = Recorder(result={"ok": True})
    outcome, _ = run("delegate", {"delegate": delegate}, agent="writer", task="t", priority=5,
                     context={"files": ["a.md"]}, wait=False)
    assert outcome.content == '{"ok": true}'
    assert delegate.calls == [((), {"agent": "writer", "task": "t", "priority": 5, "context": {"files": ["a.md"]},
                                    "wait": False})]


def test_the_model_reads_what_delegation_does():
    """The descriptions are the contract the worker tests in tests/agents_app/test_delegation.py hold to."""
    from tools_app.builtin.delegate import Delegate
    from tools_app.builtin.spawn_agent import SpawnAgent

    for tool in (Delegate, SpawnAgent):
        assert "With wait (the default) you pause until" in tool.description
        assert ("returns its outcome as a JSON object: status (ok, failed or cancelled), result (its final answer), "
                "outputs (named outputs it set), files (path and bytes of the workspace files it wrote) and failure "
                "(the report when it failed)") in tool.description
        assert "run in parallel; you continue once all of them have finished" in tool.description
        assert "With wait false the call returns at once and the outcome reaches you later as a message" \
            in tool.description
    assert "priority: lower numbers are started first (default 100)" in Delegate.description
    assert "context is shown to the agent with its task" in Delegate.description


def test_delegate_unknown_agent_error_and_invalid_priority():
    delegate = Recorder(error=ToolError("no agent named 'ghost' in this run; agents: writer, researcher"))
    outcome, _ = run("delegate", {"delegate": delegate}, agent="ghost", task="t")
    assert outcome == ToolOutcome(False, "no agent named 'ghost' in this run; agents: writer, researcher", error_kind="tool_error")
    delegate = Recorder()
    outcome, _ = run("delegate", {"delegate": delegate}, agent="writer", task="t", priority="urgent")
    assert outcome.content == (
        "Invalid arguments for delegate: priority: Input should be a valid integer, unable to parse string as an integer. "
        "Parameters: agent (string, required), task (string, required), context (object/string, optional), "
        "priority (integer, optional), wait (boolean, optional)."
    )
    assert delegate.calls == []
    assert run("delegate", {}, agent="w", task="t")[0].content == "delegate is not available in this context"


# --- set_output ---------------------------------------------------------------


@pytest.mark.parametrize("value", ["text", 3, [1, 2], {"k": "v"}, None])
def test_set_output_passes_any_json_value(value):
    set_output = Recorder(result="output summary set")
    outcome, _ = run("set_output", {"set_output": set_output}, name="summary", value=value)
    assert outcome.content == "output summary set"
    assert set_output.calls == [((), {"name": "summary", "value": value})]


def test_set_output_invalid_and_unavailable():
    set_output = Recorder()
    outcome, _ = run("set_output", {"set_output": set_output}, name="summary")
    assert outcome.content == (
        "Invalid arguments for set_output: value: Field required. "
        "Parameters: name (string, required), value (any, required)."
    )
    assert set_output.calls == []
    assert run("set_output", {}, name="n", value=1)[0].content == "set_output is not available in this context"
