"""ToolRegistry: validation on register, provider-clean schemas, calls that never crash."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel, ConfigDict, Field

from mas_core.llm_types import ToolSchema
from tools_app.builtin import BUILTIN_TOOL_CLASSES
from tools_app.catalog import SAFE_DEFAULT_TOOLS
from tools_app.plugin import Params, Tool, ToolContext, ToolError
from tools_app.registry import ToolOutcome, ToolRegistry, ToolResult, registry_for_agent
from tools_app.workspace_memory import InMemoryWorkspace


def make_ctx(**services) -> ToolContext:
    return ToolContext(run_id="run-1", agent="root", session_id="s-1", workspace=InMemoryWorkspace(), services=services)


class Echo(Tool):
    name = "echo"
    description = "Echo the text."
    calls: ClassVar[list[dict[str, Any]]] = []

    class Parameters(Params):
        text: str = Field(description="What to echo")
        times: int = Field(default=1, ge=1, le=3)

    async def run(self, args, ctx):
        type(self).calls.append(args.model_dump())
        return args.text * args.times


@pytest.fixture(autouse=True)
def _reset_calls():
    Echo.calls = []


def call(registry: ToolRegistry, name: str, arguments: Any, ctx: ToolContext | None = None) -> ToolOutcome:
    return asyncio.run(registry.call(name, arguments, ctx or make_ctx()))


# --- register -----------------------------------------------------------------


@pytest.mark.parametrize("bad", ["", "has space", "dot.name", "x" * 65, "ünïcode"])
def test_register_refuses_bad_names(bad):
    tool_class = type("Bad", (Echo,), {"name": bad})
    registry = ToolRegistry()
    with pytest.raises(ValueError, match="must match"):
        registry.register(tool_class())
    assert registry.names == []


def test_register_refuses_duplicates_and_keeps_the_first():
    registry = ToolRegistry()
    first = registry.register(Echo())
    with pytest.raises(ValueError) as info:
        registry.register(Echo())
    assert str(info.value) == "a tool named 'echo' is already registered"
    assert registry.get("echo") is first and len(registry) == 1


def test_register_refuses_missing_description():
    with pytest.raises(ValueError, match="tool nodesc needs a description"):
        ToolRegistry().register(type("NoDesc", (Echo,), {"name": "nodesc", "description": ""})())


def test_register_refuses_parameters_that_allow_extra_arguments():
    class Loose(BaseModel):
        text: str

    tool = type("LooseTool", (Echo,), {"name": "loose", "Parameters": Loose})()
    with pytest.raises(ValueError) as info:
        ToolRegistry().register(tool)
    assert str(info.value) == "tool loose: Parameters must forbid extra arguments (subclass plugin.Params)"


def test_register_refuses_parameters_without_a_json_schema():
    class Opaque:
        pass

    class P(Params):
        model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")
        thing: Opaque

    tool = type("OpaqueTool", (Echo,), {"name": "opaque", "Parameters": P})()
    with pytest.raises(ValueError, match="^tool opaque: cannot build its JSON schema: "):
        ToolRegistry().register(tool)


def test_register_accepts_a_class():
    registry = ToolRegistry()
    assert isinstance(registry.register(Echo), Echo)
    assert "echo" in registry


# --- schemas ------------------------------------------------------------------


def test_schema_of_vfs_write_exactly():
    registry = ToolRegistry()
    registry.register(BUILTIN_TOOL_CLASSES["vfs_write"])
    assert registry.schemas() == [
        ToolSchema(
            name="vfs_write",
            description=(
                "Create or overwrite a file of the run's shared workspace. Writing agents/<name>.md "
                "(an agent definition) makes that agent available to this run."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Workspace path, e.g. 'notes/plan.md'"},
                    "content": {"type": "string", "description": "The file's full new text"},
                },
                "required": ["path", "content"],
                "additionalProperties": False,
            },
        )
    ]


def test_schema_is_cleaned_nested_models_inlined_optional_collapsed():
    class Inner(Params):
        title: str  # a parameter named "title" must survive the title cleanup

    class P(Params):
        title: str
        inner: Inner
        maybe: int | None = None
        either: int | str | None = None

    tool = type("Nested", (Echo,), {"name": "nested", "Parameters": P})()
    registry = ToolRegistry()
    registry.register(tool)
    assert registry.schemas()[0].parameters == {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "inner": {
                "type": "object",
                "properties": {"title": {"type": "string"}},
                "required": ["title"],
                "additionalProperties": False,
            },
            "maybe": {"type": "integer"},
            "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        },
        "required": ["title", "inner"],
        "additionalProperties": False,
    }


def test_schemas_are_copies():
    registry = ToolRegistry()
    registry.register(Echo)
    registry.schemas()[0].parameters["properties"].clear()
    assert "text" in registry.schemas()[0].parameters["properties"]


def test_every_builtin_schema_is_provider_clean():
    registry = registry_for_agent(list(BUILTIN_TOOL_CLASSES))

    def walk(node):
        if isinstance(node, dict):
            assert "$ref" not in node and "$defs" not in node
            for key, value in node.items():
                if key == "properties":
                    for prop in value.values():
                        assert "title" not in prop
                        walk(prop)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for schema in registry.schemas():
        assert schema.parameters["type"] == "object"
        assert schema.parameters["additionalProperties"] is False
        assert "title" not in schema.parameters
        walk(schema.parameters)


# --- call ---------------------------------------------------------------------


def test_call_ok_returns_text_and_data():
    registry = ToolRegistry()
    registry.register(Echo)
    assert call(registry, "echo", {"text": "ab", "times": 2}) == ToolOutcome(True, "abab", data="abab", error_kind=None)
    assert Echo.calls == [{"text": "ab", "times": 2}]


def test_unknown_tool_lists_the_available_ones():
    registry = ToolRegistry()
    registry.register(Echo)
    registry.register(BUILTIN_TOOL_CLASSES["vfs_read"])
    assert call(registry, "vfs_wrte", {"path": "x"}) == ToolOutcome(
        False, "Unknown tool 'vfs_wrte'. Available tools: echo, vfs_read.", error_kind="unknown_tool"
    )


def test_missing_argument_goes_back_as_text_and_the_handler_is_not_called():
    registry = ToolRegistry()
    registry.register(BUILTIN_TOOL_CLASSES["vfs_write"])
    ctx = make_ctx()
    outcome = call(registry, "vfs_write", {"path": "a.md"}, ctx)
    assert outcome == ToolOutcome(
        False,
        "Invalid arguments for vfs_write: content: Field required. "
        "Parameters: path (string, required), content (string, required).",
        error_kind="invalid_arguments",
    )
    assert ctx.workspace.files == {}


def test_several_argument_errors_in_one_message():
    registry = ToolRegistry()
    registry.register(Echo)
    outcome = call(registry, "echo", {"text": 5, "times": 9, "extra": True})
    assert outcome.content == (
        "Invalid arguments for echo: text: Input should be a valid string; "
        "times: Input should be less than or equal to 3; extra: Extra inputs are not permitted. "
        "Parameters: text (string, required), times (integer, optional)."
    )
    assert outcome.ok is False and outcome.error_kind == "invalid_arguments"
    assert Echo.calls == []


def test_arguments_that_are_not_an_object():
    registry = ToolRegistry()
    registry.register(Echo)
    outcome = call(registry, "echo", '{"text": "unterminated')
    assert outcome == ToolOutcome(
        False,
        "Invalid arguments for echo: arguments must be a JSON object, got '{\"text\": \"unterminated'. "
        "Parameters: text (string, required), times (integer, optional).",
        error_kind="invalid_arguments",
    )
    assert call(registry, "echo", [1, 2]).content.startswith("Invalid arguments for echo: arguments must be a JSON object, got 'list'.")
    assert Echo.calls == []


class Failing(Tool):
    name = "failing"
    description = "Fails."

    class Parameters(Params):
        how: str

    async def run(self, args, ctx):
        if args.how == "tool_error":
            raise ToolError("the thing is not there")
        if args.how == "limit":
            error = ToolError("max_depth 3 reached: cannot spawn deeper")
            error.kind = "policy_denied"
            raise error
        return {}["missing"]


def test_tool_error_becomes_an_outcome():
    registry = ToolRegistry()
    registry.register(Failing)
    assert call(registry, "failing", {"how": "tool_error"}) == ToolOutcome(
        False, "the thing is not there", error_kind="tool_error"
    )


def test_tool_error_kind_is_kept():
    registry = ToolRegistry()
    registry.register(Failing)
    assert call(registry, "failing", {"how": "limit"}) == ToolOutcome(
        False, "max_depth 3 reached: cannot spawn deeper", error_kind="policy_denied"
    )


def test_unexpected_exception_becomes_an_outcome():
    registry = ToolRegistry()
    registry.register(Failing)
    assert call(registry, "failing", {"how": "crash"}) == ToolOutcome(
        False, "failing failed: KeyError: 'missing'", data={"exception": "KeyError"}, error_kind="tool_error"
    )


class Returns(Tool):
    name = "returns"
    description = "Returns a value of some kind."

    def __init__(self, value: Any = None) -> None:
        self.value = value

    class Parameters(Params):
        pass

    async def run(self, args, ctx):
        return self.value


@pytest.mark.parametrize(
    ("value", "content"),
    [
        ("plain text", "plain text"),
        ({"b": 1, "a": "é"}, '{"b": 1, "a": "é"}'),
        ([1, None, True], "[1, null, true]"),
        (None, "null"),
        (3, "3"),
        (ToolResult("text for the model", {"k": 1}), "text for the model"),
    ],
)
def test_results_are_serialised(value, content):
    tool = Returns()
    tool.value = value
    registry = ToolRegistry()
    registry.register(tool)
    outcome = call(registry, "returns", {})
    assert outcome.ok is True and outcome.content == content
    assert outcome.data == ({"k": 1} if isinstance(value, ToolResult) else value)


def test_long_results_are_truncated_with_a_marker():
    tool = Returns()
    tool.value = "x" * 30
    registry = ToolRegistry(max_result_chars=10)
    registry.register(tool)
    assert call(registry, "returns", {}).content == "x" * 10 + "\n[truncated: 20 more characters]"


# --- registry_for_agent -------------------------------------------------------


def test_default_tools_are_the_safe_implemented_ones():
    registry = registry_for_agent(None)
    assert registry.names == [name for name in SAFE_DEFAULT_TOOLS if name in BUILTIN_TOOL_CLASSES]
    assert registry.names == [
        "vfs_read", "vfs_write", "vfs_edit", "vfs_list", "vfs_delete", "vfs_search",
        "spawn_agent", "signal_parent", "delegate", "knowledge_query", "knowledge_contribute", "memory_store",
        "memory_recall", "publish", "subscribe", "blackboard_write", "blackboard_read", "set_output",
    ]
    assert registry.warnings == []


def test_allowed_list_with_repeated_and_unknown_names():
    registry = registry_for_agent(["vfs_read", "web_fetch", "vfs_read", "mystery"], extra_tools=[Echo()])
    assert registry.names == ["vfs_read", "web_fetch", "echo"]
    assert registry.warnings == ["tool mystery is unknown; skipped"]


def test_allowed_may_name_a_custom_tool_and_empty_means_none():
    assert registry_for_agent(["echo"], extra_tools=[Echo()]).names == ["echo"]
    assert registry_for_agent([], extra_tools=[Echo()]).names == ["echo"]
    assert registry_for_agent([]).names == []


def test_custom_tool_clashing_with_a_builtin_is_an_error():
    clash = type("Clash", (Echo,), {"name": "vfs_read"})()
    with pytest.raises(ValueError, match="^a tool named 'vfs_read' is already registered$"):
        registry_for_agent(["vfs_read"], extra_tools=[clash])
