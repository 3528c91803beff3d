"""In an eval run, a case's script plays only the agents it names; an ordinary run's script plays them all."""

from __future__ import annotations

import pytest

from agents_app.kinds import PROVIDER
from agents_app.execution.modelchoice import model_choice
from agents_app.models import Run
from mas_core.llm_types import ProviderError
from tests.runs import define

PROVIDER_TEXT = "---\nname: Fake\ntype: openai\nbase_url: http://127.0.0.1:9/v1\nmodels:\n- name: m\n  tier: medium\n---\n"


@pytest.mark.django_db
def test_only_an_eval_run_sends_the_agents_its_script_does_not_name_to_the_teams_models(team_a):
    define(team_a, PROVIDER, PROVIDER_TEXT)
    script = {"helper": [{"text": "4"}]}
    ordinary = Run.objects.create(team=team_a, agent="lead", script=script)
    case = Run.objects.create(team=team_a, agent="lead", script=script, is_eval=True, eval_real_models=True)

    def source(run, agent):
        choice = model_choice(run=run, ref="medium", tier="medium", agent=agent)
        return choice.source, choice.ref

    assert source(ordinary, "lead") == ("script", "scripted:scripted")  # fails later: no turns for lead
    assert source(ordinary, "helper") == ("script", "scripted:scripted")
    assert source(case, "lead") == ("provider", "fake:m")  # the agent under test
    assert source(case, "helper") == ("script", "scripted:scripted")
    wildcard = Run.objects.create(team=team_a, agent="lead", script={"*": [{"text": "x"}]}, is_eval=True)
    assert source(wildcard, "lead") == ("script", "scripted:scripted")


@pytest.mark.django_db
def test_an_eval_run_whose_dataset_does_not_allow_real_models_refuses_the_call(team_a):
    """Issue 23, point 16: an agent the case did not script calls no real model unless the dataset allows it."""
    script = {"helper": [{"text": "4"}]}
    case = Run.objects.create(team=team_a, agent="lead", script=script, is_eval=True)
    unscripted = Run.objects.create(team=team_a, agent="lead", script=None, is_eval=True)
    # With no real provider the bundled demo recording (no real model) still stands in.
    assert model_choice(run=case, ref="medium", tier="medium", agent="lead").source == "demo"
    define(team_a, PROVIDER, PROVIDER_TEXT)
    assert model_choice(run=case, ref="medium", tier="medium", agent="helper").source == "script"
    for run in (case, unscripted):
        with pytest.raises(ProviderError) as refused:
            model_choice(run=run, ref="medium", tier="medium", agent="lead")
        assert str(refused.value) == (
            "bad_request: the eval case does not script agent 'lead', so it would call the team's real models (provider fake); "
            "an eval calls none unless its dataset says allow_real_models: true — script the agent's turns in "
            "the case, or allow it")
