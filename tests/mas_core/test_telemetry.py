"""Where a run's trace starts (mas_core.telemetry.RunTrace): the door, and the caller's W3C traceparent, kept
only when it is a valid one. The spans themselves are tested with a real worker (tests/ops/test_tracing.py)."""

import pytest

from agents_app.doors.common import trace_of
from mas_core.telemetry import RunTrace

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize("header, kept", [
    (CALLER, CALLER),
    (f"  {CALLER} ", CALLER),
    # A later version may add fields: its first four are read, and continued as version 00.
    ("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-more", "00-4bf92f3577b34da6a3ce929d0e0e4736-"
                                                                        "00f067aa0ba902b7-03"),
    (f"{CALLER}-more", None),  # version 00 has four fields
    ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None),
    ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", None),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", None),
    (CALLER.upper(), None),
    ("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", None),
    ("", None),
    (None, None),
])
def test_a_traceparent_is_continued_only_when_valid(header, kept):
    trace = RunTrace.at_door("openai.responses", header)
    assert trace == RunTrace(door="openai.responses", traceparent=kept)
    assert trace.to_json() == {"door": "openai.responses", **({"traceparent": kept} if kept else {})}
    assert RunTrace.from_json(trace.to_json()) == trace
    caller = trace.caller()
    if kept is None:
        assert caller is None
    else:
        context = caller.get_span_context()
        assert (f"{context.trace_id:032x}", f"{context.span_id:016x}", context.is_remote) == (
            kept[3:35], kept[36:52], True)


def test_a_run_not_started_at_a_door_has_no_run_trace():
    assert RunTrace.from_json({"agent": "lead", "input": "x"}) is None


def test_a_door_reads_the_traceparent_header_or_the_one_it_is_given():
    scope = {"headers": [(b"authorization", b"Bearer x"), (b"traceparent", CALLER.encode())]}
    assert trace_of("openai.chat_completions", scope) == RunTrace("openai.chat_completions", CALLER)
    assert trace_of("mcp", {"headers": []}) == RunTrace("mcp", None)
    assert trace_of("mcp", None) == RunTrace("mcp", None)
    # An MCP call's _meta traceparent comes first (the only one over stdio).
    given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert trace_of("mcp", scope, given) == RunTrace("mcp", given)
