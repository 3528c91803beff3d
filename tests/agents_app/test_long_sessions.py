"""Long sessions on real workers: compaction near the window, a SIGKILL mid-way, a provider that says
"context length exceeded", and big tool results of built-in, custom and MCP tools."""

import os
import signal
import sys
import time

import pytest

from agents_app.kinds import AGENT, PROVIDER

from tools_app.kinds import MCP, TOOL
from agents_app.execution.compaction import SUMMARY_SYSTEM
from agents_app.execution.journal import session_messages
from agents_app.execution.runs import run_start
from agents_app.kernel.context import SUMMARY_PREFIX
from agents_app.models import Run, Session, SessionEntry, Team, WorkspaceFile
from tests.agents_app.llm.fake_servers import FakeServer, json_reply, openai_stream, sse
from tests.runs import call, define, events, finish, wait_until
from tests.tools_app.mcp_servers.launch import SERVER
from tests.workers import start_worker, stop_worker
from tools_app.mcp.services import mcp_server_approve, mcp_server_test
from tools_app.models import MCPServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

STEPS = 300
PIECE = 3_000  # characters of each tool result
WINDOW = 16_000
TASK = "Read data.txt piece by piece and report."
SYSTEM = "You read long files carefully."
STALE_S = 3


def long_team(team):
    define(team, PROVIDER, "---\nname: Scripted\ntype: scripted\nmodels:\n- name: long-16k\n  tier: medium\n"
                           f"  context_window: {WINDOW}\n  max_output_tokens: 2000\n---\n")
    define(team, AGENT, "---\nname: Reader\nmodel: scripted:long-16k\ntools:\n- vfs_read\nlimits:\n"
                        "  max_steps: 400\n  max_tool_calls: 400\n  timeout_s: 900\n---\n\n" + SYSTEM + "\n")


def long_script(*, slow_step: int | None = None):
    turns = []
    for index in range(STEPS):
        turn = call("vfs_read", path="data.txt", offset=index * PIECE, max_chars=PIECE)
        if index + 1 == slow_step:
            turn["latency_ms"] = 4_000  # the worker is killed while this call is in flight
        turns.append(turn)
    turns.append({"text": f"Read {STEPS} pieces."})
    # Ten written summaries; after them the compactor's script is exhausted and the trim applies.
    return {"reader": turns, "compactor": [{"text": f"Summary {n}: pieces read so far, nothing odd."}
                                           for n in range(1, 11)]}


def long_run(team, script):
    run = run_start(team=team, agent="reader", input=TASK, script=script)
    # Queued, not yet started (no worker listens yet): the file it reads is there before it starts.
    text = "".join(f"piece {n:04d} " + chr(97 + n % 26) * (PIECE - 11) for n in range(STEPS + 1))
    WorkspaceFile.objects.create(run=run, path="data.txt", content=text)
    return run


def model_requests(run):
    return [e.data for e in events(run, "llm_request") if "purpose" not in e.data]


# Two 300-step runs on real workers, bounded by their own waits (600 s, 300 s, 600 s), not the suite's 300 s.
@pytest.mark.timeout(1800)
def test_a_300_step_session_stays_inside_a_16k_window_and_a_killed_one_resumes_with_the_same_requests(
        team_a, monkeypatch):
    from mas_project.celery import app

    queue = f"long-{os.getpid()}"
    monkeypatch.setitem(app.conf, "task_default_queue", queue)
    long_team(team_a)
    env = {"MAS_SESSION_STALE_S": str(STALE_S)}

    whole = long_run(team_a, long_script())
    worker = start_worker(f"long-a-{os.getpid()}", queue=queue, env=env)
    try:
        whole = finish(whole, timeout=600)
    finally:
        stop_worker(worker)
    assert (whole.status, whole.result) == ("succeeded", f"Read {STEPS} pieces.")

    # What the provider received: its own count of every request's tokens stays under the window.
    answers = [e.data for e in events(whole, "llm_response") if "purpose" not in e.data]
    assert len(answers) == STEPS + 1
    assert max(a["usage"]["prompt_tokens"] for a in answers) < WINDOW - 2_000
    compactions = [e.data for e in events(whole, "context_compacted")]
    assert len(compactions) >= 10
    assert {c["how"] for c in compactions[:10]} == {"summary"} and compactions[10]["how"] == "trim"
    assert all(c["tokens_after"] < c["tokens_before"] < WINDOW for c in compactions)
    assert sum(len(c["files_moved"]) for c in compactions) > 0
    summaries = [e.data for e in events(whole, "llm_response") if e.data.get("purpose") == "compaction"]
    assert [s["text"] for s in summaries] == [f"Summary {n}: pieces read so far, nothing odd." for n in range(1, 11)]
    # Accounted on the run: the session's calls and the summaries.
    every = [e.data["usage"] for e in events(whole, "llm_response")]
    assert whole.prompt_tokens == sum(u["prompt_tokens"] for u in every)
    # The last request still opens with the system prompt and the task.
    [session] = Session.objects.filter(run=whole)
    history = session_messages(session_id=session.id)
    assert history[0].role == "system" and history[0].content.startswith(SYSTEM)
    assert history[1].role == "user" and TASK in history[1].content
    assert history[2].content.startswith(SUMMARY_PREFIX) and history[-1].content == f"Read {STEPS} pieces."
    # Append-only: the entries in use are the history; the others are marked replaced.
    live = SessionEntry.objects.filter(session=session, replaced_by__isnull=True)
    assert live.filter(kind="message").count() == len(history)
    assert SessionEntry.objects.filter(session=session, replaced_by__isnull=False).count() > STEPS

    # The same session, killed while its 150th model call is in flight, resumes on another worker.
    killed = long_run(team_a, long_script(slow_step=150))
    first = start_worker(f"long-b-{os.getpid()}", queue=queue, env=env)
    try:
        wait_until(lambda: any(r["step"] == 150 for r in model_requests(killed)), 300, "the 150th model call")
        os.killpg(first.process.pid, signal.SIGKILL)
        first.process.wait(10)
    finally:
        stop_worker(first)
    time.sleep(STALE_S + 0.5)
    second = start_worker(f"long-c-{os.getpid()}", queue=queue, env=env)
    try:
        killed = finish(killed, timeout=600)
    finally:
        stop_worker(second)
    assert (killed.status, killed.result) == ("succeeded", f"Read {STEPS} pieces.")
    assert [e.data["resumed"] for e in events(killed, "session_start")] == [False, True]
    resumed = model_requests(killed)
    assert [r["step"] for r in resumed].count(150) == 2  # asked before the kill, and again after it
    by_step = {r["step"]: r["digest"] for r in model_requests(whole)}
    after = {r["step"]: r["digest"] for r in resumed}  # the last request of each step
    # The request sent again after the resume is the uninterrupted run's, byte for byte, and so are all
    # that follow.
    assert after == by_step


def test_context_length_exceeded_once_compacts_and_retries(team_a, celery_worker_process):
    server = FakeServer().start()
    try:
        define(team_a, PROVIDER, f"---\nname: Fake\ntype: openai\nbase_url: {server.url}/v1\nmodels:\n"
                                 "- name: m-small\n  tier: small\n- name: m-medium\n  tier: medium\n---\n")
        define(team_a, AGENT, "---\nname: Lead\ntier: medium\ntools:\n- vfs_write\n---\n\nYou write.\n")
        server.add(
            sse(openai_stream(tool_calls=[("call_1", "vfs_write", ['{"path": "a.md", "content": "one"}'])])),
            sse(openai_stream(tool_calls=[("call_2", "vfs_write", ['{"path": "b.md", "content": "two"}'])])),
            json_reply(400, {"error": {
                "message": "This model's maximum context length is 128000 tokens. However, your messages "
                           "resulted in 130211 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
            sse(openai_stream(text=["Wrote a.md with one."], usage=(50, 6), model="m-small")),
            sse(openai_stream(text=["Both ", "written."], usage=(30, 4))),
        )
        run = finish(run_start(team=team_a, agent="lead", input="Write a.md and b.md"))
    finally:
        server.stop()

    assert (run.status, run.result, run.error) == ("succeeded", "Both written.", "")
    bodies = [r.body for r in server.requests]
    assert [b["model"] for b in bodies] == ["m-medium", "m-medium", "m-medium", "m-small", "m-medium"]
    assert bodies[3]["messages"][0] == {"role": "system", "content": SUMMARY_SYSTEM}
    assert "vfs_write" in bodies[3]["messages"][1]["content"]
    # The refused request, then the retry: system prompt, task, the summary, the last turn.
    assert len(bodies[2]["messages"]) == 6
    retry = bodies[4]["messages"]
    assert [m["role"] for m in retry] == ["system", "user", "user", "assistant", "tool"]
    assert retry[:2] == bodies[2]["messages"][:2]
    assert retry[2]["content"] == f"{SUMMARY_PREFIX}\nWrote a.md with one."
    assert retry[3:] == bodies[2]["messages"][4:]
    [compacted] = [e.data for e in events(run, "context_compacted")]
    assert (compacted["reason"], compacted["how"], compacted["turns_removed"], compacted["files_moved"]) == (
        "context_length", "summary", 1, [])
    assert [e.data["kind"] for e in events(run, "error")] == ["context_length"]
    assert run.prompt_tokens == 50 + 30  # the summary's call is accounted on the run


CUSTOM = "---\nname: report\ndescription: Write a report.\nparameters:\n  topic: {}\nprompt: 'Report on {{topic}}'\n---\n"


def test_big_results_of_builtin_custom_and_mcp_tools_go_to_workspace_files(team_a, celery_worker_process):
    Team.objects.filter(pk=team_a.pk).update(tool_result_max_bytes=2_000, stdio_mcp_allowed=True)
    team_a.refresh_from_db()
    define(team_a, TOOL, CUSTOM)
    define(team_a, MCP, f"---\nname: demo-stdio\ntransport: stdio\ncommand: {sys.executable}\nargs:\n- {SERVER}\n"
                        "- stdio\ntimeout_s: 10\n---\n")
    row = MCPServer.objects.get(team=team_a, slug="demo-stdio")
    assert mcp_server_test(row=row)["ok"] is True
    mcp_server_approve(row=row)
    define(team_a, AGENT, "---\nname: Lead\ntools:\n- vfs_write\n- vfs_read\n- report\nmcp_servers:\n"
                          "- demo-stdio\n---\n\nYou collect.\n")
    long_text = "".join(f"row {n}\n" for n in range(1_000))  # 6 890 bytes
    script = {
        "lead": [
            call("vfs_write", path="big.txt", content=long_text),
            call("vfs_read", path="big.txt"),
            call("vfs_read", path="big.txt", offset=6_000, max_chars=100),
            call("report", topic="rows"),
            {"tool_calls": [{"name": "mcp__demo-stdio__add", "arguments": {"a": 2, "b": 3}}]},
            {"tool_calls": [{"name": "mcp__demo-stdio__flood", "arguments": {"megabytes": 1}}]},
            {"text": "Collected."},
        ],
        "report": [{"text": "R" * 5_000}],
    }
    run = finish(run_start(team=team_a, agent="lead", input="Collect", script=script))
    assert (run.status, run.result) == ("succeeded", "Collected.")

    results = [e.data for e in events(run, "tool_result")]
    assert [r["ok"] for r in results] == [True] * 6, [r["content"][:200] for r in results]
    # Built-in vfs_read: the file is already in the workspace, so the model is pointed into it.
    assert results[1]["content"] == long_text[:1_000] + (
        f"\n[big.txt: {len(long_text)} bytes from offset 0 are more than a tool result may hold (2000 bytes); "
        f"these are its first 1000 characters. Read on with vfs_read, path 'big.txt', offset 1000 and max_chars]")
    assert results[2]["content"] == long_text[6_000:6_100] + (
        f"\n[big.txt: characters 6000 to 6100 of {len(long_text)}; read on with offset 6100]")
    files = dict(WorkspaceFile.objects.filter(run=run).values_list("path", "content"))
    # The custom tool's result (its worker agent's answer) and the MCP tool's: stored, pointed to, named by
    # the kernel's id of the call.
    report_path = "tool-results/lead-tc-4.txt"
    assert files[report_path] == "R" * 5_000
    assert results[3]["content"].startswith("R" * 1_000 + "\n[result stored in the workspace: 5000 bytes")
    assert report_path in results[3]["content"]
    assert results[4]["content"] == "5"  # small results stay as they are
    flood_path = "tool-results/lead-tc-6.txt"
    assert files[flood_path].startswith("z" * 100_000) and len(files[flood_path]) > 100_000  # the registry's cap
    assert results[5]["content"].startswith("z" * 1_000 + "\n[result stored in the workspace: ")
    assert set(files) == {"big.txt", report_path, flood_path}
    # What the model was sent holds the pointers, not the results.
    [session] = Session.objects.filter(run=run, agent="lead")
    tool_messages = [m.content for m in session_messages(session_id=session.id) if m.role == "tool"]
    assert max(len(text.encode()) for text in tool_messages) < 2_000 + 300


def test_a_models_window_is_kept_on_its_row_and_an_impossible_one_is_refused(team_a):
    from mas_core.definitions.markdown import DefinitionError
    from mas_core.definitions.services import definition_parse
    from agents_app.models import ProviderModel

    long_team(team_a)
    row = ProviderModel.objects.get(provider__team=team_a, name="long-16k")
    assert (row.context_window, row.max_output_tokens) == (WINDOW, 2_000)
    text = "---\nname: Tiny\ntype: scripted\nmodels:\n- name: t\n  context_window: 10\n---\n"
    with pytest.raises(DefinitionError) as refused:
        definition_parse(kind=PROVIDER, team=team_a, text=text)
    assert "context_window" in str(refused.value) and "greater than or equal to 1024" in str(refused.value)
