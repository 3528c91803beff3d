"""OpenTelemetry traces of runs, exported over OTLP/HTTP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set.

One trace per run, so the sessions of a run — on any worker, at any time — land in the same trace. Its id is
the run's UUID; a run started at a door by a request carrying a W3C ``traceparent`` continues the caller's
trace instead, its root span a child of the caller's (:class:`RunTrace`, recorded with the run's start):

    run <agent> | invoke_workflow <workflow>    the run (written when it finishes)
    └─ invoke_agent <agent>                     one per session
       ├─ chat <model>                          one per model call
       └─ execute_tool <tool>                   one per tool call

Attributes follow the OpenTelemetry GenAI semantic conventions — ``gen_ai.operation.name``,
``gen_ai.provider.name`` (the provider's type: openai, anthropic, gemini, scripted), ``gen_ai.request.model``,
``gen_ai.agent.name``, ``gen_ai.tool.name``, ``gen_ai.usage.input_tokens`` / ``output_tokens`` and
``gen_ai.conversation.id`` (the run's id, on every span) — plus MAS's own ``mas.*`` (``mas.run.id``,
``mas.session.id``, ``mas.door``, …; docs/operations.md lists them). Without the endpoint nothing is set up
and every helper here returns at once.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import os
import re
import threading
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

# (trace id, span id) the next span must take: the run's span is written with ids derived from the run.
_forced: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("mas_forced_ids", default=None)
_lock = threading.Lock()
_tracer = None
_pid = None
# A model call's span → its session's span, and the tokens a session's model calls used (set on its span).
_parents: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_usage: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
USAGE = ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")
# version-trace id-parent id-flags (W3C Trace Context); a later version may add fields after these.
TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")


def enabled() -> bool:
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def tracer():
    """The process's tracer, set up on first use; None when no OTLP endpoint is configured."""
    global _tracer, _pid
    if not enabled():
        return None
    if _tracer is not None and _pid == os.getpid():
        return _tracer
    with _lock:
        if _tracer is None or _pid != os.getpid():
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

            class RunIds(RandomIdGenerator):
                """Random ids, except the run span's own, which are derived from the run (see run_parent)."""

                def generate_span_id(self) -> int:
                    forced = _forced.get()
                    return forced[1] if forced is not None else super().generate_span_id()

                def generate_trace_id(self) -> int:
                    forced = _forced.get()
                    return forced[0] if forced is not None else super().generate_trace_id()

            provider = TracerProvider(resource=Resource.create({"service.name": os.environ.get(
                "OTEL_SERVICE_NAME", "mas")}), id_generator=RunIds())
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            _tracer, _pid = provider.get_tracer("mas"), os.getpid()
    return _tracer


# -- where a run's trace starts ----------------------------------------------------------------------


@dataclass(frozen=True)
class RunTrace:
    """Where a run's trace starts, kept in its ``run_start`` event: the door the run came through
    (``mas.door``: ``openai.chat_completions``, ``openai.responses``, ``mcp``) and the W3C ``traceparent`` of the
    caller's request, whose trace the run's continues (None: the run's trace is its own, its id the run's)."""

    door: str
    traceparent: str | None = None

    @classmethod
    def at_door(cls, door: str, traceparent: str | None = None) -> RunTrace:
        """A run started at ``door`` by a request with this ``traceparent``; one that is not a valid W3C
        traceparent is ignored (the run's trace is then its own), as the recommendation asks."""
        parsed = _traceparent(traceparent)
        return cls(door=door, traceparent=None if parsed is None else "00-{:032x}-{:016x}-{:02x}".format(*parsed))

    def to_json(self) -> dict[str, str]:
        return {"door": self.door, **({"traceparent": self.traceparent} if self.traceparent else {})}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunTrace | None:
        return cls(door=data["door"], traceparent=data.get("traceparent")) if data.get("door") else None

    def caller(self):
        """The caller's span, as the parent of the run's (None without a traceparent)."""
        parsed = _traceparent(self.traceparent)
        if parsed is None:
            return None
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

        trace_id, span_id, flags = parsed
        return NonRecordingSpan(SpanContext(trace_id=trace_id, span_id=span_id, is_remote=True,
                                            trace_flags=TraceFlags(flags)))


def _traceparent(value: str | None) -> tuple[int, int, int] | None:
    """(trace id, parent id, flags) of a W3C traceparent; None when it is not a valid one."""
    found = TRACEPARENT.fullmatch(value.strip()) if value else None
    if found is None:
        return None
    version, trace_id, span_id, flags, rest = found.groups()
    if version == "ff" or (version == "00" and rest) or set(trace_id) == {"0"} or set(span_id) == {"0"}:
        return None
    return int(trace_id, 16), int(span_id, 16), int(flags, 16)


@functools.lru_cache(maxsize=4096)
def run_trace(run_id: Any) -> RunTrace | None:
    """Where the run's trace starts, as its ``run_start`` event records it (None: not at a door). It never
    changes, so each process reads it once per run."""
    from mas_core.models import Event

    data = Event.objects.filter(run_id=run_id, type="run_start").order_by("seq").values_list("data", flat=True).first()
    return RunTrace.from_json(data or {})


def _run_span_id(run_id: Any) -> int:
    return int.from_bytes(hashlib.sha256(f"run:{run_id}".encode()).digest()[:8], "big") or 1


def run_parent(run_id: Any, trace: RunTrace | None = None):
    """The context whose parent is the run's span: sessions of the run are its children. The trace is the
    caller's when ``trace`` has a traceparent (sampled as the caller's), else the run's own (sampled)."""
    from opentelemetry import trace as api
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    caller = trace.caller() if trace is not None else None
    if caller is not None:
        trace_id, flags = caller.get_span_context().trace_id, caller.get_span_context().trace_flags
    else:
        trace_id, flags = uuid.UUID(str(run_id)).int, TraceFlags(TraceFlags.SAMPLED)
    context = SpanContext(trace_id=trace_id, span_id=_run_span_id(run_id), is_remote=True, trace_flags=flags)
    return api.set_span_in_context(NonRecordingSpan(context))


# -- spans ---------------------------------------------------------------------------------------------


async def session_span(*, run_id, session_id, agent: str, attempt: int, provider: str, model: str):
    """The span of a session (``invoke_agent <agent>``), in its run's trace; None when tracing is off."""
    found = tracer()
    if found is None:
        return None
    from mas_core.runner import db

    trace = await db(run_trace)(str(run_id))
    return found.start_span(f"invoke_agent {agent}", context=run_parent(run_id, trace), attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent, "gen_ai.provider.name": provider,
        "gen_ai.request.model": model, "gen_ai.conversation.id": str(run_id), "mas.run.id": str(run_id),
        "mas.session.id": str(session_id), "mas.session.attempt": attempt})


def traceparent_of(span) -> str | None:
    """The W3C ``traceparent`` that makes ``span`` the parent of what another server does for it (None: no span,
    tracing is off)."""
    if span is None:
        return None
    context = span.get_span_context()
    return "00-{:032x}-{:016x}-{:02x}".format(context.trace_id, context.span_id, int(context.trace_flags))


def child_span(parent, name: str, attributes: dict[str, Any]):
    """A span under a session's (a model call, a tool call), in the same conversation; None when ``parent``
    is None (tracing is off)."""
    if parent is None:
        return None
    from opentelemetry import trace

    conversation = (getattr(parent, "attributes", None) or {}).get("gen_ai.conversation.id")
    span = tracer().start_span(name, context=trace.set_span_in_context(parent), attributes={
        **({"gen_ai.conversation.id": conversation} if conversation else {}), **attributes})
    _parents[span] = parent
    return span


def end(span, *, error: str | None = None, attributes: dict[str, Any] | None = None) -> None:
    """End ``span`` with these attributes (None values left out); a model call's usage is added to its
    session's, which its span gets when it ends."""
    if span is None:
        return
    from opentelemetry.trace import Status, StatusCode

    attributes = {key: value for key, value in (attributes or {}).items() if value is not None}
    parent = _parents.get(span)
    if parent is not None and any(key in attributes for key in USAGE):
        used = _usage.setdefault(parent, [0, 0])
        for index, key in enumerate(USAGE):
            used[index] += attributes.get(key, 0)
    used = _usage.pop(span, None)
    if used is not None:
        attributes = {**dict(zip(USAGE, used)), **attributes}
    if attributes:
        span.set_attributes(attributes)
    if error:
        span.set_status(Status(StatusCode.ERROR, error[:500]))
    span.end()


def record_run(run) -> None:
    """The run's own span (its start and end times, its outcome), once the run has finished: ``invoke_workflow
    <workflow>`` for a workflow's run, ``run <agent>`` for an agent's."""
    found = tracer()
    if found is None:
        return
    from opentelemetry import trace as api
    from opentelemetry.context import Context
    from opentelemetry.trace import Status, StatusCode

    trace = run_trace(str(run.id))
    caller = trace.caller() if trace is not None else None
    # The span id its sessions point to, and the run's trace id — or the caller's, its span the parent.
    started = run.started_at or run.created_at
    token = _forced.set((uuid.UUID(str(run.id)).int, _run_span_id(run.id)))
    try:
        span = found.start_span(
            f"invoke_workflow {run.workflow}" if run.workflow else f"run {run.agent}",
            context=Context() if caller is None else api.set_span_in_context(caller),
            start_time=int(started.timestamp() * 1e9), attributes=_run_attributes(run, trace))
    finally:
        _forced.reset(token)
    if run.status != "succeeded":
        span.set_status(Status(StatusCode.ERROR, (run.error or run.status)[:500]))
    span.end(end_time=int((run.finished_at or started).timestamp() * 1e9))


def _run_attributes(run, trace: RunTrace | None) -> dict[str, Any]:
    workflow = {"gen_ai.operation.name": "invoke_workflow", "gen_ai.agent.name": run.workflow} if run.workflow \
        else {"gen_ai.agent.name": run.agent}
    return {**workflow, "gen_ai.conversation.id": str(run.id), "gen_ai.usage.input_tokens": run.prompt_tokens,
            "gen_ai.usage.output_tokens": run.completion_tokens, "mas.run.id": str(run.id),
            "mas.run.status": run.status, "mas.workflow": run.workflow, "mas.cost_usd": float(run.cost_usd),
            **({"mas.door": trace.door} if trace is not None else {})}
