"""The OpenAI-compatible door, driven by the official ``openai`` Python SDK against a real daphne and a real
worker: the agent's model is a local server speaking OpenAI's wire format, so the whole way runs — client, door,
run, worker, provider, events, door, client.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from agents_app.models import Run
from tests.agents_app.llm.fake_servers import hang, json_reply, openai_error, openai_stream, sse
from tests.runs import agent, define, events, wait_until
from tests.agents_app.doors import provider, run_example, token_of, web  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def client(web: str, token: str) -> openai.OpenAI:
    # No retries: a retried request would start another run (the door answers what a retry must not repeat 422).
    return openai.OpenAI(base_url=f"{web}/v1", api_key=token, max_retries=0, timeout=60)


def test_the_models_are_the_teams_exposed_agents_and_nothing_else_is_reachable(
        web, team_a, team_b, make_member, make_token):
    agent(team_a, "Helper", "expose: true\n")
    agent(team_a, "Hidden")
    agent(team_b, "Other", "expose: true\n")
    operator = client(web, token_of(team_a, "operator", make_member, make_token))
    viewer = client(web, token_of(team_a, "viewer", make_member, make_token))
    other_team = client(web, token_of(team_b, "operator", make_member, make_token))

    listed = operator.models.list()
    assert [(m.id, m.object, m.owned_by) for m in listed.data] == [("helper", "model", team_a.slug)]
    assert [m.id for m in viewer.models.list().data] == ["helper"]
    assert [m.id for m in other_team.models.list().data] == ["other"]

    said = {"role": "user", "content": "Hi"}
    for who, model in ((operator, "hidden"), (operator, "other"), (other_team, "helper")):
        with pytest.raises(openai.NotFoundError) as missing:
            who.chat.completions.create(model=model, messages=[said])
        assert missing.value.body == {
            "message": f"the model {model!r} does not exist or the token may not call it: GET /v1/models lists what "
                       "it may", "type": "invalid_request_error", "param": "model", "code": "model_not_found"}
    with pytest.raises(openai.PermissionDeniedError) as denied:
        viewer.chat.completions.create(model="helper", messages=[said])
    assert denied.value.body["message"] == f"role viewer in team {team_a.slug} does not allow run"
    with pytest.raises(openai.AuthenticationError) as unknown:
        client(web, "mas_not-a-token").models.list()
    assert unknown.value.body["code"] == "invalid_api_key"
    with pytest.raises(openai.BadRequestError) as bad:
        operator.chat.completions.create(model="helper", messages=[])
    assert (bad.value.body["param"], bad.value.body["message"]) == (
        "messages", "messages: List should have at least 1 item after validation, not 0")
    with pytest.raises(openai.BadRequestError) as no_user:
        operator.chat.completions.create(model="helper", messages=[{"role": "system", "content": "Be brief."}])
    assert no_user.value.body["message"] == "at least one message must have the role user"
    answer = httpx.post(f"{web}/v1/embeddings", json={}, headers={"Authorization": "Bearer x"})
    assert (answer.status_code, answer.json()["error"]["code"]) == (404, "not_found")
    assert Run.objects.count() == 0  # nothing refused started a run


def test_a_completion_is_a_run_of_the_agent_with_the_conversation_as_its_task(
        web, team_a, provider, make_member, make_token, celery_worker_process, api_for):
    agent(team_a, "Helper", "expose: true\ntier: medium\n")
    provider.add(sse(openai_stream(text=["Paris ", "is the capital."], usage=(12, 4))))
    answer = client(web, token_of(team_a, "operator", make_member, make_token)).chat.completions.create(
        model="helper", messages=[{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": "Capital of Spain?"},
                                  {"role": "assistant", "content": "Madrid."},
                                  {"role": "user", "content": [{"type": "text", "text": "And of France?"}]}],
        temperature=0.2)

    run = Run.objects.get()
    assert answer.id == f"chatcmpl-{run.id}"
    assert (answer.model, answer.object, answer.choices[0].message.role) == ("helper", "chat.completion", "assistant")
    assert (answer.choices[0].message.content, answer.choices[0].finish_reason) == ("Paris is the capital.", "stop")
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens, answer.usage.total_tokens) == (12, 4, 16)
    assert (run.agent, run.status, run.result) == ("helper", "succeeded", "Paris is the capital.")
    assert run.input == ("The caller's instructions:\nBe brief.\n\nThe conversation so far:\nUser: Capital of "
                         "Spain?\n\nAssistant: Madrid.\n\nThe message to answer:\nAnd of France?")
    # The monitor's API shows it as any run.
    shown = api_for(team_a, "viewer").get(f"/api/runs/{run.id}").json()
    assert (shown["status"], shown["result"], shown["created_by"]) == ("succeeded", "Paris is the capital.",
                                                                        run.created_by.get_username())


def test_a_streamed_completion_sends_the_agents_text_as_it_comes_then_the_usage(
        web, team_a, provider, make_member, make_token, celery_worker_process):
    agent(team_a, "Helper", "expose: true\ntier: medium\n")
    # Three pieces of 200 characters: the worker sends a stream chunk each 200 characters (stream_flush_chars).
    pieces = [f"{word} " * 40 for word in ("Paris", "Lyon!", "Nice.")]
    provider.add(sse(openai_stream(text=pieces, usage=(12, 4)), event_delay_s=0.3))
    stream = client(web, token_of(team_a, "operator", make_member, make_token)).chat.completions.create(
        model="helper", messages=[{"role": "user", "content": "Capital of France?"}], stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)

    run = Run.objects.get()
    assert {chunk.id for chunk in chunks} == {f"chatcmpl-{run.id}"}
    assert chunks[0].choices[0].delta.role == "assistant"
    texts = [chunk.choices[0].delta.content for chunk in chunks if chunk.choices and chunk.choices[0].delta.content]
    assert "".join(texts) == "".join(pieces) == run.result
    # Sent as the worker streamed it: a delta per stream chunk, more than one (the provider paused between them).
    assert texts == [e.data["text"] for e in events(run, "stream_chunk")] and len(texts) > 1
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1] == "stop"
    assert (chunks[-1].choices, chunks[-1].usage.total_tokens) == ([], 16)


def test_a_failed_run_is_a_422_the_client_does_not_retry_and_a_caller_gone_cancels_its_run(
        web, team_a, provider, make_member, make_token, celery_worker_process):
    agent(team_a, "Helper", "expose: true\ntier: medium\n")
    token = token_of(team_a, "operator", make_member, make_token)
    provider.add(json_reply(400, openai_error(400, "this model refuses")))
    with pytest.raises(openai.UnprocessableEntityError) as failed:
        client(web, token).chat.completions.create(model="helper", messages=[{"role": "user", "content": "Hi"}])
    run = Run.objects.get()
    assert failed.value.body["code"] == "run_failed"
    assert failed.value.body["message"].startswith(f"run {run.id} failed: ")
    assert run.status == "failed"

    provider.add(hang(30))
    with httpx.stream("POST", f"{web}/v1/chat/completions", timeout=30, headers={"Authorization": f"Bearer {token}"},
                      json={"model": "helper", "stream": True, "messages": [{"role": "user", "content": "Hi"}]}) as r:
        first = next(r.iter_lines())
        assert json.loads(first.removeprefix("data: "))["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        gone = Run.objects.exclude(pk=run.pk).get()
    # The client closed the stream: the run is cancelled.
    assert wait_until(lambda: Run.objects.get(pk=gone.pk).status == "cancelled", 30, "the run cancelled")
    assert events(gone, "llm_response") == []  # it had no answer, and asks for none now


@pytest.mark.parametrize("name", ["README.md", "docs/reference/openai-compatible.md"])
def test_the_manuals_example_calls_an_exposed_agent_with_openais_sdk(
        name, web, team_a, provider, make_member, make_token, celery_worker_process, tmp_path):
    agent(team_a, "Helper", "expose: true\ntier: medium\n")
    provider.add(sse(openai_stream(text=["Paris."], usage=(9, 2))))
    token = token_of(team_a, "operator", make_member, make_token)
    done = run_example(tmp_path, name, "OpenAI(base_url", web, token)
    assert (done.returncode, done.stdout) == (0, "['helper']\nParis.\n"), done.stderr
    assert Run.objects.get().result == "Paris."


def test_a_response_continues_an_earlier_one_of_the_team_and_streams_its_events(
        web, team_a, team_b, provider, make_member, make_token, celery_worker_process):
    agent(team_a, "Helper", "expose: true\ntier: medium\n")
    agent(team_b, "Helper", "expose: true\n")
    calls = client(web, token_of(team_a, "operator", make_member, make_token))
    provider.add(sse(openai_stream(text=["Madrid."], usage=(10, 2))),
                 sse(openai_stream(text=["Paris", " is the capital of France."], usage=(20, 6)), event_delay_s=0.1))
    first = calls.responses.create(model="helper", input="Capital of Spain?", instructions="Be brief.")
    first_run = Run.objects.get()
    assert (first.id, first.status, first.output_text) == (f"resp_{first_run.id}", "completed", "Madrid.")
    assert (first.usage.input_tokens, first.usage.output_tokens, first.usage.total_tokens) == (10, 2, 12)
    assert first_run.input == "The caller's instructions:\nBe brief.\n\nThe message to answer:\nCapital of Spain?"

    stream = calls.responses.create(model="helper", input=[{"role": "user", "content": "And of France?"}],
                                    previous_response_id=first.id, stream=True)
    seen = list(stream)
    second_run = Run.objects.exclude(pk=first_run.pk).get()
    # The earlier conversation and its answer come first; the instructions were the first response's only.
    assert second_run.input == ("The conversation so far:\nUser: Capital of Spain?\n\nAssistant: Madrid.\n\n"
                                "The message to answer:\nAnd of France?")
    assert second_run.door_turns == [["user", "Capital of Spain?"], ["assistant", "Madrid."],
                                     ["user", "And of France?"]]
    kinds = [event.type for event in seen]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [event.sequence_number for event in seen] == list(range(len(seen)))
    assert "".join(event.delta for event in seen if event.type == "response.output_text.delta") == (
        "Paris is the capital of France.")
    done = seen[-1].response
    assert (done.id, done.output_text, done.usage.total_tokens, done.previous_response_id) == (
        f"resp_{second_run.id}", "Paris is the capital of France.", 26, first.id)

    # Another team's token cannot continue this team's response.
    other = client(web, token_of(team_b, "operator", make_member, make_token))
    with pytest.raises(openai.NotFoundError) as missing:
        other.responses.create(model="helper", input="And of Italy?", previous_response_id=first.id)
    assert missing.value.body == {"message": f"no response {first.id!r} of this team", "type": "invalid_request_error",
                                  "param": "previous_response_id", "code": "previous_response_not_found"}
    assert Run.objects.count() == 2


def test_a_doors_conversation_is_kept_as_the_runs_input_guardrails_let_its_input_be(
        web, team_a, provider, make_member, make_token, celery_worker_process):
    from agents_app.kinds import GUARDRAIL

    define(team_a, GUARDRAIL, "---\nname: No cards\napplies_to: [run_input]\ndetector:\n  type: pii\n  kinds: [card]\n"
                              "action: redact\ndefault: true\n---\n")
    agent(team_a, "Helper", "expose: true\ntier: medium\n")
    provider.add(sse(openai_stream(text=["Noted."], usage=(5, 1))))
    answer = client(web, token_of(team_a, "operator", make_member, make_token)).chat.completions.create(
        model="helper", messages=[{"role": "user", "content": "My card is 4242 4242 4242 4242."},
                                  {"role": "assistant", "content": "Thanks."},
                                  {"role": "user", "content": "Remember it."}])
    run = Run.objects.get()
    assert answer.choices[0].message.content == "Noted."
    assert run.door_turns == [["user", "My card is [card]."], ["assistant", "Thanks."], ["user", "Remember it."]]
    assert "4242" not in run.input and "4242" not in json.dumps(provider.requests[0].body)


def test_an_exposed_workflow_is_a_model_its_one_input_the_conversation(
        web, team_a, provider, make_member, make_token, celery_worker_process):
    from workflows_app.kinds import WORKFLOW

    agent(team_a, "Writer", "tier: medium\n")
    define(team_a, WORKFLOW, "---\nname: Brief\nexpose: true\ninputs: [topic]\nsteps:\n- id: write\n  agent: writer\n"
                             "  prompt: 'Write a brief on {topic}'\n  outputs: [brief]\n---\n")
    define(team_a, WORKFLOW, "---\nname: Pair\nexpose: true\ninputs: [a, b]\nsteps:\n- id: write\n  agent: writer\n"
                             "  prompt: 'Compare {a} and {b}'\n---\n")
    define(team_a, WORKFLOW, "---\nname: Internal\ninputs: [topic]\nsteps:\n- id: write\n  agent: writer\n"
                             "  prompt: '{topic}'\n---\n")
    calls = client(web, token_of(team_a, "operator", make_member, make_token))
    assert [m.id for m in calls.models.list().data] == ["workflow:brief", "workflow:pair"]

    provider.add(sse(openai_stream(tool_calls=[("c1", "set_output", ['{"name": "brief", "value": "Tides follow '
                                                                     'the moon."}'])], usage=(7, 5))),
                 sse(openai_stream(text=["Done."], usage=(9, 1))))
    answer = calls.chat.completions.create(model="workflow:brief", messages=[{"role": "user", "content": "tides"}])
    run = Run.objects.get()
    assert (run.workflow, run.status, run.input) == ("brief", "succeeded", "topic: tides")
    # The workflow's result, its last step's output: what a workflow run answers.
    assert (answer.id, answer.choices[0].message.content) == (f"chatcmpl-{run.id}", "Tides follow the moon.")
    assert provider.requests[0].body["messages"][-1]["content"].startswith("Write a brief on tides")

    with pytest.raises(openai.BadRequestError) as plain:
        calls.chat.completions.create(model="workflow:pair", messages=[{"role": "user", "content": "tides"}])
    assert plain.value.body["message"] == ("the workflow takes the inputs a, b: send them as a JSON object in the "
                                           "last user message")
    for model in ("workflow:internal", "workflow:nothing"):
        with pytest.raises(openai.NotFoundError):
            calls.chat.completions.create(model=model, messages=[{"role": "user", "content": "tides"}])
    assert Run.objects.count() == 1
