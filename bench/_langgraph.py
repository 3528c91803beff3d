"""The same agent loop in LangGraph 1.2 with its Postgres checkpointer: the outside baseline.

Two shapes, both with ``PostgresSaver`` on the same PostgreSQL server and
database as MAS, so every super-step is checkpointed there, and the same
zero-latency script (one ``vfs_write`` tool call per turn, then an answer):

- ``react``: the prebuilt ``create_react_agent`` with a ``@tool`` function and
  a fake chat model — what a LangGraph user writes;
- ``graph``: a hand-written two-node ``StateGraph`` (``model``, ``tools``) that
  keeps the written files in the graph's state, so they are checkpointed too.

A step is the time between two consecutive model calls of a thread, as for
MAS (llm_request to llm_request). Installed with ``pip install -e '.[bench]'``.
"""

from __future__ import annotations

import itertools
import operator
import time
import uuid
from typing import Annotated, Any, TypedDict


def available() -> str | None:
    """LangGraph's version, or None when the bench extra is not installed."""
    try:
        from importlib.metadata import version

        import langgraph.checkpoint.postgres  # noqa: F401

        return version("langgraph")
    except ImportError:
        return None


def _merge(left: dict, right: dict) -> dict:
    return {**left, **right}


class State(TypedDict):
    messages: Annotated[list, operator.add]
    files: Annotated[dict[str, str], _merge]


def react_step_times(conninfo: str, *, sessions: int, steps: int, durability: str) -> list[float]:
    """``create_react_agent``: ``sessions`` threads of ``steps`` tool steps one after another."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.prebuilt import create_react_agent

    files: dict[str, str] = {}

    @tool
    def vfs_write(path: str, content: str) -> str:
        """Write a file of the run's workspace."""
        files[path] = content
        return f"wrote {path}"

    def turns():
        for turn in range(steps):
            yield AIMessage(content="", tool_calls=[{
                "name": "vfs_write", "args": {"path": f"notes/{turn}.md", "content": f"step {turn}"},
                "id": f"call_{turn}", "type": "tool_call"}])
        yield AIMessage(content="done")

    class ScriptedChat(GenericFakeChatModel):
        stamps: list = []

        def bind_tools(self, tools, **kwargs):
            return self

        def _generate(self, *args, **kwargs):
            self.stamps.append(time.perf_counter())
            return super()._generate(*args, **kwargs)

    times: list[float] = []
    with PostgresSaver.from_conn_string(conninfo) as saver:
        saver.setup()
        for index in range(sessions + 1):  # the first is a warm-up
            model = ScriptedChat(messages=turns(), stamps=[])
            agent = create_react_agent(model, [vfs_write], checkpointer=saver)
            agent.invoke({"messages": [("user", "Write notes")]},
                         {"configurable": {"thread_id": str(uuid.uuid4())}, "recursion_limit": 4 * steps + 10},
                         durability=durability)
            if index:
                times += [b - a for a, b in itertools.pairwise(model.stamps)]
    return times


def graph_step_times(conninfo: str, *, sessions: int, steps: int, durability: str) -> list[float]:
    """The hand-written graph: ``sessions`` threads of ``steps`` tool steps one after another."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, StateGraph

    calls: dict[str, list[float]] = {}

    def model(state: State, config) -> dict[str, Any]:
        thread = config["configurable"]["thread_id"]
        calls.setdefault(thread, []).append(time.perf_counter())
        turn = sum(1 for m in state["messages"] if isinstance(m, AIMessage))
        if turn < steps:
            call = {"name": "vfs_write", "args": {"path": f"notes/{turn}.md", "content": f"step {turn}"},
                    "id": f"call_{turn}", "type": "tool_call"}
            return {"messages": [AIMessage(content="", tool_calls=[call])]}
        return {"messages": [AIMessage(content="done")]}

    def tools(state: State) -> dict[str, Any]:
        last = state["messages"][-1]
        files, results = {}, []
        for call in last.tool_calls:
            files[call["args"]["path"]] = call["args"]["content"]
            results.append(ToolMessage(content=f"wrote {call['args']['path']}", tool_call_id=call["id"]))
        return {"messages": results, "files": files}

    def route(state: State) -> str:
        return "tools" if state["messages"][-1].tool_calls else END

    graph = StateGraph(State)
    graph.add_node("model", model)
    graph.add_node("tools", tools)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    with PostgresSaver.from_conn_string(conninfo) as saver:
        saver.setup()
        app = graph.compile(checkpointer=saver)

        def run_one() -> str:
            thread = str(uuid.uuid4())
            app.invoke({"messages": [HumanMessage(content="Write notes")], "files": {}},
                       {"configurable": {"thread_id": thread}, "recursion_limit": 4 * steps + 10},
                       durability=durability)
            return thread

        run_one()  # warm-up: connections, prepared statements
        calls.clear()
        for _ in range(sessions):
            run_one()
    return [b - a for times in calls.values() for a, b in itertools.pairwise(times)]
