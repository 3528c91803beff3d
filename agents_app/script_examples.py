"""Scripted turns that show each built-in tool: "Try without a model" on the monitor's start form.

A newcomer with no model provider starts a run whose model turns are given (a run's ``script``, as
``POST /api/runs`` takes it): the form fills its editor with the example of the tool picked, for the
agent picked. Each example calls its tool once (after what the tool needs, e.g. a file to read) and
then answers; the agents it hands work to answer from the ``"*"`` turns.
"""

from __future__ import annotations

import copy
from typing import Any

from tools_app.catalog import BUILTIN_TOOLS

OTHER = "{other}"  # in a delegate example: another agent of the team (the form's choice)
SKILL = "{skill}"  # in a skill_load example: one of the agent's skills


def _call(tool: str, /, **arguments: Any) -> dict[str, Any]:
    return {"name": tool, "arguments": arguments}


def _turns(*calls: dict[str, Any], answer: str) -> list[dict[str, Any]]:
    """One turn per call, then the answer."""
    return [{"tool_calls": [call]} for call in calls] + [{"text": answer}]


_NOTE = _call("vfs_write", path="notes/hello.md", content="# Hello\n\nA first note, written by a scripted turn.\n")
_HELPER = ("---\nname: Helper\ndescription: Says hello to whoever spawned it.\n---\n\n"
           "You greet the agent that spawned you.\n")

EXAMPLES: dict[str, list[dict[str, Any]]] = {
    "vfs_write": _turns(_NOTE, answer="I wrote notes/hello.md."),
    "vfs_read": _turns(_NOTE, _call("vfs_read", path="notes/hello.md"), answer="notes/hello.md says hello."),
    "vfs_edit": _turns(_NOTE, _call("vfs_edit", path="notes/hello.md", old="A first note", new="An edited note"),
                       answer="I edited notes/hello.md."),
    "vfs_list": _turns(_NOTE, _call("vfs_list", prefix="notes/"), answer="The workspace has one note."),
    "vfs_delete": _turns(_NOTE, _call("vfs_delete", path="notes/hello.md"), answer="I deleted notes/hello.md."),
    "vfs_search": _turns(_NOTE, _call("vfs_search", pattern="first note"), answer="The note is found."),
    "spawn_agent": _turns(_call("spawn_agent", filename="agents/helper.md", content=_HELPER,
                                task="Say hello to me."), answer="The helper I spawned said hello."),
    # The signal wakes the agent in a session of its own, which answers; the spawned agent's end then resumes
    # the waiting one, which answers again, unless both came together: the same answer twice keeps the run's
    # result the same either way (the second is left unused then).
    "signal_parent": [{"tool_calls": [_call("spawn_agent", filename="agents/signaller.md",
                                            content=_HELPER.replace("Helper", "Signaller"),
                                            task="Signal me that you started, then finish.")]},
                      {"text": "The agent I spawned signalled me."}, {"text": "The agent I spawned signalled me."}],
    "delegate": _turns(_call("delegate", agent=OTHER, task="Say in one line what you can do."),
                       answer=f"{OTHER} answered."),
    "web_fetch": _turns(_call("web_fetch", url="https://example.com/"), answer="I fetched example.com."),
    "web_search": _turns(_call("web_search", query="multi-agent systems"), answer="I searched the web."),
    "knowledge_contribute": _turns(_call("knowledge_contribute", content="The demo team uses MAS.", type="fact"),
                                   answer="I shared a finding with the team."),
    "knowledge_query": _turns(_call("knowledge_query", query="what does the team use?"),
                              answer="I looked up the team's knowledge."),
    "memory_store": _turns(_call("memory_store", content="Greet people by name.", type="preference"),
                           answer="I will remember it."),
    "memory_recall": _turns(_call("memory_recall", query="how to greet people"), answer="I recalled what I know."),
    "publish": _turns(_call("publish", channel="news", message="The first run without a model works."),
                      answer="I published on channel news."),
    "subscribe": _turns(_call("subscribe", channel="news"), answer="I read channel news."),
    "blackboard_write": _turns(_call("blackboard_write", key="plan", value="1. say hello"),
                               answer="The plan is on the blackboard."),
    "blackboard_read": _turns(_call("blackboard_write", key="plan", value="1. say hello"),
                              _call("blackboard_read", key="plan"), answer="The plan says: say hello."),
    "set_output": _turns(_call("set_output", name="summary", value="Hello from a scripted run."),
                         answer="Hello from a scripted run."),
    "code_exec": _turns(_call("code_exec", language="python", code="print(6 * 7)"), answer="It printed 42."),
    "tool_search": _turns(_call("tool_search", query="files"), answer="I found the file tools."),
    "skill_load": _turns(_call("skill_load", name=SKILL), answer=f"I read the skill {SKILL}."),
    "ask_human": _turns(_call("ask_human", question="Which greeting do you prefer?", choices=["Hello", "Hi"]),
                        answer="Thanks: I will use your greeting."),
}
# What the other agents of such a run answer: the delegated agent, a spawned helper, the signaller.
OTHERS: list[dict[str, Any]] = [{"text": "Hello: I answer from the script's \"*\" turns."}]
SIGNALLER: list[dict[str, Any]] = _turns(_call("signal_parent", message="I started."), answer="Done.")

assert set(EXAMPLES) == set(BUILTIN_TOOLS), set(BUILTIN_TOOLS) ^ set(EXAMPLES)


def tools_called(tool: str) -> set[str]:
    """The tools the agent needs for the example of ``tool``: those it calls (some write a file or spawn an agent
    first), and ``tool`` itself (the signal_parent example's spawned agent holds no tool its creator lacks)."""
    return {tool} | {call["name"] for turn in EXAMPLES[tool] for call in turn.get("tool_calls", [])}


def examples_for(*, tools: list[str], skills: list[str], others: list[str]) -> list[str]:
    """The tools whose example an agent can run, in the catalog's order: every tool the example calls is among
    ``tools`` (its own), a delegate example needs another agent of the team (``others``), a skill_load example
    one of the agent's ``skills``."""
    own = set(tools)
    return [tool for tool in BUILTIN_TOOLS if tools_called(tool) <= own
            and (tool != "delegate" or others) and (tool != "skill_load" or skills)]


def script_example(*, tool: str, agent: str, other: str = "", skill: str = "") -> dict[str, list[dict[str, Any]]]:
    """The script that shows ``tool`` as ``agent``'s. ``other``: the agent a delegate example hands its task
    (another of the team); ``skill``: the skill a skill_load example loads (one of the agent's)."""
    if tool == "delegate" and (not other or other == agent):
        raise ValueError("the delegate example hands its task to another agent of the team: name one")
    if tool == "skill_load" and not skill:
        raise ValueError("the skill_load example loads one of the agent's skills: name one")
    turns = _filled(copy.deepcopy(EXAMPLES[tool]), {OTHER: other, SKILL: skill})
    script = {agent: turns, "*": copy.deepcopy(OTHERS)}
    if tool == "signal_parent":
        script["signaller"] = copy.deepcopy(SIGNALLER)
    return script


def _filled(value: Any, names: dict[str, str]) -> Any:
    """``value`` with the placeholders of ``names`` replaced in every text."""
    if isinstance(value, str):
        for placeholder, name in names.items():
            value = value.replace(placeholder, name)
        return value
    if isinstance(value, list):
        return [_filled(item, names) for item in value]
    if isinstance(value, dict):
        return {key: _filled(item, names) for key, item in value.items()}
    return value
