"""Issue 23, point 16: an eval calls no real model for an agent its case did not script unless the dataset
says ``allow_real_models: true`` — refused when the eval starts (the agents it starts) and at the model call
(an agent met later, here a delegate). The model is a local server speaking OpenAI's wire format.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from agents_app.kinds import PROVIDER
from agents_app.models import Run, Session
from evals_app.kinds import EVAL
from evals_app.models import EvalRun
from tests.agents_app.llm.fake_servers import FakeServer, openai_stream, sse
from tests.evals_app.test_eval_runs import PROVIDER_TEXT, eval_done
from tests.runs import agent, define

UNSCRIPTED = """---
name: Writer evals
agent: writer
cases:
- id: greet
  task: Greet the reader.
  checks:
  - type: contains
    value: Hello
---
"""

REFUSAL = ("case 'greet' does not script agent 'writer', so it would call the team's real models (provider fake); "
           "an eval calls none unless its dataset says allow_real_models: true — script the agent's turns in the "
           "case, or allow it")


@pytest.mark.django_db
def test_an_eval_leaving_its_agent_unscripted_is_refused_when_it_starts(team_a, api_for):
    define(team_a, PROVIDER, PROVIDER_TEXT.format(url="http://127.0.0.1:9"))
    agent(team_a, "Writer")
    define(team_a, EVAL, UNSCRIPTED)
    refused = api_for(team_a, "operator").post("/api/evals/writer-evals/runs", {})
    assert (refused.status_code, refused.json()) == (422, {"detail": [
        {"loc": ["body"], "msg": REFUSAL, "type": "eval_refused"}]})
    assert (EvalRun.objects.count(), Run.objects.count()) == (0, 0)


DELEGATING = """---
name: Lead evals
agent: lead
{allow}cases:
- id: sum
  task: What is 2+2? Ask the helper.
  script:
    lead:
    - tool_calls:
      - name: delegate
        arguments: {{agent: helper, task: Add 2 and 2.}}
    - text: Done.
  checks:
  - type: status
    equals: succeeded
---
"""


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_an_agent_met_during_the_run_calls_a_real_model_only_when_the_dataset_allows_it(team_a,
                                                                                         celery_worker_process):
    server = FakeServer().start()
    try:
        define(team_a, PROVIDER, PROVIDER_TEXT.format(url=server.url))
        agent(team_a, "Lead", "tools: [delegate]\n")
        agent(team_a, "Helper", "tools: []\n")
        from evals_app.services import eval_run_start

        # The command refuses as the API does, before anything starts.
        agent(team_a, "Writer")
        define(team_a, EVAL, UNSCRIPTED)
        with pytest.raises(CommandError) as caught:
            call_command("eval", "writer-evals", "--team", team_a.slug, stdout=StringIO())
        assert (caught.value.returncode, str(caught.value)) == (1, REFUSAL)
        assert (EvalRun.objects.count(), Run.objects.count()) == (0, 0)

        closed = define(team_a, EVAL, DELEGATING.format(allow="")).row
        refused = eval_done(eval_run_start(team=team_a, dataset=closed)).cases.get().run
        [helper] = Session.objects.filter(run=refused, agent="helper")
        assert helper.status == "failed"
        assert ("the eval case does not script agent 'helper', so it would call the team's real models "
                "(provider fake)") in helper.failure["message"], helper.failure
        assert server.requests == []  # no real model was called

        server.add(sse(openai_stream(text=["4"], usage=(20, 1))))
        opened = define(team_a, EVAL, DELEGATING.format(allow="allow_real_models: true\n")
                        .replace("Lead evals", "Open lead evals")).row
        allowed = eval_done(eval_run_start(team=team_a, dataset=opened)).cases.get()
        assert allowed.status == "passed", allowed.checks
        assert (allowed.run.eval_real_models, len(server.requests)) == (True, 1)
        assert sorted(Session.objects.filter(run=allowed.run).values_list("agent", "provider", "status")) == [
            ("helper", "fake", "ok"), ("lead", "scripted", "ok")]
    finally:
        server.stop()
