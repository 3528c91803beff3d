"""The A2A door, driven by the ``a2a-sdk``'s own client (protocol 1.0, and its 0.3 client) against a real daphne
and a real worker: the agent's model is a local server speaking OpenAI's wire format, so the whole way runs —
client, door, run, worker, provider, events, door, client.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, VERSION_HEADER

from agents_app.models import ApprovalRequest, Run, WorkspaceFile
from tests.agents_app.llm.fake_servers import hang, openai_stream, sse
from tests.runs import agent, wait_until
from tests.agents_app.doors import provider, run_example, token_of, web  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

WORKING, COMPLETED = TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED
INPUT_REQUIRED, CANCELED = TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_CANCELED


def with_client(web: str, token: str, slug: str, work, *, streaming: bool = False, version: str = PROTOCOL_VERSION_1_0):
    """``work(client, card)`` with the SDK's client of the agent ``slug`` (its card fetched with the token), the
    transport of protocol ``version``: its result."""
    async def main():
        headers = {"Authorization": f"Bearer {token}"}
        if version == PROTOCOL_VERSION_1_0:
            headers[VERSION_HEADER] = version
        async with httpx.AsyncClient(headers=headers, timeout=60) as http:
            factory = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http))
            card = await A2ACardResolver(http, f"{web}/a2a/{slug}").get_agent_card()
            only = AgentCard()  # the card with the interface of ``version`` alone: the SDK picks 1.0 when offered
            only.CopyFrom(card)
            del only.supported_interfaces[:]
            only.supported_interfaces.extend(i for i in card.supported_interfaces if i.protocol_version == version)
            async with factory.create(only) as client:
                return await work(client, card)

    return asyncio.run(main())


def said(text: str, task_id: str = "") -> SendMessageRequest:
    return SendMessageRequest(message=Message(message_id="m-" + text[:8], role=Role.ROLE_USER, task_id=task_id,
                                              parts=[Part(text=text)]))


def running(task: str) -> None:
    """Once the run of ``task`` runs (read from a thread of the client's loop, its connection closed after)."""
    from django.db import connection

    try:
        wait_until(lambda: Run.objects.filter(input=task, status="running").exists(), 60, "the run running")
    finally:
        connection.close()


async def sent(client, request: SendMessageRequest) -> list:
    return [response async for response in client.send_message(request)]


def test_the_card_describes_the_agent_and_a_message_is_a_run_whose_answer_is_the_artifact(
        web, team_a, provider, make_member, make_token, celery_worker_process, api_for):
    agent(team_a, "Helper", "expose: true\ntier: medium\ndescription: Answers questions about capitals.\n")
    provider.add(sse(openai_stream(text=["Paris ", "is the capital."], usage=(12, 4))))
    token = token_of(team_a, "operator", make_member, make_token)

    async def work(client, card):
        return card, await sent(client, said("Capital of France?"))

    card, responses = with_client(web, token, "helper", work)
    assert (card.name, card.description, card.version) == ("Helper", "Answers questions about capitals.", "1")
    assert [(i.url, i.protocol_binding, i.protocol_version) for i in card.supported_interfaces] == [
        (f"{web}/a2a/helper", "JSONRPC", "1.0"), (f"{web}/a2a/helper", "JSONRPC", "0.3")]
    assert card.capabilities.streaming and not card.capabilities.push_notifications
    assert [(s.id, s.name, s.description) for s in card.skills] == [
        ("helper", "Helper", "Answers questions about capitals.")]
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "bearer"
    assert list(card.security_requirements[0].schemes) == ["bearer"]

    run = Run.objects.get()
    [response] = responses
    task = response.task
    assert (task.id, task.context_id, task.status.state) == (str(run.id), str(run.id), COMPLETED)
    assert [(a.artifact_id, a.parts[0].text) for a in task.artifacts] == [("answer", "Paris is the capital.")]
    assert [(m.role, m.parts[0].text) for m in task.history] == [(Role.ROLE_USER, "Capital of France?")]
    assert (run.agent, run.input, run.status, run.result) == ("helper", "Capital of France?", "succeeded",
                                                              "Paris is the capital.")
    assert run.events.get(type="run_start").data["door"] == "a2a"
    assert api_for(team_a, "viewer").get(f"/api/runs/{run.id}").json()["status"] == "succeeded"


def test_a_streamed_message_tells_the_state_the_text_as_it_comes_and_the_final_artifacts(
        web, team_a, provider, make_member, make_token, celery_worker_process):
    agent(team_a, "Writer", "expose: true\ntier: medium\ntools: [vfs_write]\n")
    pieces = [f"{word} " * 40 for word in ("Paris", "Lyon!", "Nice.")]  # a stream chunk each 200 characters
    provider.add(sse(openai_stream(tool_calls=[("c1", "vfs_write", ['{"path": "notes.md", "content": "# Notes"}'])],
                                   usage=(5, 5))),
                 sse(openai_stream(text=pieces, usage=(12, 4)), event_delay_s=0.3))
    token = token_of(team_a, "operator", make_member, make_token)

    async def work(client, card):
        return await sent(client, said("Write notes"))

    responses = with_client(web, token, "writer", work, streaming=True)
    run = Run.objects.get()
    kinds = [response.WhichOneof("payload") for response in responses]
    assert kinds[0] == "task" and responses[0].task.id == str(run.id)
    assert kinds[-1] == "status_update" and responses[-1].status_update.status.state == COMPLETED
    updates = [response.artifact_update for response in responses if response.HasField("artifact_update")]
    streamed = [u.artifact.parts[0].text for u in updates if not u.last_chunk]
    assert "".join(streamed) == "".join(pieces) and len(streamed) > 1  # told as the worker streamed it
    assert [u.append for u in updates if not u.last_chunk] == [False] + [True] * (len(streamed) - 1)
    assert [(u.artifact.artifact_id, u.artifact.parts[0].text, u.append) for u in updates if u.last_chunk] == [
        ("answer", "".join(pieces), False), ("file:notes.md", "# Notes", False)]
    assert WorkspaceFile.objects.get(run=run).content == "# Notes" and run.result == "".join(pieces)


def test_tasks_are_got_listed_and_cancelled_and_another_teams_token_reaches_none(
        web, team_a, team_b, provider, make_member, make_token, celery_worker_process):
    agent(team_a, "Helper", "expose: true\ntier: medium\n")
    agent(team_b, "Helper", "expose: true\ntier: medium\n")
    provider.add(sse(openai_stream(text=["Done."])), hang(30))
    token = token_of(team_a, "operator", make_member, make_token)

    async def work(client, card):
        [done] = await sent(client, said("First"))
        request = said("Second")
        request.configuration.return_immediately = True
        [going] = await sent(client, request)
        await asyncio.to_thread(running, "Second")
        cancelled = await client.cancel_task(CancelTaskRequest(id=going.task.id))
        got = await client.get_task(GetTaskRequest(id=done.task.id))
        listed = await client.list_tasks(ListTasksRequest(include_artifacts=True))
        cancelled_only = await client.list_tasks(ListTasksRequest(status=CANCELED))
        with pytest.raises(Exception) as again:
            await client.cancel_task(CancelTaskRequest(id=going.task.id))
        return done.task, going.task, cancelled, got, listed, cancelled_only, again.value

    done, going, cancelled, got, listed, cancelled_only, again = with_client(web, token, "helper", work)
    first, second = Run.objects.get(input="First"), Run.objects.get(input="Second")
    assert (done.id, going.id) == (str(first.id), str(second.id))
    # Answered at once, as it is then: still queued, or already taken by the worker (a race on a busy machine).
    assert going.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    assert (cancelled.id, cancelled.status.state, second.status) == (str(second.id), CANCELED, "cancelled")
    assert (got.id, got.status.state, got.artifacts[0].parts[0].text) == (str(first.id), COMPLETED, "Done.")
    assert [(t.id, t.status.state) for t in listed.tasks] == [(str(second.id), CANCELED), (str(first.id), COMPLETED)]
    assert (listed.total_size, listed.tasks[1].artifacts[0].parts[0].text) == (2, "Done.")
    assert [t.id for t in cancelled_only.tasks] == [str(second.id)]
    assert "is canceled already" in str(again)

    # Team B's token: not its agent's tasks, nor team A's runs, nor a card of an agent it lacks.
    other = token_of(team_b, "admin", make_member, make_token)

    async def theirs(client, card):
        found = []
        for call in (lambda: client.get_task(GetTaskRequest(id=str(first.id))),
                     lambda: client.cancel_task(CancelTaskRequest(id=str(first.id))),
                     lambda: sent(client, said("Answer", task_id=str(first.id)))):
            with pytest.raises(Exception) as refused:
                await call()
            found.append(str(refused.value))
        return found, await client.list_tasks(ListTasksRequest())

    refusals, theirs_listed = with_client(web, other, "helper", theirs)
    assert all("no task" in refusal for refusal in refusals), refusals
    assert list(theirs_listed.tasks) == []
    headers = {"Authorization": f"Bearer {other}"}
    agent(team_a, "Secret", "expose: true\n")
    for method, path in (("GET", "/a2a/secret/.well-known/agent-card.json"), ("POST", "/a2a/secret")):
        answer = httpx.request(method, f"{web}{path}", headers=headers, json={"jsonrpc": "2.0", "id": 1,
                                                                              "method": "GetTask", "params": {}})
        assert (answer.status_code, answer.json()["error"]["code"]) == (404, "not_found")
    assert httpx.get(f"{web}/a2a/helper/.well-known/agent-card.json").status_code == 401
    assert Run.objects.count() == 2


def test_an_input_required_task_is_answered_by_a_follow_up_message(
        web, team_a, provider, make_member, make_token, celery_worker_process):
    agent(team_a, "Guide", "expose: true\ntier: medium\ntools: [ask_human]\n")
    provider.add(sse(openai_stream(tool_calls=[("c1", "ask_human", ['{"question": "Which city?"}'])], usage=(5, 5))),
                 sse(openai_stream(text=["Oslo it is."], usage=(6, 3))))
    token = token_of(team_a, "operator", make_member, make_token)

    async def ask(client, card):
        [asked] = await sent(client, said("Plan a trip"))
        got = await client.get_task(GetTaskRequest(id=asked.task.id))
        return asked.task, got

    asked, got = with_client(web, token, "guide", ask)
    run = Run.objects.get()
    assert (asked.id, asked.status.state, asked.status.message.parts[0].text) == (
        str(run.id), INPUT_REQUIRED, "Which city?")
    assert (got.status.state, run.status) == (INPUT_REQUIRED, "waiting")
    # The answer, streamed: the run goes on (working), then its answer and its end.
    answered = with_client(web, token, "guide", lambda client, card: sent(client, said("Oslo", task_id=str(run.id))),
                           streaming=True)
    assert answered[0].task.id == str(run.id)
    assert [u.status_update.status.state for u in answered if u.HasField("status_update")] == [WORKING, COMPLETED]
    assert [(u.artifact_update.artifact.artifact_id, u.artifact_update.artifact.parts[0].text) for u in answered
            if u.artifact_update.last_chunk] == [("answer", "Oslo it is.")]
    assert Run.objects.get().result == "Oslo it is."
    request = ApprovalRequest.objects.get(run=run)
    assert (request.kind, request.status, request.decision["answer"]) == ("question", "answered", "Oslo")
    assert "Oslo" in str(provider.requests[-1])  # the model's next turn read the answer


def test_the_0_3_client_sends_gets_and_cancels(web, team_a, provider, make_member, make_token,
                                               celery_worker_process):
    agent(team_a, "Helper", "expose: true\ntier: medium\n")
    provider.add(sse(openai_stream(text=["Paris."])), hang(30))
    token = token_of(team_a, "operator", make_member, make_token)

    async def work(client, card):
        [done] = await sent(client, said("Capital of France?"))
        got = await client.get_task(GetTaskRequest(id=done.task.id))
        request = said("Wait")
        request.configuration.return_immediately = True
        [going] = await sent(client, request)
        await asyncio.to_thread(running, "Wait")
        cancelled = await client.cancel_task(CancelTaskRequest(id=going.task.id))
        return done.task, got, cancelled

    done, got, cancelled = with_client(web, token, "helper", work, version=PROTOCOL_VERSION_0_3)
    run = Run.objects.get(input="Capital of France?")
    assert (done.id, done.status.state, done.artifacts[0].parts[0].text) == (str(run.id), COMPLETED, "Paris.")
    assert (got.id, got.status.state, got.artifacts[0].parts[0].text) == (str(run.id), COMPLETED, "Paris.")
    assert (cancelled.status.state, Run.objects.get(input="Wait").status) == (CANCELED, "cancelled")
    # The 0.3 names on the wire, as a client that still speaks them sends them.
    answer = httpx.post(f"{web}/a2a/helper", headers={"Authorization": f"Bearer {token}"}, json={
        "jsonrpc": "2.0", "id": 7, "method": "tasks/get", "params": {"id": str(run.id)}}).json()
    assert (answer["id"], answer["result"]["id"], answer["result"]["status"]["state"]) == (7, str(run.id), "completed")
    assert answer["result"]["artifacts"][0]["parts"][0]["text"] == "Paris."


def test_the_manuals_example_streams_a_message_and_gets_its_task(web, team_a, provider, make_member, make_token,
                                                                  celery_worker_process, tmp_path):
    agent(team_a, "Helper", "expose: true\ntier: medium\ndescription: Knows capitals.\n")
    provider.add(sse(openai_stream(text=["Paris."], usage=(9, 2))))
    token = token_of(team_a, "operator", make_member, make_token)
    done = run_example(tmp_path, "docs/reference/a2a.md", "A2ACardResolver(", web, token)
    assert (done.returncode, done.stdout) == (0, "Helper Knows capitals.\nanswer: Paris.\nstatus: completed\n"
                                                 "completed Paris.\n"), done.stderr
    assert Run.objects.get().result == "Paris."


def test_the_readmes_example_sends_a_message_and_prints_the_answer(web, team_a, provider, make_member, make_token,
                                                                   celery_worker_process, tmp_path):
    agent(team_a, "Helper", "expose: true\ntier: medium\n")
    provider.add(sse(openai_stream(text=["Paris."], usage=(9, 2))))
    token = token_of(team_a, "operator", make_member, make_token)
    done = run_example(tmp_path, "README.md", "A2ACardResolver(", web, token)
    assert (done.returncode, done.stdout) == (0, "Helper Paris.\n"), done.stderr
    assert Run.objects.get().result == "Paris."


def test_a_subscriber_follows_a_task_to_its_end_and_a_viewer_may_read_but_not_send(
        web, team_a, provider, make_member, make_token, celery_worker_process):
    from a2a.types import SubscribeToTaskRequest

    agent(team_a, "Helper", "expose: true\ntier: medium\n")
    provider.add(sse(openai_stream(text=["Par", "is."]), event_delay_s=1.0))
    token = token_of(team_a, "operator", make_member, make_token)

    async def start(client, card):
        request = said("Capital of France?")
        request.configuration.return_immediately = True
        return await sent(client, request)

    [started] = with_client(web, token, "helper", start)
    updates = with_client(web, token, "helper", lambda client, card: _all(client.subscribe(
        SubscribeToTaskRequest(id=started.task.id))), streaming=True)
    run = Run.objects.get()
    assert updates[0].task.id == str(run.id) and updates[0].task.status.state in (
        TaskState.TASK_STATE_SUBMITTED, WORKING)
    assert [(u.artifact_update.artifact.artifact_id, u.artifact_update.artifact.parts[0].text) for u in updates
            if u.artifact_update.last_chunk] == [("answer", "Paris.")]
    assert (updates[-1].status_update.task_id, updates[-1].status_update.status.state) == (str(run.id), COMPLETED)
    ended = with_client(web, token, "helper", lambda client, card: _all(client.subscribe(
        SubscribeToTaskRequest(id=str(run.id)))), streaming=True)
    assert [(u.task.id, u.task.status.state) for u in ended] == [(str(run.id), COMPLETED)]  # ended: the task alone

    viewer = token_of(team_a, "viewer", make_member, make_token)

    async def look(client, card):
        got = await client.get_task(GetTaskRequest(id=str(run.id)))
        with pytest.raises(Exception) as refused:
            await sent(client, said("Again"))
        return got, str(refused.value)

    got, refused = with_client(web, viewer, "helper", look)
    assert (got.id, got.status.state) == (str(run.id), COMPLETED)
    assert f"role viewer in team {team_a.slug} does not allow run" in refused
    assert Run.objects.count() == 1


async def _all(updates) -> list:
    return [update async for update in updates]


def test_an_exposed_workflow_is_an_a2a_agent_too(web, team_a, provider, make_member, make_token,
                                                  celery_worker_process):
    from tests.runs import define
    from workflows_app.kinds import WORKFLOW

    agent(team_a, "Writer", "tier: medium\n")
    define(team_a, WORKFLOW, "---\nname: Brief\nexpose: true\ninputs: [topic]\nsteps:\n- id: write\n  agent: writer\n"
                             "  prompt: 'Write about {topic}'\n  outputs: [brief]\n---\n")
    define(team_a, WORKFLOW, "---\nname: Pair\nexpose: true\ninputs: [a, b]\nsteps:\n- id: write\n  agent: writer\n"
                             "  prompt: '{a} {b}'\n---\n")
    provider.add(sse(openai_stream(tool_calls=[("c1", "set_output", ['{"name": "brief", "value": "Tides follow '
                                                                     'the moon."}'])])),
                 sse(openai_stream(text=["Done."])))
    token = token_of(team_a, "operator", make_member, make_token)

    async def work(client, card):
        [done] = await sent(client, said("tides"))
        return card, done.task, await client.get_task(GetTaskRequest(id=done.task.id))

    card, done, got = with_client(web, token, "workflow:brief", work)
    run = Run.objects.get()
    assert (card.name, card.description, card.supported_interfaces[0].url) == (
        "brief", "The workflow brief. Its input topic: the message's text.", f"{web}/a2a/workflow:brief")
    assert (run.workflow, done.id, done.status.state) == ("brief", str(run.id), COMPLETED)
    assert (run.input, done.artifacts[0].parts[0].text, run.result) == ("topic: tides", "Tides follow the moon.",
                                                                         "Tides follow the moon.")
    assert (got.id, got.status.state) == (str(run.id), COMPLETED)

    async def refused(client, card):
        with pytest.raises(Exception) as wrong:
            await sent(client, said("not JSON"))
        return str(wrong.value)

    assert "the workflow takes the inputs a, b" in with_client(web, token, "workflow:pair", refused)
    assert Run.objects.count() == 1
