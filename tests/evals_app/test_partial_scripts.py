"""In an eval run, a case's script plays only the agents it names; an ordinary run's script plays them all."""

from __future__ import annotations

import pytest

from agents_app.kinds import PROVIDER
from agents_app.execution.modelchoice import model_choice
from agents_app.models import Run
from tests.runs import define

PROVIDER_TEXT = "---\nname: Fake\ntype: openai\nbase_url: http://127.0.0.1:9/v1\nmodels:\n- name: m\n  tier: medium\n---\n"


@pytest.mark.django_db
def test_only_an_eval_run_sends_the_agents_its_script_does_not_name_to_the_teams_models(team_a):
    define(team_a, PROVIDER, PROVIDER_TEXT)
    script = {"helper": [{"text": "4"}]}
    ordinary = Run.objects.create(team=team_a, agent="lead", script=script)
    case = Run.objects.create(team=team_a, agent="lead", script=script, is_eval=True)

    def source(run, agent):
        choice = model_choice(run=run, ref="medium", tier="medium", agent=agent)
        return choice.source, choice.ref

    assert source(ordinary, "lead") == ("script", "scripted:scripted")  # fails later: no turns for lead
    assert source(ordinary, "helper") == ("script", "scripted:scripted")
    assert source(case, "lead") == ("provider", "fake:m")  # the agent under test
    assert source(case, "helper") == ("script", "scripted:scripted")
    wildcard = Run.objects.create(team=team_a, agent="lead", script={"*": [{"text": "x"}]}, is_eval=True)
    assert source(wildcard, "lead") == ("script", "scripted:scripted")
