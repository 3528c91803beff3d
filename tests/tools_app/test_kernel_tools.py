"""spawn_agent, signal_parent, delegate, set_output: thin calls into the kernel's services.

The services are fakes defined here (the kernel provides the real ones);
tests check the exact arguments they receive, and that they are not called
when the arguments are invalid or the tool is unavailable.
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


def test_spawn_writes_the_file_then_returns_the_child_result():
    spawn = Recorder(result="3 sources found")
    outcome, ws = run("spawn_agent", {"spawn": spawn}, filename="researcher.md", content=AGENT, task="find sources")
    assert outcome == ToolOutcome(True, "3 sources found", data="3 sources found")
    assert spawn.calls == [((), {"filename": "agents/researcher.md", "content": AGENT, "task": "find sources"})]
    assert ws.files == {"agents/researcher.md": AGENT}


def test_spawn_structured_result_is_json():
    spawn = Recorder(result={"status": "ok", "result": "done"})
    outcome, _ = run("spawn_agent", {"spawn": spawn}, filename="/agents/./r.md", content=AGENT, task="t")
    assert outcome.content == '{"status": "ok", "result": "done"}'
    assert spawn.calls[0][1]["filename"] == "agents/r.md"


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
            "Parameters: filename (string, required), content (string, required), task (string, required)."
        )),
        ({"filename": "r.md", "content": AGENT, "task": ""}, (
            "Invalid arguments for spawn_agent: task: String should have at least 1 character. "
            "Parameters: filename (string, required), content (string, required), task (string, required)."
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


def test_delegate_with_defaults():
    delegate = Recorder(result="summary written")
    outcome, _ = run("delegate", {"delegate": delegate}, agent="writer", task="summarise")
    assert outcome.content == "summary written"
    assert delegate.calls == [((), {"agent": "writer", "task": "summarise", "priority": None, "context": None})]


def test_delegate_with_priority_and_structured_context():
    delegate = Recorder(result={"ok": True})
    outcome, _ = run("delegate", {"delegate": delegate}, agent="writer", task="t", priority=5, context={"files": ["a.md"]})
    assert outcome.content == '{"ok": true}'
    assert delegate.calls == [((), {"agent": "writer", "task": "t", "priority": 5, "context": {"files": ["a.md"]}})]


def test_delegate_unknown_agent_error_and_invalid_priority():
    delegate = Recorder(error=ToolError("no agent named 'ghost' in this run; agents: writer, researcher"))
    outcome, _ = run("delegate", {"delegate": delegate}, agent="ghost", task="t")
    assert outcome == ToolOutcome(False, "no agent named 'ghost' in this run; agents: writer, researcher", error_kind="tool_error")
    delegate = Recorder()
    outcome, _ = run("delegate", {"delegate": delegate}, agent="writer", task="t", priority="urgent")
    assert outcome.content == (
        "Invalid arguments for delegate: priority: Input should be a valid integer, unable to parse string as an integer. "
        "Parameters: agent (string, required), task (string, required), priority (integer, optional), "
        "context (object/string, optional)."
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
