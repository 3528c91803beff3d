"""An agent's MCP servers in a real run on a real worker, and testing/approving servers over the API."""

import sys

import pytest

from tools_app.kinds import MCP
from agents_app.execution.runs import run_start
from tests.runs import agent, call, define, events, finish
from tests.tools_app.mcp_servers.launch import SERVER, free_port, serve
from tools_app.mcp.services import mcp_server_approve, mcp_server_test
from tools_app.models import MCPServer
from tests.tools_app.stdio_teams import team_a, team_b  # noqa: F401 (fixtures: the teams hold the stdio grant)



pytestmark = [pytest.mark.django_db(transaction=True)]



@pytest.fixture
def http_mcp():
    process, port = serve("http")
    yield f"http://127.0.0.1:{port}/mcp"
    process.terminate()
    process.wait(10)


def servers(team, http_url):
    define(team, MCP, f"---\nname: demo-stdio\ntransport: stdio\ncommand: {sys.executable}\nargs:\n- {SERVER}\n"
                      "- stdio\ntimeout_s: 10\n---\n")  # a Python server's start, on busy cores
    define(team, MCP, f"---\nname: demo-http\ntransport: streamable-http\nurl: {http_url}\ntimeout_s: 3\n"
                      "tools:\n- add\n- hang\n---\n")
    define(team, MCP, f"---\nname: gone\ntransport: streamable-http\nurl: http://127.0.0.1:{free_port()}/mcp\n"
                      "timeout_s: 10\n---\n")  # refused at once; 10 s for a busy worker's first MCP client


@pytest.mark.worker
# alone: twice under the parallel suite's load the first request offered 23 tools, not 24 (every connect event
# as expected; the cause is not found yet, see the closing note of 2026-11-27)
@pytest.mark.alone
def test_an_agent_calls_mcp_tools_through_a_real_run_and_the_session_survives_bad_servers(
        team_a, http_mcp, celery_worker_process):
    servers(team_a, http_mcp)
    for slug in ("demo-stdio", "demo-http"):
        row = MCPServer.objects.get(team=team_a, slug=slug)
        assert mcp_server_test(row=row)["ok"] is True
        mcp_server_approve(row=row)
    # env_value changed since it was approved: it waits for approval again.
    row = MCPServer.objects.get(team=team_a, slug="demo-stdio")
    MCPServer.objects.filter(pk=row.pk).update(approved_tools={**row.approved_tools, "env_value": "0" * 64})
    agent(team_a, "Lead", "mcp_servers:\n- demo-stdio\n- name: demo-http\n  tools:\n  - add\n- gone\n- nowhere\n")
    script = {"lead": [
        call("mcp__demo-stdio__add", a=2, b=40),
        call("mcp__demo-http__add", a=1, b=1),
        {"tool_calls": [{"name": "mcp__demo-stdio__env_value", "arguments": {"name": "HOME"}}]},
        call("mcp__demo-stdio__add", a="two", b=1),
        call("mcp__demo-stdio__crash"),
        call("mcp__demo-stdio__add", a=1, b=2),
        {"text": "done despite the servers"},
    ]}
    run = finish(run_start(team=team_a, agent="lead", input="Use the servers", script=script))
    assert (run.status, run.result) == ("succeeded", "done despite the servers")

    connects = {e.data["server"]: e.data for e in events(run, "mcp_connect")}
    assert connects["demo-stdio"]["ok"] is True
    assert connects["demo-stdio"]["tools"] == ["add", "hang", "crash", "fail", "flood"]
    assert connects["demo-stdio"]["awaiting_approval"] == ["env_value"]
    assert (connects["demo-http"]["ok"], connects["demo-http"]["tools"]) == (True, ["add"])  # row ∩ agent lists
    assert connects["gone"]["ok"] is False and connects["gone"]["error"].startswith("MCP server gone could not be "
                                                                                     "reached: ")
    assert connects["nowhere"] == {"server": "nowhere", "ok": False, "error": "no such MCP server in this team",
                                   "tools": []}
    [request] = [e.data for e in events(run, "llm_request")][:1]
    assert request["tools"] == 18 + 5 + 1  # the safe built-ins, 5 stdio tools, 1 http tool
    results = [(e.data["ok"], e.data["content"]) for e in events(run, "tool_result")]
    assert results[0] == (True, "42") and results[1] == (True, "2")
    assert results[2][0] is False and results[2][1].startswith("Unknown tool 'mcp__demo-stdio__env_value'")
    assert results[3] == (False, "Invalid arguments for mcp__demo-stdio__add: arguments: Value error, a: 'two' is not "
                                 "of type 'integer'. Parameters: a (integer, required), b (integer, required).")
    assert results[4] == (False, "MCP server demo-stdio: crash failed: MCPError: Connection closed")
    assert results[5] == (False, "MCP server demo-stdio: add failed: MCPError: Connection closed")
    calls = [(e.data["server"], e.data["tool"], e.data["ok"]) for e in events(run, "mcp_tool_call")]
    assert calls == [("demo-stdio", "add", True), ("demo-http", "add", True), ("demo-stdio", "crash", False),
                     ("demo-stdio", "add", False)]
    assert sorted(e.data["server"] for e in events(run, "mcp_disconnect")) == ["demo-http", "demo-stdio"]


def test_testing_and_approving_over_the_api(team_a, team_b, http_mcp, api_for):
    servers(team_a, http_mcp)
    editor = api_for(team_a, "editor")
    response = editor.post("/api/mcp-servers/demo-http/test", {})
    assert response.status_code == 200, response.content
    report = response.json()
    assert report["ok"] is True and report["error"] is None and report["timings_ms"]["connect_and_list_ms"] > 0
    assert [(t["name"], t["approved"], t["changed"]) for t in report["tools"]] == [
        (name, False, False) for name in ["add", "env_value", "hang", "crash", "fail", "flood"]]
    assert editor.post("/api/mcp-servers/demo-http/approve", {}).json() == {
        "approved": ["add", "crash", "env_value", "fail", "flood", "hang"]}
    assert all(t["approved"] for t in editor.post("/api/mcp-servers/demo-http/test", {}).json()["tools"])
    gone = editor.post("/api/mcp-servers/gone/test", {}).json()
    assert gone["ok"] is False and gone["error"].startswith("MCP server gone could not be reached: ")
    # A stdio server runs a command on the server: an editor without the stdio permission may not test it.
    assert editor.post("/api/mcp-servers/demo-stdio/test", {}).status_code == 403
    assert api_for(team_a, "admin").post("/api/mcp-servers/demo-stdio/test", {}).json()["ok"] is True
    assert api_for(team_a, "viewer").post("/api/mcp-servers/demo-http/test", {}).status_code == 403
    assert api_for(team_b, "admin").post("/api/mcp-servers/demo-http/test", {}).status_code == 404


def test_the_admin_actions_test_and_approve_servers(team_a, http_mcp, make_member):
    from django.contrib.messages import get_messages

    from tools_app.kinds import MCP as MCP_KIND
    from tests.agents_app.test_admin_definitions import admin_url, client_for

    servers(team_a, http_mcp)
    client = client_for(make_member(team_a, "editor"))
    rows = {row.slug: row.pk for row in MCPServer.objects.filter(team=team_a)}
    url = admin_url(MCP_KIND, "changelist")
    response = client.post(url, {"action": "test_and_discover",
                                 "_selected_action": [rows["demo-http"], rows["gone"], rows["demo-stdio"]]})
    texts = sorted(str(message) for message in get_messages(response.wsgi_request))
    # demo-stdio is left out: an editor without the stdio permission may not run its command.
    assert len(texts) == 2
    assert texts[0].startswith("demo-http: connected and listed in ")
    assert texts[0].endswith(": add (not approved), env_value (not approved), hang (not approved), "
                             "crash (not approved), fail (not approved), flood (not approved)")
    assert texts[1].startswith("gone: MCP server gone could not be reached: ")
    assert MCPServer.objects.get(pk=rows["demo-stdio"]).discovered_tools == []
    response = client.post(url, {"action": "approve_tools", "_selected_action": [rows["demo-http"]]})
    assert [str(m) for m in get_messages(response.wsgi_request)][-1] == (
        "demo-http: approved add, crash, env_value, fail, flood, hang")
    row = MCPServer.objects.get(pk=rows["demo-http"])
    assert sorted(row.approved_tools) == ["add", "crash", "env_value", "fail", "flood", "hang"]


@pytest.mark.worker
def test_a_workers_next_session_reuses_an_http_connection_but_not_a_stdio_process(
        team_a, http_mcp, celery_worker_process):
    servers(team_a, http_mcp)
    for slug in ("demo-stdio", "demo-http"):
        row = MCPServer.objects.get(team=team_a, slug=slug)
        assert mcp_server_test(row=row)["ok"] is True
        mcp_server_approve(row=row)
    agent(team_a, "Lead", "mcp_servers:\n- demo-stdio\n- demo-http\n")
    script = {"lead": [call("mcp__demo-http__add", a=1, b=2), {"text": "ok"}]}
    first = finish(run_start(team=team_a, agent="lead", input="x", script=script))
    second = finish(run_start(team=team_a, agent="lead", input="x", script=script))
    for run in (first, second):
        connects = [e.data for e in events(run, "mcp_connect")]
        assert {c["server"]: c["ok"] for c in connects} == {"demo-stdio": True, "demo-http": True}, connects
        assert [e.data["content"] for e in events(run, "tool_result")] == ["3"]
    reused = [{e.data["server"]: e.data["reused"] for e in events(run, "mcp_connect")} for run in (first, second)]
    assert reused == [{"demo-stdio": False, "demo-http": False}, {"demo-stdio": False, "demo-http": True}]
    kept = [{e.data["server"]: e.data["kept_open"] for e in events(run, "mcp_disconnect")} for run in (first, second)]
    assert kept == [{"demo-stdio": False, "demo-http": True}] * 2
