"""Workflows over the API: validated against the team's agents, cycles named, order kept."""

from __future__ import annotations

import pytest

from tests.agents_app.test_api_crud import seed_agents
from workflows_app.models import Workflow

pytestmark = pytest.mark.django_db


def step(id, agent="researcher", **more):
    return {"id": id, "agent": agent, "prompt": f"do {id}", **more}


def test_a_cyclic_workflow_is_422_naming_the_cycle(team_a, api_for):
    seed_agents(team_a)
    api = api_for(team_a, "editor")
    response = api.post(
        "/api/workflows",
        {
            "name": "Loop",
            "steps": [step("a", depends_on=["c"]), step("b", depends_on=["a"]), step("c", depends_on=["b"])],
        },
    )
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "steps"]
    assert error["msg"].endswith("cycle: a → c → b → a")
    assert not Workflow.objects.filter(team=team_a).exists()


def test_an_agent_of_another_team_is_unknown_here(team_a, team_b, api_for):
    seed_agents(team_a, "researcher")
    seed_agents(team_b, "outsider")
    api = api_for(team_a, "editor")
    response = api.post("/api/workflows", {"name": "Borrow", "steps": [step("one"), step("two", agent="outsider")]})
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "steps", 1, "agent"]
    assert error["msg"].endswith("agent 'outsider' does not exist in this team")
    assert not Workflow.objects.filter(team=team_a).exists()


def test_unknown_dependency_and_undeclared_output_are_422(team_a, api_for):
    seed_agents(team_a)
    api = api_for(team_a, "editor")
    unknown = api.post("/api/workflows", {"name": "W", "steps": [step("a", depends_on=["ghost"])]})
    assert unknown.status_code == 422
    assert unknown.json()["detail"][0]["loc"] == ["body", "steps", 0, "depends_on"]
    assert unknown.json()["detail"][0]["msg"].endswith("unknown step 'ghost'")

    output = api.post(
        "/api/workflows",
        {"name": "W", "steps": [step("a"), {"id": "b", "agent": "reviewer", "depends_on": ["a"], "prompt": "{a.notes}"}]},
    )
    assert output.status_code == 422
    assert output.json()["detail"][0]["loc"] == ["body", "steps", 1, "prompt"]
    assert output.json()["detail"][0]["msg"].endswith("{a.notes}: step 'a' declares no output 'notes'")


def test_step_structure_errors_carry_their_path(team_a, api_for):
    api = api_for(team_a, "editor")
    response = api.post("/api/workflows", {"name": "W", "steps": [{"id": "bad id!", "agent": ""}]})
    assert response.status_code == 422
    assert sorted((tuple(e["loc"]), e["type"]) for e in response.json()["detail"]) == [
        (("body", "steps", 0, "agent"), "string_too_short"),
        (("body", "steps", 0, "id"), "string_pattern_mismatch"),
    ]
    empty = api.post("/api/workflows", {"name": "W", "steps": []})
    assert [(e["loc"], e["type"]) for e in empty.json()["detail"]] == [(["body", "steps"], "too_short")]


def test_patching_a_workflow_is_revalidated_against_the_agents(team_a, api_for):
    seed_agents(team_a)
    api = api_for(team_a, "editor")
    assert api.post("/api/workflows", {"name": "W", "steps": [step("a")]}).status_code == 201
    response = api.patch("/api/workflows/w", {"steps": [step("a", agent="nobody")]})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "steps", 0, "agent"]
    assert Workflow.objects.get(team=team_a, slug="w").spec["steps"] == [step("a")]


def test_deleting_an_agent_does_not_break_reading_its_workflows(team_a, api_for):
    seed_agents(team_a)
    api = api_for(team_a, "editor")
    api.post("/api/workflows", {"name": "W", "steps": [step("a")]})
    # It uses the agent: deleting it is refused (409) unless forced, and reading the workflow still works.
    assert api.delete("/api/agents/researcher").status_code == 409
    assert api.delete("/api/agents/researcher?force=true").status_code == 200
    assert api.get("/api/workflows/w").json()["steps"][0]["agent"] == "researcher"


def test_a_bad_loop_or_output_schema_is_422_naming_its_field(team_a, api_for):
    seed_agents(team_a)
    api = api_for(team_a, "editor")
    steps = [step("a"), {"id": "b", "agent": "reviewer", "depends_on": ["a"], "outputs": ["verdict"]}]
    loop = api.post("/api/workflows", {"name": "W", "steps": steps,
                                       "loops": [{"steps": ["a", "b"], "until": "b.verdict is ok", "max_rounds": 3}]})
    assert loop.status_code == 422
    assert [(e["loc"], e["msg"]) for e in loop.json()["detail"]] == [(
        ["body", "loops", 0, "until"],
        "cannot read 'b.verdict is ok': write <step>.<output> == \"text\" (or != \"text\", or contains \"text\")")]
    steps[1]["output_schemas"] = {"verdict": {"type": "text"}}
    schema = api.post("/api/workflows", {"name": "W", "steps": steps})
    assert schema.status_code == 422
    [error] = schema.json()["detail"]
    assert (error["loc"], error["msg"]) == (["body", "steps", 1, "output_schemas"], (
        "verdict: is not a valid JSON Schema: 'text' is not valid under any of the given schemas "
        "(at $.type)"))
    assert not Workflow.objects.filter(team=team_a).exists()
    steps[1]["output_schemas"] = {"verdict": {"enum": ["approve", "revise"]}}
    created = api.post("/api/workflows", {"name": "W", "steps": steps,
                                          "loops": [{"steps": ["a", "b"], "until": 'b.verdict == "approve"',
                                                     "max_rounds": 2}]})
    assert created.status_code == 201, created.content
    assert created.json()["loops"] == [{"steps": ["a", "b"], "until": 'b.verdict == "approve"', "max_rounds": 2}]
