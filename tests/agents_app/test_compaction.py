"""The compactor and the journal in the plain loop (in-memory store and files), and big tool results."""

import asyncio
import json

from agents_app.execution.compaction import POINTER_MARK, Compaction, result_kept, result_path
from agents_app.execution.journal import Journal
from agents_app.kernel.context import SUMMARY_PREFIX, Window
from agents_app.kernel.loop import SessionConfig, ToolResult, run_session
from agents_app.kernel.results import Limits
from mas_core.llm_types import Message, ProviderError
from tests.agents_app.kernel.test_loop import Model, Store, calls, start, text


class Files:
    def __init__(self):
        self.files = {}

    async def __call__(self, path, content):
        self.files[path] = content
        return 1


def compactor(store, files, *, window, summaries):
    async def summarise(state, what):
        summary = summaries.pop(0)
        if isinstance(summary, Exception):
            raise summary
        return summary

    return Compaction(agent="a", window=window, write=files, summarise=summarise, emit=store.emit, keep_turns=2)


def read_turns(count):
    turns = [calls(("vfs_read", {"path": f"f{i}.md"}), tokens=(0, 5)) for i in range(count)]  # no count: 0.3/char
    for index, turn in enumerate(turns):
        turn.tool_calls[0].id = f"c{index}"
    return turns


def test_a_long_session_is_compacted_before_it_passes_the_window_and_keeps_prompt_and_task():
    model = Model([*read_turns(20), text("done")])
    store, files = Store(), Files()
    window = Window(limit=6_000, reserve=0)  # threshold 4800 tokens, target 3000

    async def tools(call):  # ~1000 tokens each before calibration
        return ToolResult(ok=True, content=call.arguments["path"] + "y" * 3_000)

    outcome = asyncio.run(run_session(
        state=start(), model=model, tools=[], call_tool=tools, store=store,
        config=SessionConfig(agent="a", window=window, limits=Limits(max_steps=50)), compact=compactor(
            store, files, window=window, summaries=["first summary", ProviderError("server", "down"), *["s"] * 10])))

    assert outcome.status == "ok", (outcome.failure, [e for e in store.events if e[0] in ("context_compacted", "error")])
    compactions = [data for type, data in store.events if type == "context_compacted"]
    assert len(compactions) >= 2
    assert [c["how"] for c in compactions[:2]] == ["summary", "trim"]
    assert all(c["tokens_after"] < c["tokens_before"] and c["reason"] == "threshold" for c in compactions)
    # Every request the model received: under the threshold, with the system prompt and the task first.
    for request in model.requests:
        chars = sum(len(m.content) + 16 for m in request.messages)
        assert chars * 0.3 * 1.1 <= window.threshold_tokens + 200
        assert [m.content for m in request.messages[:2]] == ["You are A.", "Do it"]
    assert model.requests[-1].messages[2].content.startswith(SUMMARY_PREFIX)
    # Kept results that were long went to files; the model reads a pointer to them.
    # Named by the kernel's call ids (tc-1 is the first turn's call, which read f0.md), not the provider's.
    assert files.files and all(content == f"f{int(path[18:-4]) - 1}.md" + "y" * 3_000
                               and path.startswith("tool-results/a-tc-") for path, content in files.files.items())


def test_context_length_exceeded_compacts_and_retries_once():
    overflow = ProviderError("context_length", "openai: This model's maximum context length is 100 tokens",
                             status=400)
    model = Model([*read_turns(4), overflow, text("done")])
    store, files = Store(), Files()

    async def tools(call):
        return ToolResult(ok=True, content=call.arguments["path"] + "z" * 500)

    outcome = asyncio.run(run_session(
        state=start(), model=model, tools=[], call_tool=tools, store=store, config=SessionConfig(agent="a"),
        compact=compactor(store, files, window=None, summaries=["short"])))

    assert (outcome.status, outcome.result) == ("ok", "done")
    assert len(model.requests) == 6
    assert [t for t in store.types() if t in {"error", "context_compacted", "retry"}] == [
        "error", "context_compacted", "retry"]
    compacted = dict(store.events)["context_compacted"]
    assert (compacted["reason"], compacted["how"], compacted["turns_removed"]) == ("context_length", "summary", 3)
    assert len(model.requests[5].messages) < len(model.requests[4].messages)


def test_context_length_exceeded_twice_fails_the_session():
    overflow = ProviderError("context_length", "prompt is too long", status=400)
    model = Model([*read_turns(3), overflow, overflow])
    store = Store()

    async def tools(call):
        return ToolResult(ok=True, content=call.arguments["path"])

    outcome = asyncio.run(run_session(
        state=start(), model=model, tools=[], call_tool=tools, store=store, config=SessionConfig(agent="a"),
        compact=compactor(store, Files(), window=None, summaries=["short"])))
    assert (outcome.status, outcome.failure.kind) == ("failed", "provider_error")
    assert store.types().count("context_compacted") == 1


def test_journal_appends_new_messages_only_and_a_compaction_lists_its_order_and_marks_what_it_dropped():
    journal = Journal()
    messages = [Message(role="system", content="S"), Message(role="user", content="T")]
    staged = journal.stage(messages)
    assert [(e[0], e[1]) for e in staged.entries] == [(1, "message"), (2, "message")] and staged.marks == []
    messages = messages + [Message(role="assistant", content="a"), Message(role="tool", content="r",
                                                                           tool_call_id="c")]
    staged = journal.stage(messages)
    assert [e[0] for e in staged.entries] == [3, 4]
    assert json.loads(staged.entries[1][2]) == {"role": "tool", "content": "r", "tool_call_id": "c"}
    assert journal.stage(messages).entries == []  # nothing new: nothing written
    summary = Message(role="user", content="[Summary] x")
    staged = journal.stage([messages[0], messages[1], summary, messages[3]])
    assert [(e[0], e[1]) for e in staged.entries] == [(5, "message"), (6, "compaction")]
    assert json.loads(staged.entries[1][2]) == {"order": [1, 2, 5, 4]}
    assert staged.marks == [(3, 6)]
    again = journal.stage([messages[0], messages[1], Message(role="user", content="[Summary] y")])
    assert json.loads(again.entries[-1][2]) == {"order": [1, 2, 7]}
    assert again.marks == [(5, 8), (4, 8), (6, 8)]  # the earlier compaction is replaced too


def test_big_results_are_stored_and_pointed_to_and_vfs_read_is_paged_in_place():
    files = Files()
    big = "".join(f"line {i}\n" for i in range(5_000))  # 43 890 bytes
    kept = asyncio.run(result_kept(name="web_fetch", call_id="call/1", arguments={}, content=big, agent="a",
                                   max_bytes=16_384, write=files))
    path = result_path("a", "call/1")
    assert path == "tool-results/a-call_1.txt" and files.files == {path: big}
    assert kept.startswith(big[:4_000]) and not kept.startswith(big[:4_001])
    assert f"{POINTER_MARK} {len(big)} bytes" in kept and path in kept and "vfs_read" in kept
    small = asyncio.run(result_kept(name="web_fetch", call_id="c2", arguments={}, content="ok", agent="a",
                                    max_bytes=16_384, write=files))
    assert small == "ok" and len(files.files) == 1
    read = asyncio.run(result_kept(name="vfs_read", call_id="c3", arguments={"path": "big.txt", "offset": 10},
                                   content=big, agent="a", max_bytes=16_384, write=files))
    assert len(files.files) == 1  # a file read is not copied to another file
    assert read.endswith("Read on with vfs_read, path 'big.txt', offset 4010 and max_chars]")


def test_journal_stores_each_new_result_digest_once():
    journal = Journal()
    assert [(e[1], e[2]) for e in journal.stage_seen(["a", "b"])] == [("seen", "a"), ("seen", "b")]
    assert journal.stage_seen(["a", "b"]) == []
    assert [e[2] for e in journal.stage_seen(["b", "c", "d"])] == ["c", "d"]  # the oldest fell off the end
    assert [e[0] for e in journal.stage_seen(["x"])] == [5]  # "d" is gone: all of them are new


def test_meter_measures_only_new_messages_and_gives_the_digest_a_fresh_count_gives():
    from agents_app.kernel.context import Meter, request_chars

    messages = start().messages + [Message(role="assistant", content="a"), Message(role="tool", content="r",
                                                                                   tool_call_id="c", name="t")]
    meter = Meter()
    first = meter.measure(messages[:2], [])
    assert first[0] == request_chars(messages[:2], [])
    chars, digest = meter.measure(messages, [])
    assert (chars, digest) == Meter().measure(list(messages), [])
    assert chars == request_chars(messages, [])
    assert len(meter.measured) == 4 and digest != first[1]
    changed = [*messages[:3], Message(role="tool", content="R", tool_call_id="c", name="t")]
    assert meter.measure(changed, [])[1] != digest
    assert meter.measure(messages, [])[1] == digest
