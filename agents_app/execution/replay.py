"""Record and replay: a finished run as a script for the scripted provider.

The script holds every model turn of the run per agent, in the order the
agent's sessions made them, so replaying it reproduces the run's tool calls
and files — teams keep such scripts as regression tests of their agents.
"""

from __future__ import annotations

from typing import Any

from agents_app.models import Run


def run_script_export(*, run: Run) -> dict[str, list[dict[str, Any]]]:
    """{agent slug: [turn, …]} from the run's recorded model responses, in order."""
    script: dict[str, list[dict[str, Any]]] = {}
    responses = run.events.filter(type="llm_response").order_by("seq").values_list("agent", "data")
    for agent, data in responses:
        turn: dict[str, Any] = {}
        if data.get("text"):
            turn["text"] = data["text"]
        calls = [
            {"name": call["name"], "arguments": call.get("raw_arguments", call.get("arguments", {}))}
            for call in data.get("tool_calls", [])
        ]
        if calls:
            turn["tool_calls"] = calls
        if not turn:
            turn["text"] = ""
        usage = data.get("usage")
        if usage:
            turn["usage"] = {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"]}
        script.setdefault(agent, []).append(turn)
    return script
