"""The plain-Python session loop, with an in-memory store and a scripted model."""

import asyncio
from decimal import Decimal

import pytest

from agents_app.kernel.loop import PolicyDenied, SessionConfig, SessionState, ToolResult, run_session
from agents_app.kernel.results import Limits
from mas_core.llm_types import Message, ModelResponse, ProviderError, ToolCall, ToolSchema, Usage


class Model:
    """Answers from a list of turns: a ModelResponse, or a ProviderError to raise."""

    model, tier = "m-1", "small"

    def __init__(self, turns):
        self.turns, self.requests = list(turns), []

    async def complete(self, request, *, on_chunk=None):
        self.requests.append(request)
        turn = self.turns.pop(0)
        if isinstance(turn, Exception):
            raise turn
        if on_chunk and turn.text:
            for piece in (turn.text[: len(turn.text) // 2], turn.text[len(turn.text) // 2 :]):
                await on_chunk(piece)
        return turn

    def cost(self, response):
        return Decimal(response.usage.prompt_tokens) / 1000

    def cost_at_most(self, *, prompt_tokens, max_tokens):
        return Decimal(prompt_tokens) / 1000


def text(value, tokens=(10, 5)):
    return ModelResponse(text=value, tool_calls=[], usage=Usage(*tokens), model="m-1")


def calls(*pairs, tokens=(10, 5)):
    return ModelResponse(
        text="", usage=Usage(*tokens), model="m-1", finish_reason="tool_calls",
        tool_calls=[ToolCall(id=f"c{i}", name=name, arguments=args) for i, (name, args) in enumerate(pairs)],
    )


class Store:
    def __init__(self, *, cancel_after=None, deny=None):
        self.events, self.checkpoints, self.before_tools = [], [], []
        self.cancel_after, self.deny, self.polls = cancel_after, deny, 0
        self.reserved, self.released = [], []  # worst costs reserved and not released yet; released

    async def checkpoint(self, state, *, before_tools=False):
        self.checkpoints.append(state.to_dict())
        self.before_tools.append(before_tools)

    async def emit(self, type, data):
        self.events.append((type, data))

    async def cancelled(self):
        self.polls += 1
        return self.cancel_after is not None and self.polls > self.cancel_after

    async def before_model_call(self, state, *, worst_usd, tier=None):
        if self.deny and Decimal(state.cost_usd) >= self.deny:
            raise PolicyDenied(f"run budget of ${self.deny} reached")
        self.reserved.append(worst_usd)

    def after_model_call(self):
        self.released.append(self.reserved.pop())

    def types(self):
        return [t for t, _ in self.events]


class Tools:
    def __init__(self, results=None):
        self.calls, self.results = [], results or {}

    async def __call__(self, call):
        self.calls.append((call.name, call.arguments))
        return self.results.get(call.name, ToolResult(ok=True, content=f"{call.name} done #{len(self.calls)}"))


def start(task="Do it"):
    return SessionState(messages=[Message(role="system", content="You are A."), Message(role="user", content=task)])


def run(state, model, store=None, tools=None, limits=Limits(), clock=None, sleeps=None):
    store = store or Store()
    tools = tools or Tools()

    async def sleep(seconds):
        sleeps.append(seconds) if sleeps is not None else None

    kwargs = {"clock": clock} if clock else {}
    outcome = asyncio.run(run_session(
        state=state, model=model, tools=[ToolSchema("vfs_read", "read", {"type": "object"})], call_tool=tools,
        store=store, config=SessionConfig(agent="a", limits=limits), sleep=sleep, **kwargs,
    ))
    return outcome, store, tools


def test_a_final_answer_ends_the_session_ok():
    outcome, store, tools = run(start(), Model([text("All done.")]))
    assert (outcome.status, outcome.result, outcome.failure) == ("ok", "All done.", None)
    assert (outcome.meta.prompt_tokens, outcome.meta.completion_tokens, outcome.meta.steps) == (10, 5, 1)
    assert outcome.meta.cost_usd == "0.01"
    assert store.types() == ["llm_request", "stream_chunk", "llm_response"]
    assert store.events[1][1] == {"text": "All done."}
    assert tools.calls == []


def test_tool_calls_run_in_order_and_their_results_go_back_to_the_model():
    model = Model([calls(("vfs_read", {"path": "a.md"}), ("vfs_list", {})), text("Read it.")])
    outcome, store, tools = run(start(), model)
    assert outcome.status == "ok" and outcome.result == "Read it."
    assert tools.calls == [("vfs_read", {"path": "a.md"}), ("vfs_list", {})]
    assert [m.role for m in model.requests[1].messages] == ["system", "user", "assistant", "tool", "tool"]
    # Under the kernel's ids, each keeping the provider's.
    assert [(call.id, call.provider_id) for call in model.requests[1].messages[2].tool_calls] == [
        ("tc-1", "c0"), ("tc-2", "c1")]
    assert [(m.tool_call_id, m.content) for m in model.requests[1].messages[3:]] == [
        ("tc-1", "vfs_read done #1"), ("tc-2", "vfs_list done #2")]
    assert store.types() == ["llm_request", "llm_response", "tool_call", "tool_result", "tool_call", "tool_result",
                             "llm_request", "stream_chunk", "llm_response"]
    assert outcome.meta.tool_calls == 2 and outcome.meta.steps == 2
    # A checkpoint after the model turn (which may ride with the tools' first write) and after
    # every tool result (each written before the loop goes on), then the final turn.
    assert store.before_tools == [True, False, False, False]


def test_resuming_never_reruns_a_recorded_tool_call():
    state = start()
    state.messages.append(Message(role="assistant", tool_calls=[
        ToolCall(id="c0", name="vfs_write", arguments={"path": "x"}),
        ToolCall(id="c1", name="vfs_read", arguments={"path": "x"})]))
    state.messages.append(Message(role="tool", content="written", tool_call_id="c0", name="vfs_write"))
    state.steps, state.tool_calls = 1, 1
    outcome, store, tools = run(state, Model([text("ok")]))
    assert tools.calls == [("vfs_read", {"path": "x"})]
    assert outcome.meta.tool_calls == 2 and outcome.status == "ok"


def test_state_survives_a_json_round_trip():
    state = start()
    state.messages.append(Message(role="assistant", tool_calls=[ToolCall(id="c0", name="n", arguments={"a": 1})]))
    assert SessionState.from_dict(state.to_dict()).to_dict() == state.to_dict()


def test_the_same_call_three_times_in_a_row_is_stuck():
    turns = [calls(("vfs_read", {"path": "a"})) for _ in range(3)]
    outcome, _, tools = run(start(), Model(turns))
    assert outcome.status == "failed"
    assert outcome.failure.kind == "stuck"
    assert outcome.failure.message == "the same call vfs_read with the same arguments 3 times in a row"
    assert len(tools.calls) == 2
    assert outcome.failure.last_tool_calls[-1] == {"id": "tc-3", "provider_id": "c0", "name": "vfs_read",
                                                    "arguments": {"path": "a"}}
    assert outcome.failure.suggested_retry is False


def test_steps_without_a_new_tool_result_are_stuck():
    tools = Tools({"vfs_list": ToolResult(ok=True, content="same")})
    turns = [calls(("vfs_list", {"prefix": str(i)})) for i in range(6)]
    outcome, _, tools = run(start(), Model(turns), tools=tools, limits=Limits(no_progress_steps=3))
    assert outcome.failure.kind == "stuck"
    assert outcome.failure.message == "3 steps without a new tool result"
    assert len(tools.calls) == 4  # the first result was new; three more brought nothing


def test_max_steps_and_max_tool_calls():
    turns = [calls(("vfs_read", {"path": str(i)})) for i in range(10)]
    outcome, _, _ = run(start(), Model(turns), limits=Limits(max_steps=3))
    assert (outcome.failure.kind, outcome.failure.message) == ("stuck", "no final answer after 3 steps")
    outcome, _, tools = run(start(), Model(turns), limits=Limits(max_tool_calls=2))
    assert (outcome.failure.kind, outcome.failure.message) == ("stuck", "more than 2 tool calls")
    assert len(tools.calls) == 2


def test_timeout_with_the_partial_result_kept():
    now = [0.0]

    class SlowModel(Model):
        async def complete(self, request, *, on_chunk=None):
            now[0] += 100  # the model took 100 s
            return await super().complete(request, on_chunk=on_chunk)

    model = SlowModel([ModelResponse(text="half way", tool_calls=[ToolCall("c0", "vfs_read", {"path": "a"})],
                                     usage=Usage(1, 1), model="m-1")])
    outcome, _, tools = run(start(), model, limits=Limits(timeout_s=60), clock=lambda: now[0])
    assert outcome.status == "failed"
    assert (outcome.failure.kind, outcome.failure.suggested_retry) == ("timeout", True)
    assert outcome.failure.message == "the session ran longer than 60 s"
    assert outcome.result == "half way"
    assert outcome.meta.duration_s == 100.0
    assert tools.calls == [("vfs_read", {"path": "a"})]


def test_retryable_provider_errors_back_off_exponentially():
    model = Model([ProviderError("rate_limit", "slow down", status=429), ProviderError("server", "oops", status=500),
                   text("fine")])
    sleeps = []
    outcome, store, _ = run(start(), model, sleeps=sleeps)
    assert outcome.status == "ok"
    assert sleeps == [1.0, 2.0]
    retries = [data for t, data in store.events if t == "retry"]
    assert [(r["attempt"], r["delay_s"]) for r in retries] == [(1, 1.0), (2, 2.0)]


def test_a_provider_error_that_retries_cannot_fix_fails_the_session():
    outcome, store, _ = run(start(), Model([ProviderError("auth", "bad key", status=401)]), sleeps=[])
    assert outcome.failure.kind == "provider_error"
    assert outcome.failure.message == "auth: bad key (HTTP 401)"
    assert outcome.failure.suggested_retry is False
    assert ("retry" in store.types()) is False


def test_budget_stop_is_policy_denied():
    turns = [calls(("vfs_read", {"path": "1"}), tokens=(1000, 1)), text("never")]
    outcome, _, _ = run(start(), Model(turns), store=Store(deny=Decimal("1")))
    assert outcome.failure.kind == "policy_denied"
    assert outcome.failure.message == "run budget of $1 reached"


def test_cancellation_stops_before_the_next_model_call():
    turns = [calls(("vfs_read", {"path": "1"})), text("never")]
    model = Model(turns)
    outcome, _, tools = run(start(), model, store=Store(cancel_after=2))
    assert outcome.status == "cancelled"
    assert len(model.requests) == 1
    assert tools.calls == [("vfs_read", {"path": "1"})]


def test_malformed_arguments_go_back_to_the_model_without_running_the_tool():
    bad = ModelResponse(text="", usage=Usage(1, 1), model="m-1",
                        tool_calls=[ToolCall(id="c0", name="vfs_read", arguments={}, raw_arguments="{path: a")])
    model = Model([bad, text("fixed")])
    outcome, _, tools = run(start(), model)
    assert tools.calls == []
    assert model.requests[1].messages[-1].content == "Invalid arguments for vfs_read: not a JSON object: {path: a"
    assert outcome.status == "ok"


def test_repeated_tool_errors_fail_the_session_as_tool_error():
    tools = Tools({"vfs_read": ToolResult(ok=False, content="boom", error_kind="tool_error")})
    turns = [calls(("vfs_read", {"path": str(i)})) for i in range(6)]
    outcome, _, _ = run(start(), Model(turns), tools=tools, limits=Limits(no_progress_steps=3))
    assert outcome.failure.kind == "tool_error"
    assert outcome.failure.message == "3 tool calls in a row failed; last: vfs_read: boom"


@pytest.mark.parametrize("tier,size,examples", [("small", 2048, 2), ("medium", 5120, 4), ("large", None, 6)])
def test_prompt_context_and_examples_fit_the_tier(tier, size, examples):
    from agents_app.kernel.prompt import build_system_prompt

    context = "\n\n".join(f"Paragraph {i}: " + "x" * 200 for i in range(60))
    prompt = build_system_prompt(
        body="You are A.", context=context, tier=tier,
        examples=[{"task": f"t{i}", "approach": "a", "outcome": "o"} for i in range(6)],
    )
    section = prompt.split("## Context\n\n", 1)[1].split("\n\n## Examples", 1)[0]
    if size is None:
        assert section == context
    else:
        assert len(section.encode()) <= size
        assert section.endswith(f"[… trimmed to {size} bytes for this model tier]")
    assert prompt.count("### Example ") == examples
