"""Guardrails in the plain-Python session loop: where each check sits, what a block leaves behind, how a
streamed answer is held back and redacted (agents_app.execution.guardrails with mas_core.guardrails' detectors)."""

import asyncio

from agents_app.execution.guardrails import (
    MAX_ARGUMENT_DEPTH,
    MAX_ARGUMENT_STRINGS,
    STREAM_HOLD_CHARS,
    SessionGuard,
    rules_from,
)
from agents_app.kernel.loop import SessionConfig, ToolResult, run_session
from mas_core.guardrails import Context
from mas_core.llm_types import ToolSchema
from tests.agents_app.kernel.test_loop import Model, Store, Tools, calls, start, text

EMAIL = "ann@example.org"


def guard(store: Store, *specs: dict, secrets: tuple[str, ...] = ()) -> SessionGuard:
    rows = [{"slug": f"g{index}", "spec": {"name": f"G{index}", **spec}} for index, spec in enumerate(specs)]
    return SessionGuard(rules_from(rows), context=Context(secret_values=secrets), emit=store.emit)


def pii(where: list[str], action: str, kinds=("email",), **more) -> dict:
    return {"applies_to": where, "detector": {"type": "pii", "kinds": list(kinds)}, "action": action, **more}


def run(model, store, session_guard, tools=None, state=None):
    tools = tools or Tools()
    outcome = asyncio.run(run_session(
        state=state or start(), model=model, tools=[ToolSchema("vfs_write", "write", {"type": "object"})],
        call_tool=tools, store=store, config=SessionConfig(agent="a", guard=session_guard)))
    return outcome, tools


def fired(store: Store) -> list[tuple]:
    return [(d["guardrail"], d["where"], d["action"], d.get("tool")) for kind, d in store.events
            if kind == "guardrail_triggered"]


def test_the_request_is_redacted_for_the_model_and_the_history_keeps_the_task():
    store = Store()
    model = Model([text("ok")])
    outcome, _ = run(model, store, guard(store, pii(["model_request"], "redact")), state=start(f"Mail {EMAIL}"))
    assert outcome.status == "ok"
    assert model.requests[0].messages[1].content == "Mail [email]"
    assert store.checkpoints[-1]["messages"][1]["content"] == f"Mail {EMAIL}"
    assert fired(store) == [("g0", "model_request", "redact", None)]


def test_each_message_is_checked_once_per_session():
    store = Store()
    model = Model([calls(("vfs_write", {"path": "a"})), calls(("vfs_write", {"path": "b"})), text("done")])
    outcome, _ = run(model, store, guard(store, pii(["model_request"], "warn")), state=start(f"Mail {EMAIL}"))
    assert outcome.status == "ok" and len(model.requests) == 3
    assert fired(store) == [("g0", "model_request", "warn", None)]


def test_a_blocked_answer_is_not_recorded_nor_shown_and_the_session_fails_as_guardrail():
    store = Store()
    answer = "Reach me at " + EMAIL + " " + "and more words " * 30
    outcome, _ = run(Model([text(answer)]), store, guard(store, pii(["model_answer"], "block")))
    assert outcome.status == "failed"
    assert (outcome.failure.kind, outcome.failure.message, outcome.failure.suggested_retry) == (
        "guardrail", "guardrail 'G0' (g0) blocked the model's answer", False)
    assert outcome.result == ""
    kinds = [kind for kind, _ in store.events]
    assert "stream_chunk" not in kinds
    # The call is counted and billed; its answer is not recorded.
    assert [(d["text"], d["tool_calls"], d["blocked"]) for kind, d in store.events if kind == "llm_response"] == [
        ("", [], True)]
    assert EMAIL not in repr(store.events) + repr(store.checkpoints)
    assert fired(store) == [("g0", "model_answer", "block", None)]


def test_a_streamed_answer_is_held_back_at_its_tail_and_redacted_in_every_chunk():
    store = Store()
    head = "word " * 80  # 400 characters: the model streams it in two halves
    answer = head + EMAIL + " ends it."
    outcome, _ = run(Model([text(answer)]), store, guard(store, pii(["model_answer"], "redact")))
    expected = head + "[email] ends it."
    assert (outcome.status, outcome.result) == ("ok", expected)
    chunks = [d["text"] for kind, d in store.events if kind == "stream_chunk"]
    assert "".join(chunks) == expected
    assert len(chunks) == 2 and len(chunks[-1]) >= STREAM_HOLD_CHARS - len(EMAIL)  # the tail waited for the end
    assert fired(store) == [("g0", "model_answer", "redact", None)]  # once: the whole answer's check


def test_tool_arguments_are_redacted_before_the_call_is_recorded_and_run():
    store = Store()
    model = Model([calls(("vfs_write", {"path": "a.md", "content": [f"to {EMAIL}", {"deep": EMAIL}]})), text("ok")])
    outcome, tools = run(model, store, guard(store, pii(["tool_arguments"], "redact", tools=["vfs_*"])))
    assert outcome.status == "ok"
    assert tools.calls == [("vfs_write", {"path": "a.md", "content": ["to [email]", {"deep": "[email]"}]})]
    assert [d["arguments"] for kind, d in store.events if kind == "tool_call"] == [tools.calls[0][1]]
    assert fired(store) == [("g0", "tool_arguments", "redact", "vfs_write")] * 2


def test_arguments_too_deep_or_with_too_many_strings_for_the_guardrails_are_refused_at_the_edge():
    deep: object = "x"
    for _ in range(MAX_ARGUMENT_DEPTH):  # the strings MAX_ARGUMENT_DEPTH levels down are checked
        deep = [deep]
    refusal = ("guardrail", "the arguments of vfs_write are too deep or hold too many strings for its guardrails "
                            "to check")
    for arguments, expected in [({"a": deep}, ("failed",) + refusal), ({"a": deep[0]}, ("ok", None, None)),
                                ({"a": ["x"] * (MAX_ARGUMENT_STRINGS + 1)}, ("failed",) + refusal),
                                ({"a": ["x"] * MAX_ARGUMENT_STRINGS}, ("ok", None, None))]:
        store = Store()
        outcome, tools = run(Model([calls(("vfs_write", arguments)), text("ok")]), store,
                             guard(store, pii(["tool_arguments"], "block")))
        failure = outcome.failure
        assert (outcome.status, failure and failure.kind, failure and failure.message) == expected
        assert len(tools.calls) == (1 if expected[0] == "ok" else 0)


def test_a_guardrail_for_other_tools_does_not_look():
    store = Store()
    model = Model([calls(("vfs_write", {"content": EMAIL})), text("ok")])
    outcome, tools = run(model, store, guard(store, pii(["tool_arguments"], "block", tools=["mcp__*"])))
    assert outcome.status == "ok" and tools.calls == [("vfs_write", {"content": EMAIL})]
    assert fired(store) == []


def test_a_tool_result_is_masked_before_it_is_recorded_and_a_blocked_one_is_not_recorded():
    store = Store()
    tools = Tools({"vfs_write": ToolResult(ok=True, content=f"wrote for {EMAIL}")})
    outcome, _ = run(Model([calls(("vfs_write", {})), text("ok")]), store,
                     guard(store, pii(["tool_result"], "mask")), tools=tools)
    assert outcome.status == "ok"
    assert [d["content"] for kind, d in store.events if kind == "tool_result"] == ["wrote for " + "*" * len(EMAIL)]

    store = Store()
    tools = Tools({"vfs_write": ToolResult(ok=True, content=f"wrote for {EMAIL}")})
    outcome, _ = run(Model([calls(("vfs_write", {})), text("never")]), store,
                     guard(store, pii(["tool_result"], "block")), tools=tools)
    assert (outcome.status, outcome.failure.kind) == ("failed", "guardrail")
    assert outcome.failure.message == "guardrail 'G0' (g0) blocked the tool's result of vfs_write"
    assert [kind for kind, _ in store.events if kind == "tool_result"] == []
    assert all(m["role"] != "tool" for m in store.checkpoints[-1]["messages"])


def test_a_declared_secret_in_a_tool_result_is_redacted():
    store = Store()
    secret = "s3cr3t-value-of-the-team"
    tools = Tools({"vfs_write": ToolResult(ok=True, content=f"key={secret}")})
    outcome, _ = run(Model([calls(("vfs_write", {})), text("ok")]), store,
                     guard(store, {"applies_to": ["tool_result"], "detector": {"type": "secrets", "kinds": ["declared"]},
                                   "action": "redact"}, secrets=(secret,)), tools=tools)
    assert outcome.status == "ok"
    assert [d["content"] for kind, d in store.events if kind == "tool_result"] == ["key=[declared]"]
    assert secret not in repr(store.events) + repr(store.checkpoints)
