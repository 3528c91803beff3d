"""OpenTelemetry: a real worker exports each run's trace over OTLP/HTTP — the run (``run <agent>`` or
``invoke_workflow <workflow>``), an ``invoke_agent`` span per session, a ``chat`` span per model call and an
``execute_tool`` span per tool call — with the GenAI semantic-convention attributes; a run started at a door
records the door, and continues the caller's trace when the request carried a W3C ``traceparent``.

The collector is a local HTTP server that decodes the OTLP protobuf requests, as a real one would.
"""

import json
import os
import uuid

import pytest
from asgiref.sync import async_to_sync

from agents_app.execution.runs import run_start
from agents_app.kinds import PROVIDER
from agents_app.models import Run, Session
from mas_core.telemetry import RunTrace
from tests.agents_app.llm.fake_servers import FakeServer, openai_stream, sse
from tests.otel import Collector
from tests.runs import agent, call, define, finish
from tests.workers import start_worker, stop_worker
from workflows_app.kinds import WORKFLOW
from workflows_app.services import workflow_run_start

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

CALLER_TRACE, CALLER_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def exported(django_db_setup, django_db_blocker):
    """A collector, and a worker of a queue of its own exporting its spans there (each 100 ms)."""
    collector = Collector()
    queue = f"otel-{os.getpid()}"
    worker = start_worker(queue, queue=queue, env={"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
                                                   "OTEL_BSP_SCHEDULE_DELAY": "100"})
    yield collector, queue
    stop_worker(worker)
    collector.server.shutdown()


@pytest.fixture
def collector(exported, monkeypatch):
    """The collector; the work the test starts goes to its worker."""
    from mas_project.celery import app

    collector, queue = exported
    monkeypatch.setitem(app.conf, "task_default_queue", queue)
    return collector


def attributes(span) -> dict:
    found = {}
    for item in span.attributes:
        kind = item.value.WhichOneof("value")
        value = getattr(item.value, kind)
        found[item.key] = [getattr(one, one.WhichOneof("value")) for one in value.values] \
            if kind == "array_value" else value
    return found


def test_a_run_is_one_trace_of_run_session_model_and_tool_spans(team_a, collector):
    agent(team_a, "Lead")
    script = {"lead": [{**call("vfs_write", path="a.md", content="x"), "usage": {"prompt_tokens": 11,
                                                                                "completion_tokens": 3}},
                       {"text": "done", "usage": {"prompt_tokens": 20, "completion_tokens": 2}}]}
    run = finish(run_start(team=team_a, agent="lead", input="x", script=script))
    found = collector.trace(uuid.UUID(str(run.id)).bytes, 5)

    session = Session.objects.get(run=run)
    spans = {span.name: span for span in found}
    assert sorted(spans) == ["chat scripted", "execute_tool vfs_write", "invoke_agent lead", "run lead"]
    assert len(found) == 5  # two model calls
    run_span, session_span = spans["run lead"], spans["invoke_agent lead"]
    assert run_span.parent_span_id == b"" and session_span.parent_span_id == run_span.span_id
    chats = [span for span in found if span.name == "chat scripted"]
    assert {span.parent_span_id for span in chats} == {session_span.span_id}
    assert spans["execute_tool vfs_write"].parent_span_id == session_span.span_id
    # The run's id is the conversation's, on every span.
    assert [attributes(span)["gen_ai.conversation.id"] for span in found] == [str(run.id)] * 5
    assert {key: value for key, value in attributes(session_span).items() if key != "gen_ai.conversation.id"} == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "lead", "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "scripted", "gen_ai.usage.input_tokens": 31, "gen_ai.usage.output_tokens": 5,
        "mas.run.id": str(run.id), "mas.session.id": str(session.id), "mas.session.attempt": 1,
        "mas.session.status": "ok"}
    usage = sorted((attributes(span)["gen_ai.usage.input_tokens"], attributes(span)["gen_ai.usage.output_tokens"])
                   for span in chats)
    assert usage == [(11, 3), (20, 2)]
    chat = attributes(chats[0])
    assert {key: chat[key] for key in ("gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model",
                                       "mas.provider")} == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "scripted", "gen_ai.request.model": "scripted",
        "mas.provider": "scripted"}
    assert "gen_ai.system" not in chat  # its old name
    tool = attributes(spans["execute_tool vfs_write"])
    assert (tool["gen_ai.operation.name"], tool["gen_ai.tool.name"]) == ("execute_tool", "vfs_write")
    assert attributes(run_span) == {
        "gen_ai.agent.name": "lead", "gen_ai.conversation.id": str(run.id), "gen_ai.usage.input_tokens": 31,
        "gen_ai.usage.output_tokens": 5, "mas.run.id": str(run.id), "mas.run.status": "succeeded",
        "mas.workflow": "", "mas.cost_usd": 0.0}  # no mas.door: not started at a door


def test_a_run_started_at_the_openai_door_continues_the_callers_trace(team_a, collector, make_member, make_token):
    from asgiref.testing import ApplicationCommunicator

    from mas_project.asgi import application

    server = FakeServer().start()
    try:
        define(team_a, PROVIDER, f"---\nname: Fake\ntype: openai\nbase_url: {server.url}/v1\nmodels:\n"
                                 "- name: m-medium\n  tier: medium\n---\n")
        agent(team_a, "Helper", "expose: true\ntier: medium\n")
        server.add(sse(openai_stream(text=["Paris."], usage=(12, 4))))
        token = make_token(team_a, make_member(team_a, "operator"))

        async def ask() -> tuple[int, dict]:
            door = ApplicationCommunicator(application, {
                "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "query_string": b"",
                "headers": [(b"authorization", f"Bearer {token}".encode()), (b"host", b"testserver"),
                            (b"content-type", b"application/json"),
                            (b"traceparent", f"00-{CALLER_TRACE}-{CALLER_SPAN}-01".encode())],
                "client": ("127.0.0.1", 1), "server": ("testserver", 80), "scheme": "http"})
            await door.send_input({"type": "http.request", "more_body": False, "body": json.dumps(
                {"model": "helper", "messages": [{"role": "user", "content": "Capital of France?"}]}).encode()})
            start = await door.receive_output(timeout=60)
            body = await door.receive_output(timeout=10)
            await door.wait(timeout=5)
            return start["status"], json.loads(body["body"])

        status, answer = async_to_sync(ask)()
    finally:
        server.stop()
    run = Run.objects.get()
    assert (status, answer["choices"][0]["message"]["content"], run.status) == (200, "Paris.", "succeeded")
    found = collector.trace(bytes.fromhex(CALLER_TRACE), 3)

    # The run's spans are in the caller's trace, its root a child of the caller's span; none in a trace of its own.
    assert collector.of(uuid.UUID(str(run.id)).bytes) == []
    spans = {span.name: span for span in found}
    assert sorted(spans) == ["chat m-medium", "invoke_agent helper", "run helper"] and len(found) == 3
    run_span, session_span, chat = spans["run helper"], spans["invoke_agent helper"], spans["chat m-medium"]
    assert run_span.parent_span_id == bytes.fromhex(CALLER_SPAN)
    assert session_span.parent_span_id == run_span.span_id and chat.parent_span_id == session_span.span_id
    assert {(attributes(span)["gen_ai.conversation.id"]) for span in found} == {str(run.id)}
    assert (attributes(run_span)["mas.door"], attributes(run_span)["mas.run.status"]) == (
        "openai.chat_completions", "succeeded")
    for span in (session_span, chat):
        assert (attributes(span)["gen_ai.provider.name"], attributes(span)["gen_ai.request.model"]) == (
            "openai", "m-medium")
    assert (attributes(chat)["mas.provider"], attributes(chat)["gen_ai.usage.input_tokens"],
            attributes(chat)["gen_ai.usage.output_tokens"]) == ("fake", 12, 4)
    start = run.events.get(type="run_start").data
    assert (start["door"], start["traceparent"]) == ("openai.chat_completions",
                                                     f"00-{CALLER_TRACE}-{CALLER_SPAN}-01")


WORKFLOW_TEXT = """---
name: Brief
inputs: [topic]
steps:
- id: draft
  agent: writer
  prompt: "Write about {topic}"
---

A workflow.
"""


def test_a_workflow_run_is_an_invoke_workflow_span_and_an_unsampled_callers_run_is_not_traced(team_a, collector):
    agent(team_a, "Writer")
    define(team_a, WORKFLOW, WORKFLOW_TEXT)
    caller, unsampled_trace = "5ce929d0e0e47364bf92f3577b34da6a", "0af7651916cd43dd8448eb211c80319c"
    quiet = finish(run_start(team=team_a, agent="writer", input="x", script={"writer": [{"text": "ok"}]},
                             trace=RunTrace.at_door("mcp", f"00-{unsampled_trace}-b7ad6b7169203331-00")))
    run = finish(workflow_run_start(team=team_a, workflow="brief", inputs={"topic": "tides"},
                                    script={"writer": [{"text": "Tides turn."}]},
                                    trace=RunTrace.at_door("mcp", f"00-{caller}-{CALLER_SPAN}-01")))
    assert (quiet.status, run.status) == ("succeeded", "succeeded")
    found = collector.trace(bytes.fromhex(caller), 3)

    spans = {span.name: span for span in found}
    assert sorted(spans) == ["chat scripted", "invoke_agent writer", "invoke_workflow brief"] and len(found) == 3
    root = spans["invoke_workflow brief"]
    assert root.parent_span_id == bytes.fromhex(CALLER_SPAN)
    assert spans["invoke_agent writer"].parent_span_id == root.span_id
    shown = attributes(root)
    assert {key: shown[key] for key in ("gen_ai.operation.name", "gen_ai.agent.name", "gen_ai.conversation.id",
                                        "mas.workflow", "mas.door")} == {
        "gen_ai.operation.name": "invoke_workflow", "gen_ai.agent.name": "brief",
        "gen_ai.conversation.id": str(run.id), "mas.workflow": "brief", "mas.door": "mcp"}
    # The caller that did not sample its trace has no spans of its run, in its trace or in one of the run's own.
    assert collector.of(bytes.fromhex(unsampled_trace)) == []
    assert collector.of(uuid.UUID(str(quiet.id)).bytes) == []


def test_without_an_endpoint_nothing_is_traced(monkeypatch):
    from mas_core import telemetry

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert telemetry.tracer() is None
    assert async_to_sync(telemetry.session_span)(run_id=uuid.uuid4(), session_id="s", agent="a", attempt=1,
                                                 provider="openai", model="m") is None
    assert telemetry.child_span(None, "chat x", {}) is None
