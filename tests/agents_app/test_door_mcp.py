"""MAS as an MCP server, driven by the ``mcp`` SDK's own client over streamable HTTP against a real daphne and a
real worker: the agent's model is a local server speaking OpenAI's wire format."""

from __future__ import annotations

import asyncio

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from agents_app.models import Run
from tests.agents_app.llm.fake_servers import hang, openai_stream, sse
from tests.runs import agent, define, wait_until
from tests.agents_app.doors import provider, run_example, token_of, web  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def with_session(web: str, token: str, work):
    """``work(session)`` on an initialized MCP session with the team's token, its result."""
    async def main():
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            async with streamable_http_client(f"{web}/mcp/", http_client=http) as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    await session.initialize()
                    return await work(session)

    return asyncio.run(main())


def test_the_tools_are_the_teams_exposed_agents_and_workflows_and_a_call_is_a_run(
        web, team_a, team_b, provider, make_member, make_token, celery_worker_process):
    from workflows_app.kinds import WORKFLOW

    agent(team_a, "Helper", "expose: true\ntier: medium\ndescription: Answers questions about tides.\n")
    agent(team_a, "Hidden")
    define(team_a, WORKFLOW, "---\nname: Brief\nexpose: true\ninputs: [topic]\nsteps:\n- id: write\n  agent: hidden\n"
                             "  prompt: '{topic}'\n---\n")
    agent(team_b, "Other", "expose: true\n")
    operator = token_of(team_a, "operator", make_member, make_token)
    provider.add(sse(openai_stream(text=["High tide is at 06:12."], usage=(11, 6))))
    progress: list[tuple[float, str]] = []

    async def work(session):
        listed = await session.list_tools()

        async def told(value, total, message):
            progress.append((value, message))

        result = await session.call_tool("helper", {"task": "When is high tide?", "context": "Brest, today"},
                                         progress_callback=told)
        refused = await session.call_tool("hidden", {"task": "x"})
        return listed, result, refused

    listed, result, refused = with_session(web, operator, work)
    assert [(tool.name, tool.description) for tool in listed.tools] == [
        ("helper", "Answers questions about tides."), ("workflow__brief", "The workflow brief.")]
    assert listed.tools[0].input_schema["required"] == ["task"]
    assert listed.tools[1].input_schema == {"type": "object", "additionalProperties": False, "required": ["topic"],
                                            "properties": {"topic": {"type": "string"}}}
    run = Run.objects.get()
    assert (result.is_error, [c.text for c in result.content]) == (False, ["High tide is at 06:12."])
    assert result.meta == {"mas/run": str(run.id)}
    assert run.input == "The caller's instructions:\nBrest, today\n\nThe message to answer:\nWhen is high tide?"
    assert [message for _, message in progress] == ["helper started", "helper ok", "run succeeded"]
    assert [value for value, _ in progress] == [1, 2, 3]
    assert (refused.is_error, refused.content[0].text) == (
        True, "the model 'hidden' does not exist or the token may not call it: GET /v1/models lists what it may")

    other = with_session(web, token_of(team_b, "operator", make_member, make_token), lambda s: s.list_tools())
    assert [tool.name for tool in other.tools] == ["other"]
    viewer = with_session(web, token_of(team_a, "viewer", make_member, make_token),
                          lambda s: s.call_tool("helper", {"task": "x"}))
    assert (viewer.is_error, viewer.content[0].text) == (True, f"role viewer in team {team_a.slug} does not allow run")
    answer = httpx.post(f"{web}/mcp/", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                        headers={"Authorization": "Bearer mas_wrong", "Accept": "application/json, text/event-stream"})
    assert (answer.status_code, answer.json()["code"], answer.headers["www-authenticate"]) == (
        401, "invalid_api_key", "Bearer")
    assert Run.objects.count() == 1


def test_a_cancelled_call_cancels_its_run(web, team_a, provider, make_member, make_token, celery_worker_process):
    agent(team_a, "Helper", "expose: true\ntier: medium\n")
    provider.add(hang(30))

    async def work(session):
        call = asyncio.ensure_future(session.call_tool("helper", {"task": "Take your time"}))
        await asyncio.to_thread(wait_until, lambda: Run.objects.filter(status="running").exists(), 30,
                                "the run running")
        call.cancel()  # the SDK's client tells the server (notifications/cancelled)
        try:
            await call
        except asyncio.CancelledError:
            pass
        await asyncio.sleep(0.5)

    with_session(web, token_of(team_a, "operator", make_member, make_token), work)
    assert wait_until(lambda: Run.objects.get().status == "cancelled", 30, "the run cancelled")


def test_mcp_serve_serves_the_same_tools_over_stdio_with_the_token_in_its_environment(
        team_a, team_b, provider, make_member, make_token, celery_worker_process):
    import os
    import sys

    from django.conf import settings
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    agent(team_a, "Helper", "expose: true\ntier: medium\n")
    provider.add(sse(openai_stream(text=["Low tide at noon."], usage=(5, 4))))
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "mas_project.settings_test",
                   "MAS_DATABASE_NAME": settings.DATABASES["default"]["NAME"],
                   "MAS_CELERY_QUEUE": settings.CELERY_TASK_DEFAULT_QUEUE}

    def serve(token: str, team: str = team_a.slug) -> StdioServerParameters:
        return StdioServerParameters(command=sys.executable, args=["manage.py", "mcp_serve", "--team", team],
                                     env={**environment, "MAS_TOKEN": token}, cwd=str(settings.BASE_DIR))

    operator = serve(token_of(team_a, "operator", make_member, make_token))

    async def main():
        async with stdio_client(operator) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await session.list_tools(), await session.call_tool("helper", {"task": "Low tide?"})

    listed, result = asyncio.run(main())
    assert [tool.name for tool in listed.tools] == ["helper"]
    assert (result.is_error, result.content[0].text) == (False, "Low tide at noon.")
    assert Run.objects.get().result == "Low tide at noon."

    import subprocess

    wrong_team = subprocess.run([sys.executable, "manage.py", "mcp_serve", "--team", team_b.slug],
                                env={**environment, "MAS_TOKEN": token_of(team_a, "operator", make_member, make_token)},
                                cwd=settings.BASE_DIR, capture_output=True, text=True, timeout=60, check=False)
    assert (wrong_team.returncode, wrong_team.stdout) == (1, "")
    assert wrong_team.stderr.strip().endswith(f"MAS_TOKEN is a token of team {team_a.slug}, not of {team_b.slug}")


@pytest.mark.parametrize("name, printed", [
    ("README.md", "['helper']\nParis.\n"),
    ("docs/reference/mcp-server.md", "['helper']\n… helper started\n… helper ok\n… run succeeded\nParis.\n")])
def test_the_manuals_example_lists_and_calls_the_tools(name, printed, web, team_a, provider, make_member, make_token,
                                                       celery_worker_process, tmp_path):
    agent(team_a, "Helper", "expose: true\ntier: medium\n")
    provider.add(sse(openai_stream(text=["Paris."], usage=(9, 2))))
    token = token_of(team_a, "operator", make_member, make_token)
    done = run_example(tmp_path, name, "streamable_http_client(", web, token)
    assert (done.returncode, done.stdout) == (0, printed), done.stderr
    assert Run.objects.get().result == "Paris."


def test_an_agents_object_output_is_structured_content_and_an_approval_keeps_the_call_waiting(
        web, team_a, provider, make_member, make_token, celery_worker_process, api_for):
    from agents_app.models import ApprovalRequest

    schema = "output_schema:\n  type: object\n  required: [city]\n  properties:\n    city: {type: string}\n"
    agent(team_a, "Locator", "expose: true\ntier: medium\ntools: [vfs_write]\napproval: [vfs_write]\n" + schema)
    provider.add(sse(openai_stream(tool_calls=[("c1", "vfs_write", ['{"path": "a.md", "content": "Paris"}'])],
                                   usage=(5, 5))),
                 sse(openai_stream(text=['{"city": "Paris"}'], usage=(6, 3))))
    operator = api_for(team_a, "operator")

    def approve():
        request = wait_until(lambda: ApprovalRequest.objects.filter(status="pending").first(), 60, "the approval")
        assert operator.post(f"/api/approvals/{request.id}", {"decision": "approve"}).status_code == 200

    async def work(session):
        listed = await session.list_tools()
        call = asyncio.ensure_future(session.call_tool("locator", {"task": "Where?"}))
        await asyncio.to_thread(approve)  # the call waits meanwhile: decided in MAS
        return listed, await call

    listed, result = with_session(web, token_of(team_a, "operator", make_member, make_token), work)
    assert listed.tools[0].output_schema == {"type": "object", "required": ["city"],
                                             "properties": {"city": {"type": "string"}}}
    assert (result.is_error, result.structured_content, result.content[0].text) == (
        False, {"city": "Paris"}, '{"city": "Paris"}')
    assert Run.objects.get().status == "succeeded"
