"""The session loop: call the model, run its tool calls, checkpoint, repeat.

A bounded loop in plain Python (after the OpenAI Agents SDK's first
``run.py``): each turn returns a typed step — final answer or run again — and
everything the loop touches comes in as an argument. The caller persists
:class:`SessionState` through ``store.checkpoint``; resuming from a checkpoint
never re-runs a tool call whose result was recorded.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Awaitable, Callable, Protocol

from agents_app.kernel.context import Meter, Window, calibrated, estimate_tokens
from mas_core.outputs import INVALID_OUTPUT, correction
from agents_app.kernel.results import FailureReport, Limits, Meta, SessionOutcome
from mas_core.llm_types import Message, ModelRequest, ModelResponse, ProviderError, ToolCall, ToolSchema
from agents_app.money import money_str
from mas_core import jsontext, phases


@dataclass
class ToolResult:
    ok: bool
    content: str
    error_kind: str | None = None
    suspended: bool = False  # no result yet: it comes when the session resumes (see SessionState.waiting)
    rejected: str | None = None  # the value an ``invalid_output`` error refused (kept if the session fails on it)
    guarded: bool = False  # the content passed the session's tool_result guardrails already (Guard.result)


@dataclass
class SessionState:
    """Everything a session needs to resume after a crash; JSON-serialisable."""

    messages: list[Message]
    steps: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: str = "0"
    elapsed_s: float = 0.0
    recent_calls: list[str] = field(default_factory=list)
    seen_results: list[str] = field(default_factory=list)
    steps_without_progress: int = 0
    consecutive_tool_errors: int = 0
    cursor: dict[str, int] = field(default_factory=dict)  # the scripted provider's position
    waiting: list[str] = field(default_factory=list)  # ids of started tool calls whose results come later
    # Typed outputs: corrective turns given (one per model turn whose output was refused), the step of
    # the last one, and the last refused value with what was wrong with it.
    corrections: int = 0
    correction_step: int = 0
    rejected: str | None = None
    rejected_errors: str = ""
    # Context: the provider's tokens per character of this session's last request (0: none reported yet),
    # and how many times the history was compacted.
    token_ratio: float = 0.0
    compactions: int = 0
    # The kernel's tool call ids issued so far (``tc-1``, ``tc-2``, …): a provider's ids may repeat, or be
    # missing, so they never key the session's approvals, children, tool workers, events or files.
    call_ids_issued: int = 0

    def counters(self) -> dict[str, Any]:
        """Everything but the messages (which a store may keep apart, appended as they come)."""
        return {k: v for k, v in self.__dict__.items() if k != "messages"}

    def to_dict(self) -> dict[str, Any]:
        data = self.counters()
        data["messages"] = [message.to_dict() for message in self.messages]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SessionState":
        values = dict(data)
        values["messages"] = [Message.from_dict(m) for m in data["messages"]]
        return cls(**values)

    def own_ids(self, calls: list[ToolCall]) -> list[ToolCall]:
        """The provider's tool calls under ids the kernel issues, each keeping the provider's own id."""
        owned = []
        for call in calls:
            self.call_ids_issued += 1
            owned.append(ToolCall(id=f"tc-{self.call_ids_issued}", name=call.name, arguments=call.arguments,
                                  raw_arguments=call.raw_arguments, provider_id=call.id))
        return owned

    def pending_tool_calls(self) -> list[ToolCall]:
        """Tool calls of the last assistant turn whose results are not recorded yet."""
        for index in range(len(self.messages) - 1, -1, -1):
            message = self.messages[index]
            if message.role == "assistant":
                done = {m.tool_call_id for m in self.messages[index + 1 :] if m.role == "tool"}
                return [call for call in message.tool_calls if call.id not in done]
        return []

    def final_answer(self) -> str | None:
        """The recorded final answer (a last assistant turn without tool calls) not yet accepted, or None."""
        last = self.messages[-1] if self.messages else None
        if last is None or last.role != "assistant" or last.tool_calls:
            return None
        return last.content

    def refuse(self, value: str, errors: str) -> None:
        """An output was refused: count one corrective turn per model turn, keep the value and the errors."""
        if self.correction_step != self.steps:
            self.corrections, self.correction_step = self.corrections + 1, self.steps
        self.rejected, self.rejected_errors = value, errors

    def partial_result(self) -> str:
        """The model's last text so far: what a session that stops early keeps."""
        texts = [m.content for m in self.messages if m.role == "assistant" and m.content]
        return texts[-1] if texts else ""

    def last_tool_calls(self, count: int = 5) -> list[dict[str, Any]]:
        calls = [call.to_dict() for m in self.messages if m.role == "assistant" for call in m.tool_calls]
        return calls[-count:]


class SessionStore(Protocol):
    async def checkpoint(self, state: SessionState, *, before_tools: bool = False) -> None:
        """Persist ``state``. ``before_tools``: the model asked for tools; the store may write this
        checkpoint together with the first thing a tool writes, as long as it is written before any
        effect outside the store (a store keeps it then, not lost, until that write)."""
        ...
    async def emit(self, type: str, data: dict[str, Any]) -> None: ...
    async def cancelled(self) -> bool: ...
    async def before_model_call(self, state: SessionState | None, *, worst_usd: Decimal, tier: str | None = None) -> None:
        """Reserve a model call's worst cost (``worst_usd``, of a model of ``tier``: None for the session's own)
        against the run's budget, or raise :class:`PolicyDenied` when it does not fit."""
        ...
    def after_model_call(self) -> None:
        """The call reserved last has ended (answered or failed): its reservation is released with the next
        write, which also adds the call's real cost when it answered."""
        ...


class PolicyDenied(Exception):
    pass


class GuardrailTripped(Exception):
    """A guardrail whose action is ``block`` fired: the session fails as ``guardrail``. The message names the
    guardrail and where it fired, never what it matched. ``response``: the model's answer it blocked, when a
    call was made (billed, never recorded)."""

    response: ModelResponse | None = None


@dataclass(frozen=True)
class Held:
    """What became of a final answer a guardrail held for a person: still waiting (the session suspends), let
    out (``text``: as it may leave, maybe edited), or withheld (``refusal``: what the model reads next)."""

    waiting: bool = False
    text: str | None = None
    refusal: str | None = None


class StreamCheck(Protocol):
    """One model call's streamed text, checked in chunks: ``feed`` returns what may be shown now (a tail that
    could still be the start of a match is held back), ``end`` the rest once the answer is complete."""

    async def feed(self, text: str) -> str: ...
    async def end(self) -> str: ...


class Guard(Protocol):
    """The session's guardrails (agents_app.execution.guardrails): each check returns the text as it may go
    on (redacted, masked or fenced, or unchanged), emits ``guardrail_triggered`` for what fired, and raises
    :class:`GuardrailTripped` for a block."""

    async def request(self, messages: list[Message]) -> list[Message]:
        """The messages as the provider may see them (``model_request``)."""
        ...
    async def answer(self, text: str, calls: list[ToolCall]) -> tuple[str, list[ToolCall]]:
        """The model's answer (``model_answer``) and its tool calls' arguments (``tool_arguments``,
        ``memory_write``), before either is recorded."""
        ...
    async def result(self, call: ToolCall, content: str) -> str:
        """A tool's result (``tool_result``) before it is recorded."""
        ...
    def stream(self) -> StreamCheck | None:
        """A check of one call's streamed text, or None when no guardrail looks at the answer."""
        ...
    async def held(self, text: str, key: str) -> Held | None:
        """The final answer ``text`` as a person decided on it, when a guardrail holds it for one (``key`` names
        it in the session: the same on a resume); None when none does."""
        ...


class ModelHandle(Protocol):
    """A provider bound to one model, with its prices and tier."""

    model: str
    tier: str

    async def complete(self, request: ModelRequest, *, on_chunk=None) -> ModelResponse: ...
    def cost(self, response: ModelResponse) -> Decimal: ...
    def cost_at_most(self, *, prompt_tokens: int, max_tokens: int | None) -> Decimal:
        """The most a call of ``prompt_tokens`` can cost, answering up to ``max_tokens`` (None: the model's
        own output limit)."""
        ...


@dataclass
class SessionConfig:
    agent: str
    limits: Limits = field(default_factory=Limits)
    temperature: float | None = None
    max_tokens: int | None = None
    provider_retries: int = 3
    backoff_s: float = 1.0
    stream_flush_chars: int = 200
    model_timeout_s: float = 120.0  # one model call, within what is left of the session's own time limit
    # Typed outputs: what is wrong with a final answer (a bullet list for the model), or None when it is
    # acceptable; and how many corrective turns a session gets before it fails as validation_failed.
    output_check: Callable[[str], str | None] | None = None
    max_corrections: int = 1
    window: Window | None = None  # the model's context window; None: unknown, compacted only when refused
    guard: Guard | None = None  # the session's guardrails; None: none applies


# (state, tools, reason) → True when the history was shortened. ``reason``: "threshold" (the request would
# pass the window's threshold) or "context_length" (the provider refused it as too long).
Compactor = Callable[[SessionState, list[ToolSchema], str], Awaitable[bool]]


def call_signature(call: ToolCall) -> str:
    return call.name + ":" + jsontext.dumps(call.arguments, sort_keys=True)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


async def _call_model(
    model: ModelHandle, request: ModelRequest, config: SessionConfig, store: SessionStore,
    sleep: Callable[[float], Awaitable[None]], deadline: Callable[[], float] = lambda: float("inf"),
) -> ModelResponse:
    """One model call with retries and exponential backoff on retryable provider errors."""
    buffer: list[str] = []
    check: StreamCheck | None = None
    # A block in the stream: nothing more is shown, and it is raised once the provider's call is over (raised
    # inside the provider's stream, an HTTP provider would report it as its own error).
    tripped: list[GuardrailTripped] = []

    async def flush(*, last: bool = False) -> None:
        text = "".join(buffer)
        buffer.clear()
        if tripped:
            return
        if check is not None:
            try:
                text = await check.feed(text) + (await check.end() if last else "")
            except GuardrailTripped as error:
                tripped.append(error)
                return
        if text:
            await store.emit("stream_chunk", {"text": text})

    async def on_chunk(text: str) -> None:
        buffer.append(text)
        if sum(map(len, buffer)) >= config.stream_flush_chars:
            await flush()

    attempt = 0
    while True:
        check = config.guard.stream() if config.guard is not None else None  # each attempt streams anew
        try:
            # In this task (asyncio.wait_for would start one per call).
            async with asyncio.timeout(max(0.01, min(request.timeout_s, deadline()))):
                response = await model.complete(request, on_chunk=on_chunk)
            await flush(last=True)
            if tripped:
                tripped[0].response = response
                raise tripped[0]
            return response
        except asyncio.TimeoutError:
            error = ProviderError("timeout", f"no answer within {request.timeout_s:.0f} s")
        except ProviderError as caught:
            error = caught
        buffer.clear()
        if not error.retryable or attempt >= config.provider_retries or deadline() <= 0:
            raise error
        attempt += 1
        delay = error.retry_after_s or config.backoff_s * 2 ** (attempt - 1)
        await store.emit("retry", {"what": "model_call", "attempt": attempt, "delay_s": delay, "error": str(error)})
        await sleep(delay)


def _response_data(model: ModelHandle, response: ModelResponse, cost: Decimal, *, text: str, calls: list[ToolCall],
                   blocked: bool = False) -> dict[str, Any]:
    """An ``llm_response`` event's data; ``blocked``: a guardrail blocked the answer, which it does not hold (the
    call is billed all the same)."""
    return {"model": response.model or model.model, "finish_reason": response.finish_reason,
            "text": text, "tool_calls": [call.to_dict() for call in calls],
            "usage": {"prompt_tokens": response.usage.prompt_tokens,
                      "completion_tokens": response.usage.completion_tokens},
            "cost_usd": money_str(cost), **({"cached": True} if response.cached else {}),
            **({"blocked": True} if blocked else {})}


async def _blocked_answer(state: SessionState, store: SessionStore, model: ModelHandle,
                          response: ModelResponse) -> None:
    """A model call whose streamed answer a guardrail blocked: counted and billed, its answer not recorded."""
    cost = model.cost(response)
    state.steps += 1
    state.prompt_tokens += response.usage.prompt_tokens
    state.completion_tokens += response.usage.completion_tokens
    state.cost_usd = money_str(Decimal(state.cost_usd) + cost)
    await store.emit("llm_response", _response_data(model, response, cost, text="", calls=[], blocked=True))


async def _record(state: SessionState, store: SessionStore, call: ToolCall, result: ToolResult, *,
                  elapsed: float, guard: Guard | None = None) -> bool:
    """Append a tool's result to the history, emit it and checkpoint; True when the result is new."""
    if guard is not None and not result.guarded:
        result.content = await guard.result(call, result.content)
    state.messages.append(Message(role="tool", content=result.content, tool_call_id=call.id, name=call.name))
    if result.error_kind == INVALID_OUTPUT:
        state.refuse(result.rejected if result.rejected is not None else "", result.content)
    state.consecutive_tool_errors = 0 if result.ok else state.consecutive_tool_errors + 1
    digest = _digest(call.name + "\0" + result.content)
    new = digest not in state.seen_results
    if new:
        state.seen_results = (state.seen_results + [digest])[-200:]  # as many as a resume reads back
    state.elapsed_s = elapsed
    await store.emit("tool_result", {"id": call.id, "name": call.name, "ok": result.ok,
                                     "error_kind": result.error_kind, "content": result.content[:2000]})
    await store.checkpoint(state)
    return new


async def run_session(
    *,
    state: SessionState,
    model: ModelHandle,
    tools: list[ToolSchema],
    call_tool: Callable[[ToolCall], Awaitable[ToolResult]],
    store: SessionStore,
    config: SessionConfig,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    compact: Compactor | None = None,
) -> SessionOutcome:
    """Run (or resume) one session until a final answer, a limit, a failure or cancellation.

    With ``config.window`` and ``compact``, a request estimated above the window's threshold is preceded by
    a compaction; a provider's "context length exceeded" answer leads to one compaction and one retry.
    """
    limits = config.limits
    overflow_retried_at = -1  # the step whose request was retried after a "context length exceeded"
    meter = Meter()  # each request's size (for the window) and digest (recorded with llm_request)
    started, elapsed_before = clock(), state.elapsed_s

    def meta() -> Meta:
        return Meta(
            duration_s=round(elapsed_before + clock() - started, 3),
            prompt_tokens=state.prompt_tokens,
            completion_tokens=state.completion_tokens,
            tool_calls=state.tool_calls,
            steps=state.steps,
            model=model.model,
            tier=model.tier,
            cost_usd=state.cost_usd,
        )

    async def fail(kind: str, message: str, *, retry: bool, result: str | None = None) -> SessionOutcome:
        state.elapsed_s = elapsed_before + clock() - started
        await store.checkpoint(state)
        report = FailureReport(kind=kind, message=message, last_tool_calls=state.last_tool_calls(), suggested_retry=retry)
        return SessionOutcome(status="failed", result=state.partial_result() if result is None else result,
                              meta=meta(), failure=report)

    async def invalid() -> SessionOutcome:
        """Refused again after the corrective turn(s): the session fails, keeping the refused value."""
        turns = "turn" if config.max_corrections == 1 else "turns"
        return await fail("validation_failed", f"the output still does not match its schema after "
                          f"{config.max_corrections} corrective {turns}:\n{state.rejected_errors}",
                          retry=False, result=state.rejected)

    while True:
        if await store.cancelled():
            state.elapsed_s = elapsed_before + clock() - started
            await store.checkpoint(state)
            return SessionOutcome(status="cancelled", result=state.partial_result(), meta=meta())
        if state.corrections > config.max_corrections:
            return await invalid()
        answer = state.final_answer()
        if answer is not None and config.guard is not None:
            held = await config.guard.held(answer, f"answer:{state.steps}")
            if held is not None and held.waiting:  # a person decides first: the session holds nothing meanwhile
                state.elapsed_s = elapsed_before + clock() - started
                await store.checkpoint(state)
                return SessionOutcome(status="suspended", result="", meta=meta())
            if held is not None and held.refusal is not None:  # the model reads why, and answers again
                state.messages.append(Message(role="user", content=held.refusal))
                await store.checkpoint(state)
                answer = None
            elif held is not None:
                answer = held.text  # the history keeps the model's own words; the session's result is this
        if answer is not None:
            # Recorded (checkpointed) before it is judged, so a resumed session judges it the same way.
            errors = config.output_check(answer) if config.output_check else None
            if errors is None:
                return SessionOutcome(status="ok", result=answer, meta=meta())
            state.refuse(answer, errors)
            if state.corrections > config.max_corrections:
                return await invalid()
            state.messages.append(Message(role="user", content=correction(errors)))
            await store.emit("output_invalid", {"errors": errors, "correction": state.corrections,
                                                "where": "answer"})
            await store.checkpoint(state)
        if elapsed_before + clock() - started > limits.timeout_s:
            return await fail("timeout", f"the session ran longer than {limits.timeout_s:g} s", retry=True)

        pending = state.pending_tool_calls()
        if not pending:
            if state.steps >= limits.max_steps:
                return await fail("stuck", f"no final answer after {limits.max_steps} steps", retry=False)
            # Reserved before a compaction, which only shortens the request (and reserves its own call).
            with phases.timed("context count"):
                estimated = estimate_tokens(meter.measure(state.messages, tools)[0], state.token_ratio)
            try:
                with phases.timed("budget reserve"):
                    await store.before_model_call(
                        state, worst_usd=model.cost_at_most(prompt_tokens=estimated, max_tokens=config.max_tokens))
            except PolicyDenied as denied:
                return await fail("policy_denied", str(denied), retry=False)
            try:
                if compact is not None and config.window is not None and estimated > config.window.threshold_tokens:
                    if await compact(state, tools, "threshold"):
                        await store.checkpoint(state)
                messages = list(state.messages)
                if config.guard is not None:
                    messages = await config.guard.request(messages)
                request = ModelRequest(
                    model=model.model, messages=messages, tools=tools, temperature=config.temperature,
                    max_tokens=config.max_tokens, agent=config.agent,
                    timeout_s=max(min(1.0, config.model_timeout_s),
                                  min(config.model_timeout_s, limits.timeout_s - (elapsed_before + clock() - started))),
                )
                with phases.timed("context count"):
                    chars, digest = meter.measure(request.messages, tools)
                phases.count("step")
                await store.emit("llm_request", {"model": model.model, "tier": model.tier,
                                                 "messages": len(state.messages), "tools": len(tools),
                                                 "step": state.steps + 1,
                                                 "estimated_tokens": estimate_tokens(chars, state.token_ratio),
                                                 "digest": digest})
                with phases.timed("model call"):
                    response = await _call_model(
                        model, request, config, store, sleep,
                        deadline=lambda: limits.timeout_s - (elapsed_before + clock() - started),
                    )
            except ProviderError as error:
                store.after_model_call()
                await store.emit("error", {"where": "model_call", "kind": error.kind, "message": str(error)})
                if error.kind == "context_length" and compact is not None and overflow_retried_at != state.steps:
                    overflow_retried_at = state.steps  # one retry per step
                    if await compact(state, tools, "context_length"):
                        await store.checkpoint(state)
                        await store.emit("retry", {"what": "model_call", "attempt": 1, "delay_s": 0,
                                                   "error": str(error)})
                        continue
                if elapsed_before + clock() - started >= limits.timeout_s:
                    return await fail("timeout", f"the session ran longer than {limits.timeout_s:g} s", retry=True)
                return await fail("provider_error", str(error), retry=error.retryable or error.kind == "malformed")
            except GuardrailTripped as tripped:  # in the request, or in the answer as it streamed
                store.after_model_call()
                if tripped.response is not None:
                    await _blocked_answer(state, store, model, tripped.response)
                return await fail("guardrail", str(tripped), retry=False)
            except BaseException:
                store.after_model_call()
                raise
            store.after_model_call()  # released with the write that adds the call's real cost
            cost = model.cost(response)
            state.steps += 1
            state.prompt_tokens += response.usage.prompt_tokens
            state.completion_tokens += response.usage.completion_tokens
            if not response.cached:
                state.token_ratio = calibrated(chars, response.usage.prompt_tokens, state.token_ratio)
            state.cost_usd = money_str(Decimal(state.cost_usd) + cost)
            calls = state.own_ids(response.tool_calls)
            text = response.text
            if config.guard is not None:
                try:
                    text, calls = await config.guard.answer(text, calls)
                except GuardrailTripped as tripped:  # neither the answer nor its calls are recorded
                    await store.emit("llm_response", _response_data(model, response, cost, text="", calls=[],
                                                                    blocked=True))
                    return await fail("guardrail", str(tripped), retry=False)
            state.messages.append(Message(role="assistant", content=text, tool_calls=calls))
            state.elapsed_s = elapsed_before + clock() - started
            await store.emit("llm_response", _response_data(model, response, cost, text=text, calls=calls))
            await store.checkpoint(state, before_tools=bool(calls))
            if not calls:
                continue  # a final answer: judged at the top of the loop, after a last look for cancellation
            pending = calls

        progressed = False
        for call in pending:
            if await store.cancelled():
                break
            if call.id in state.waiting:
                # Started before the session suspended: ask again for its result, counted once.
                try:
                    result = await call_tool(call)
                except GuardrailTripped as tripped:  # its result, checked by the tool caller, was blocked
                    return await fail("guardrail", str(tripped), retry=False)
                if result.suspended:
                    continue
                state.waiting.remove(call.id)
                try:
                    progressed = await _record(state, store, call, result,
                                               elapsed=elapsed_before + clock() - started, guard=config.guard) \
                        or progressed
                except GuardrailTripped as tripped:  # the result is not recorded
                    return await fail("guardrail", str(tripped), retry=False)
                continue
            signature = call_signature(call)
            state.recent_calls = (state.recent_calls + [signature])[-limits.repeat_limit:]
            if len(state.recent_calls) == limits.repeat_limit and len(set(state.recent_calls)) == 1:
                return await fail(
                    "stuck", f"the same call {call.name} with the same arguments {limits.repeat_limit} times in a row",
                    retry=False,
                )
            if state.tool_calls >= limits.max_tool_calls:
                return await fail("stuck", f"more than {limits.max_tool_calls} tool calls", retry=False)
            state.tool_calls += 1
            await store.emit("tool_call", {"id": call.id, "name": call.name, "arguments": call.arguments})
            if call.raw_arguments is not None:
                result = ToolResult(
                    ok=False, error_kind="validation",
                    content=f"Invalid arguments for {call.name}: not a JSON object: {call.raw_arguments[:500]}",
                )
            else:
                try:
                    result = await call_tool(call)
                except GuardrailTripped as tripped:  # its result, checked by the tool caller, was blocked
                    return await fail("guardrail", str(tripped), retry=False)
            if result.suspended:
                state.waiting.append(call.id)
                state.elapsed_s = elapsed_before + clock() - started
                await store.checkpoint(state)
                continue
            try:
                progressed = await _record(state, store, call, result, elapsed=elapsed_before + clock() - started,
                                           guard=config.guard) or progressed
            except GuardrailTripped as tripped:  # the result is not recorded
                return await fail("guardrail", str(tripped), retry=False)
            if state.corrections > config.max_corrections:
                return await invalid()
            if state.consecutive_tool_errors >= limits.no_progress_steps:
                return await fail("tool_error", f"{state.consecutive_tool_errors} tool calls in a row failed; "
                                  f"last: {call.name}: {result.content[:300]}", retry=True)
        if state.waiting:
            # Checkpointed after each call: the session ends here, holding nothing, and is
            # resumed (this state, the same pending calls) once every result it waits for exists.
            return SessionOutcome(status="suspended", result=state.partial_result(), meta=meta())
        state.steps_without_progress = 0 if progressed else state.steps_without_progress + 1
        if state.steps_without_progress >= limits.no_progress_steps:
            return await fail("stuck", f"{limits.no_progress_steps} steps without a new tool result", retry=False)
