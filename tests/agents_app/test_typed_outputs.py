"""Typed outputs on a real worker: an agent's output_schema and a workflow step's output_schemas.

The scripted turns ``expect`` what the model was sent, so a run only succeeds when the corrective turn
reached the model naming the errors.
"""

from __future__ import annotations

from agents_app.execution.journal import session_messages
import pytest

from agents_app.kinds import AGENT

from workflows_app.kinds import WORKFLOW
from mas_core.definitions.markdown import DefinitionError
from agents_app.execution.runs import run_start
from agents_app.models import Activation, Agent, Session
from tests.runs import agent, define, events, finish
from workflows_app.services import workflow_run_start, workflow_steps

pytestmark = [pytest.mark.django_db(transaction=True)]

SCHEMA = "output_schema:\n  type: object\n  required: [score]\n  properties:\n    score:\n      type: integer\n"
CORRECTION = "Your answer does not match the output schema it must follow:"


@pytest.mark.worker
def test_an_answer_that_does_not_match_gets_one_corrective_turn_then_succeeds(team_a, celery_worker_process):
    agent(team_a, "Scorer", SCHEMA)
    script = {"scorer": [
        {"text": '{"score": "high"}'},
        {"expect": [CORRECTION, "- $.score: 'high' is not of type 'integer'", "one chance to correct it"],
         "text": '{"score": 7}'},
    ]}
    run = finish(run_start(team=team_a, agent="scorer", input="Score this essay", script=script))

    assert (run.status, run.result, run.error) == ("succeeded", '{"score": 7}', "")
    session = Session.objects.get(run=run)
    assert (session.status, session.failure, session.meta["steps"]) == ("ok", None, 2)
    # The system prompt told the agent the format it must answer in.
    system = session_messages(session_id=session.id)[0].content
    assert "## Answer format\n\nYour final answer (the message you end with, without tool calls) must be JSON " \
           "only (no prose around it), matching this JSON Schema:" in system and '"score": {' in system
    assert [e.data for e in events(run, "output_invalid")] == [
        {"errors": "- $.score: 'high' is not of type 'integer'", "correction": 1, "where": "answer"}]


@pytest.mark.worker
def test_an_answer_still_wrong_after_the_corrective_turn_fails_as_validation_failed(team_a, celery_worker_process):
    agent(team_a, "Scorer", SCHEMA)
    script = {"scorer": [{"text": "high"},
                         {"expect": "- $: 'high' is not of type 'object'", "text": '{"score": 7.5}'}]}
    run = finish(run_start(team=team_a, agent="scorer", input="Score this essay", script=script))

    message = ("the output still does not match its schema after 1 corrective turn:\n"
               "- $.score: 7.5 is not of type 'integer'")
    assert (run.status, run.result, run.error) == ("failed", '{"score": 7.5}', f"validation_failed: {message}")
    [session] = Session.objects.filter(run=run)  # not retried: another attempt would be refused the same way
    assert session.failure == {"kind": "validation_failed", "message": message, "last_tool_calls": [],
                               "suggested_retry": False}
    assert session.result == '{"score": 7.5}'  # the invalid answer is kept as the partial result
    assert Activation.objects.get(run=run).result == '{"score": 7.5}'
    assert [e.data["correction"] for e in events(run, "output_invalid")] == [1]
    assert [e.data["status"] for e in events(run, "session_end")] == ["failed"]


def test_an_invalid_output_schema_is_refused_when_saved_naming_the_field(team_a):
    with pytest.raises(DefinitionError) as info:
        agent(team_a, "Scorer", "output_schema:\n  type: object\n  properties:\n    score: {type: numbr}\n")
    assert str(info.value) == ("<definition>:3: output_schema: is not a valid JSON Schema: 'numbr' is not "
                               "valid under any of the given schemas (at $.properties.score.type)")
    assert not Agent.objects.filter(team=team_a).exists()


REVIEW = """---
name: Check
inputs: [text]
steps:
- id: review
  agent: reviewer
  prompt: "Review {text}"
  outputs: [notes, verdict]
  output_schemas:
    verdict:
      enum: [approve, revise]
---
"""


def set_output(name, value):
    return {"name": "set_output", "arguments": {"name": name, "value": value}}


@pytest.mark.worker
def test_a_refused_set_output_goes_back_to_the_model_which_corrects_it(team_a, celery_worker_process):
    agent(team_a, "Reviewer")
    define(team_a, WORKFLOW, REVIEW)
    script = {"reviewer": [
        {"tool_calls": [set_output("notes", "Clear."), set_output("verdict", "maybe")]},
        {"expect": ["Output notes set.", "Output verdict was not set: its value does not match the output's schema:",
                    "- $: 'maybe' is not one of ['approve', 'revise']"],
         "tool_calls": [set_output("verdict", "approve")]},
        {"expect": "Output verdict set.", "text": "Reviewed."},
    ]}
    run = finish(workflow_run_start(team=team_a, workflow="check", inputs={"text": "a poem"}, script=script))

    assert run.status == "succeeded"
    [step] = workflow_steps(run)
    assert (step["status"], step["outputs"]) == ("succeeded", {"notes": "Clear.", "verdict": "approve"})
    results = [(e.data["ok"], e.data["error_kind"]) for e in events(run, "tool_result")]
    assert results == [(True, None), (False, "invalid_output"), (True, None)]
    activation = Activation.objects.get(run=run)
    assert activation.input == ('Review a poem\n\nWhen you are done, call set_output once for each of these '
                                'outputs: notes, verdict.\n\nEach of these outputs must match its JSON Schema (a '
                                'value that does not is refused):\n- verdict: {"enum": ["approve", "revise"]}')


@pytest.mark.worker
def test_a_set_output_refused_twice_fails_the_step_as_validation_failed(team_a, celery_worker_process):
    agent(team_a, "Reviewer")
    define(team_a, WORKFLOW, REVIEW)
    script = {"reviewer": [{"tool_calls": [set_output("notes", "Clear."), set_output("verdict", "maybe")]},
                           {"tool_calls": [set_output("verdict", "perhaps")]}]}
    run = finish(workflow_run_start(team=team_a, workflow="check", inputs={"text": "a poem"}, script=script))

    assert run.status == "failed"
    session = Session.objects.get(run=run)
    assert (session.failure["kind"], session.result) == ("validation_failed", "perhaps")
    assert session.failure["message"].startswith(
        "the output still does not match its schema after 1 corrective turn:\nOutput verdict was not set: its "
        "value does not match the output's schema:\n- $: 'perhaps' is not one of ['approve', 'revise']")
    # Neither refused value was stored as the step's output.
    assert Activation.objects.get(run=run).context["outputs"] == {"notes": "Clear."}
    [step] = workflow_steps(run)
    assert (step["status"], step["outputs"]) == ("failed", {})
    assert [e.data["error"].split(":")[0] for e in events(run, "step_failed")] == ["validation_failed"]


@pytest.mark.worker
def test_a_step_whose_only_output_is_its_final_answer_gets_the_corrective_turn_too(team_a, celery_worker_process):
    agent(team_a, "Reviewer")
    define(team_a, WORKFLOW, """---
name: Verdict
steps:
- id: review
  agent: reviewer
  prompt: "Approve or not?"
  outputs: [verdict]
  output_schemas:
    verdict: {enum: [approve, revise]}
---
""")
    script = {"reviewer": [{"text": "LGTM"},
                           {"expect": "- output verdict: $: 'LGTM' is not one of ['approve', 'revise']",
                            "text": "approve"}]}
    run = finish(workflow_run_start(team=team_a, workflow="verdict", inputs={}, script=script))
    assert (run.status, run.result) == ("succeeded", "approve")
    assert [s["outputs"] for s in workflow_steps(run)] == [{"verdict": "approve"}]


def test_the_api_refuses_an_invalid_output_schema_naming_the_field(team_a, api_for):
    api = api_for(team_a, "editor")
    response = api.post("/api/agents", {"name": "Scorer", "output_schema": {"type": "object", "required": "score"}})
    assert response.status_code == 422
    assert [(e["loc"], e["msg"]) for e in response.json()["detail"]] == [(
        ["body", "output_schema"], "is not a valid JSON Schema: 'score' is not of type 'array' (at $.required)")]
    assert not Agent.objects.filter(team=team_a).exists()
    created = api.post("/api/agents", {"name": "Scorer", "output_schema": {"type": "object", "required": ["score"]}})
    assert created.status_code == 201, created.content
    assert created.json()["output_schema"] == {"type": "object", "required": ["score"]}


def test_the_manuals_output_schema_example_is_a_valid_agent(team_a):
    from mas_core.outputs import value_errors
    from tests.manual import example

    block = example("docs/concepts/runs.md", language="markdown", heading="Typed outputs")
    assert block.title == "defs/agents/scorer.md"
    define(team_a, AGENT, block.text)
    schema = Agent.objects.get(team=team_a, slug="scorer").spec["output_schema"]
    assert schema["required"] == ["score"]
    assert value_errors(schema, '{"score": 7}') == []
    assert value_errors(schema, '{"score": 11}') == ["$.score: 11 is greater than the maximum of 10"]
