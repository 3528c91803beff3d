"""An OpenTelemetry collector for tests: a local HTTP server that decodes OTLP/HTTP protobuf requests, as a real
one would, and keeps the spans."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2


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

    def trace(self, trace_id: bytes, count: int, timeout: float = 15) -> list:
        """The spans of the trace ``trace_id``, once ``count`` have come (and a moment more, for any extra)."""
        deadline = time.monotonic() + timeout
        while len(self.of(trace_id)) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        return self.of(trace_id)

    def of(self, trace_id: bytes) -> list:
        return [span for span in list(self.spans) if span.trace_id == trace_id]
