"""Counting a request's tokens and planning a compaction: plain Python, no database."""

import json

from agents_app.kernel import context
from agents_app.kernel.context import (
    SUMMARY_PREFIX,
    Window,
    calibrated,
    compacted,
    estimate_tokens,
    plan_compaction,
    request_chars,
    split_turns,
    trim_summary,
    window_for,
)
from mas_core.llm_types import Message, ToolCall, ToolSchema
from agents_app.llm.windows import model_limits


def history(turns: int, result: str = "r" * 100) -> list[Message]:
    messages = [Message(role="system", content="You are A."), Message(role="user", content="The task")]
    for index in range(turns):
        messages.append(Message(role="assistant", content="", tool_calls=[
            ToolCall(id=f"c{index}", name="vfs_read", arguments={"path": f"f{index}.md"})]))
        messages.append(Message(role="tool", content=f"{result}{index}", tool_call_id=f"c{index}", name="vfs_read"))
    return messages


def test_request_chars_count_contents_calls_and_tool_schemas():
    tool = ToolSchema(name="vfs_read", description="Read.", parameters={"type": "object"})
    call = ToolCall(id="c1", name="vfs_read", arguments={"path": "a"})
    messages = [Message(role="user", content="hello"), Message(role="assistant", tool_calls=[call])]
    expected = (5 + 16) + (16 + 2 + 8 + len(json.dumps({"path": "a"}))) + (8 + 5 + len('{"type": "object"}'))
    assert request_chars(messages, [tool]) == expected


def test_estimate_uses_the_default_ratio_until_calibrated_then_the_providers_count_with_a_margin():
    assert estimate_tokens(1000, 0.0) == 330  # 1000 * 0.3 * 1.1
    ratio = calibrated(1000, 250, 0.0)
    assert ratio == 0.25
    assert estimate_tokens(1000, ratio) == 275
    assert calibrated(1000, 0, 0.25) == 0.25  # no count reported: kept
    assert calibrated(10, 500, 0.25) == 1.0  # bounded
    assert calibrated(3, 1, 0.0) == 0.333333  # rounded: survives a checkpoint as it is


def test_window_reserves_the_answer_and_derives_threshold_and_target():
    window = window_for(context_window=16_000, max_output_tokens=2_000, max_tokens=None)
    assert (window.limit, window.reserve, window.threshold_tokens, window.target_tokens) == (16_000, 2_000, 11_200, 7_000)
    assert window_for(context_window=16_000, max_output_tokens=None, max_tokens=10_000).reserve == 4_000  # ≤ 1/4
    assert window_for(context_window=None, max_output_tokens=100) is None
    assert Window(limit=1000, threshold=0.9).threshold_tokens == 900


def test_known_models_have_default_limits_and_a_rows_own_figures_win():
    limits = model_limits("gpt-4o-mini-2024-07-18")
    assert (limits.context_window, limits.max_output_tokens) == (128_000, 16_384)
    assert model_limits("claude-sonnet-4-20250514").context_window == 200_000
    assert model_limits("gemini-2.5-pro").context_window == 1_048_576
    assert model_limits("my-local-model").context_window is None
    assert model_limits("gpt-4o", context_window=50_000).context_window == 50_000


def test_turns_keep_each_tool_result_with_its_call_and_the_head_apart():
    messages = history(3)
    head, previous, turns = split_turns(messages)
    assert head == messages[:2] and previous == ""
    assert [[m.role for m in turn] for turn in turns] == [["assistant", "tool"]] * 3
    assert all(turn[1].tool_call_id == turn[0].tool_calls[0].id for turn in turns)


def test_plan_keeps_the_last_turns_and_fewer_when_they_do_not_fit():
    messages = history(10)
    plan = plan_compaction(messages, fits=lambda _: True, keep_turns=4)
    assert (len(plan.dropped), len(plan.kept)) == (6, 4)
    assert plan.kept_messages == messages[-8:]
    tight = plan_compaction(messages, fits=lambda ms: len(ms) <= 5, keep_turns=4)
    assert (len(tight.dropped), len(tight.kept)) == (9, 1)  # never fewer than the last turn
    assert plan_compaction(history(1), fits=lambda _: True) is None  # nothing older than the last turn


def test_compacted_history_has_head_summary_and_kept_turns_and_a_second_compaction_reads_the_first():
    messages = history(6)
    plan = plan_compaction(messages, fits=lambda _: True, keep_turns=2)
    new = compacted(plan, "did four reads")
    assert [m.role for m in new] == ["system", "user", "user", "assistant", "tool", "assistant", "tool"]
    assert new[2].content == f"{SUMMARY_PREFIX}\ndid four reads"
    assert new[:2] == messages[:2] and new[3:] == messages[-4:]
    again = plan_compaction(new + history(3)[2:], fits=lambda _: True, keep_turns=1)
    assert again.previous == "did four reads" and again.head == messages[:2]
    # Never a tool result without its call: every kept result follows the call it answers.
    kept = again.kept_messages
    assert kept[0].role == "assistant" and kept[1].tool_call_id == kept[0].tool_calls[0].id


def test_trim_summary_lists_the_dropped_calls_and_keeps_an_earlier_summary():
    plan = plan_compaction(history(5), fits=lambda _: True, keep_turns=1)
    plan.previous = "Earlier: read the spec."
    text = trim_summary(plan)
    assert text.splitlines() == [
        "Earlier: read the spec.", "",
        "4 earlier turn(s) were removed to fit the model's context window (no summary of them could be written).",
        "Tool calls in them:",
        '- vfs_read({"path": "f0.md"})', '- vfs_read({"path": "f1.md"})',
        '- vfs_read({"path": "f2.md"})', '- vfs_read({"path": "f3.md"})',
    ]


def test_transcript_is_bounded():
    plan = plan_compaction(history(40, result="x" * 5000), fits=lambda _: True, keep_turns=1)
    text = context.transcript(plan, max_chars=10_000, per_message=1_500)
    assert len(text) == 10_000 + len("\n[…]\n")
    assert text.startswith('assistant: vfs_read({"path": "f0.md"})\nresult of vfs_read: ' + "x" * 1500)
