"""OpenTelemetry: a real worker exports run -> session -> model call / tool call spans over OTLP/HTTP.

The collector is a local HTTP server that decodes the OTLP protobuf requests, as a real one would.
"""

import os
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from agents_app.execution.runs import run_start
from agents_app.models import Session
from tests.runs import agent, call, finish
from tests.workers import start_worker, stop_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


class Collector:
    def __init__(self):
        self.spans = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                assert self.path == "/v1/traces" and self.headers["Content-Type"] == "application/x-protobuf"
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        collector.spans.extend(scope.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()
                self.wfile.write(trace_service_pb2.ExportTraceServiceResponse().SerializeToString())

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def attributes(span) -> dict:
    found = {}
    for item in span.attributes:
        value = item.value
        found[item.key] = (value.string_value or value.int_value or value.double_value
                           if value.WhichOneof("value") != "bool_value" else value.bool_value)
    return found


def test_a_run_is_one_trace_of_run_session_model_and_tool_spans(team_a, monkeypatch):
    from mas_project.celery import app

    collector = Collector()
    queue = f"otel-{os.getpid()}"
    monkeypatch.setitem(app.conf, "task_default_queue", queue)
    worker = start_worker(queue, queue=queue, env={"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
                                                   "OTEL_BSP_SCHEDULE_DELAY": "100"})
    try:
        agent(team_a, "Lead")
        script = {"lead": [{**call("vfs_write", path="a.md", content="x"), "usage": {"prompt_tokens": 11,
                                                                                    "completion_tokens": 3}},
                           {"text": "done", "usage": {"prompt_tokens": 20, "completion_tokens": 2}}]}
        run = finish(run_start(team=team_a, agent="lead", input="x", script=script))
        deadline = time.monotonic() + 15
        while len(collector.spans) < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop_worker(worker)
        collector.server.shutdown()
    session = Session.objects.get(run=run)
    spans = {span.name: span for span in collector.spans}
    assert sorted(spans) == ["chat scripted", "execute_tool vfs_write", "invoke_agent lead", "run lead"]
    assert len(collector.spans) == 5  # two model calls
    assert {span.trace_id for span in collector.spans} == {uuid.UUID(str(run.id)).bytes}
    run_span, session_span = spans["run lead"], spans["invoke_agent lead"]
    assert run_span.parent_span_id == b"" and session_span.parent_span_id == run_span.span_id
    chats = [span for span in collector.spans if span.name == "chat scripted"]
    assert {span.parent_span_id for span in chats} == {session_span.span_id}
    assert spans["execute_tool vfs_write"].parent_span_id == session_span.span_id
    assert {k: attributes(session_span)[k] for k in ("gen_ai.operation.name", "gen_ai.agent.name", "mas.run.id",
                                                     "mas.session.id")} == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "lead", "mas.run.id": str(run.id),
        "mas.session.id": str(session.id)}
    usage = sorted((attributes(span)["gen_ai.usage.input_tokens"], attributes(span)["gen_ai.usage.output_tokens"])
                   for span in chats)
    assert usage == [(11, 3), (20, 2)]
    assert {k: attributes(chats[0])[k] for k in ("gen_ai.operation.name", "gen_ai.system", "gen_ai.request.model")} == {
        "gen_ai.operation.name": "chat", "gen_ai.system": "scripted", "gen_ai.request.model": "scripted"}
    assert attributes(spans["execute_tool vfs_write"])["gen_ai.tool.name"] == "vfs_write"
    assert attributes(run_span)["mas.run.status"] == "succeeded"
    assert (attributes(run_span)["gen_ai.usage.input_tokens"], attributes(run_span)["gen_ai.usage.output_tokens"]) \
        == (31, 5)


def test_without_an_endpoint_nothing_is_traced(monkeypatch):
    from mas_core import telemetry

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert telemetry.tracer() is None
    assert telemetry.session_span(run_id=uuid.uuid4(), session_id="s", agent="a", attempt=1) is None
    assert telemetry.child_span(None, "chat x", {}) is None
