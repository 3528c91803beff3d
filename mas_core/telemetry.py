"""OpenTelemetry traces of runs, exported over OTLP/HTTP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set.

One trace per run, whose id is the run's UUID, so the sessions of a run —
on any worker, at any time — land in the same trace:

    run <agent or workflow>                     (written when the run finishes)
    └─ invoke_agent <agent>                     one per session
       ├─ chat <model>                          one per model call
       └─ execute_tool <tool>                   one per tool call

Attributes follow the GenAI semantic conventions (``gen_ai.operation.name``,
``gen_ai.system``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens``
/ ``output_tokens``, ``gen_ai.agent.name``, ``gen_ai.tool.name``) plus
``mas.run.id`` and ``mas.session.id``. Without the endpoint nothing is set up
and every helper here returns at once.
"""

from __future__ import annotations

import contextvars
import hashlib
import os
import threading
import uuid
from typing import Any

# (trace id, span id) the next span must take: the run's span is written with ids derived from the run.
_forced: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("mas_forced_ids", default=None)
_lock = threading.Lock()
_tracer = None
_pid = None


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


def _run_span_id(run_id: Any) -> int:
    return int.from_bytes(hashlib.sha256(f"run:{run_id}".encode()).digest()[:8], "big") or 1


def run_parent(run_id: Any):
    """The context whose parent is the run's span: sessions of the run are its children."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    context = SpanContext(trace_id=uuid.UUID(str(run_id)).int, span_id=_run_span_id(run_id), is_remote=True,
                          trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(context))


def session_span(*, run_id, session_id, agent: str, attempt: int):
    found = tracer()
    if found is None:
        return None
    return found.start_span(f"invoke_agent {agent}", context=run_parent(run_id), attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent, "mas.run.id": str(run_id),
        "mas.session.id": str(session_id), "mas.session.attempt": attempt})


def child_span(parent, name: str, attributes: dict[str, Any]):
    if parent is None:
        return None
    from opentelemetry import trace

    return tracer().start_span(name, context=trace.set_span_in_context(parent), attributes=attributes)


def end(span, *, error: str | None = None, attributes: dict[str, Any] | None = None) -> None:
    if span is None:
        return
    from opentelemetry.trace import Status, StatusCode

    if attributes:
        span.set_attributes({key: value for key, value in attributes.items() if value is not None})
    if error:
        span.set_status(Status(StatusCode.ERROR, error[:500]))
    span.end()


def record_run(run) -> None:
    """The run's own span (its start and end times, its outcome), once the run has finished."""
    found = tracer()
    if found is None:
        return
    from opentelemetry.context import Context
    from opentelemetry.trace import Status, StatusCode

    # A root span whose trace id is the run's and whose span id is the one its sessions point to.
    started = run.started_at or run.created_at
    token = _forced.set((uuid.UUID(str(run.id)).int, _run_span_id(run.id)))
    try:
        span = found.start_span(f"run {run.workflow or run.agent}", context=Context(),
                                start_time=int(started.timestamp() * 1e9), attributes={
                                    "mas.run.id": str(run.id), "mas.run.status": run.status,
                                    "mas.workflow": run.workflow, "gen_ai.agent.name": run.agent,
                                    "gen_ai.usage.input_tokens": run.prompt_tokens,
                                    "gen_ai.usage.output_tokens": run.completion_tokens,
                                    "mas.cost_usd": float(run.cost_usd)})
    finally:
        _forced.reset(token)
    if run.status != "succeeded":
        span.set_status(Status(StatusCode.ERROR, (run.error or run.status)[:500]))
    span.end(end_time=int((run.finished_at or started).timestamp() * 1e9))
