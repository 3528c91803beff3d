"""Issue 23, point 8: every statement of the manual that a refusal is a 409 or a 422, run against the API.

The probe found refusals answering 400 where the manual (then the README) says 409/422. Each statement is quoted and run
here (the eval endpoints' own are in tests/evals_app; the approvals' second decision in
tests/agents_app/test_approvals.py; the forks' in tests/agents_app/test_forks.py).
"""

from __future__ import annotations

import pytest
from django.conf import settings

from agents_app.models import Run
from tests.manual import says
from tests.runs import agent

pytestmark = pytest.mark.django_db


def test_a_duplicate_slug_is_a_409(team_a, api_for):
    says("create from frontmatter fields as JSON (+ `body`); 201, 409 if the slug exists")
    editor = api_for(team_a, "editor")
    body = {"name": "Writer", "body": "You write."}
    assert editor.post("/api/agents", body).status_code == 201
    again = editor.post("/api/agents", body)
    assert (again.status_code, again.json()) == (409, {"detail": "a agent with slug 'writer' already exists"})


def test_deleting_what_others_use_is_a_409_with_the_dependents(team_a, api_for):
    says("versions are kept; 409 with the `dependents` (the workflows using an agent, the agents using a tool, "
         "MCP server, skill or provider, the agents and workflow steps using a guardrail) unless `force=true`")
    editor = api_for(team_a, "editor")
    agent(team_a, "Writer")
    assert editor.post("/api/workflows", {"name": "Flow", "steps": [
        {"id": "a", "agent": "writer", "prompt": "Go."}]}).status_code == 201
    refused = editor.delete("/api/agents/writer")
    assert refused.status_code == 409
    assert refused.json()["dependents"] == [{"kind": "workflow", "slug": "flow", "name": "Flow", "where": "step a"}]


def test_deleting_a_queued_run_is_a_409(team_a, api_for):
    says("a finished run with its events and files (409 while queued or running)")
    run = Run.objects.create(team=team_a, agent="writer", status="queued")
    assert api_for(team_a, "operator").delete(f"/api/runs/{run.pk}").status_code == 409
    assert Run.objects.filter(pk=run.pk).exists()


def test_a_script_out_of_bounds_is_a_422_naming_the_agent_and_turn(team_a, api_for):
    says("A script outside these bounds is refused with 422 naming the agent and turn.")
    agent(team_a, "Writer")
    refused = api_for(team_a, "operator").post("/api/runs", {"agent": "writer", "input": "hi", "script": {
        "writer": [{"text": "a"}, {"text": "b", "usage": {"prompt_tokens": 10_000_001}}]}})
    assert refused.status_code == 422, refused.content
    [item] = refused.json()["detail"]
    assert item["loc"] == ["body", "script"] and "writer" in item["msg"] and "turn 1" in item["msg"], item


def test_an_undeclared_secret_name_is_a_422(team_a, api_for):
    says("Any other name is refused, whatever it is called, when saved (422 naming it")
    refused = api_for(team_a, "admin").post("/api/providers", {
        "name": "Open", "type": "openai", "api_key_env": "HOME", "models": [{"name": "m"}]})
    assert refused.status_code == 422, refused.content
    assert "HOME" in refused.json()["detail"][0]["msg"]


def test_a_private_address_is_a_422_on_save(team_a, api_for):
    says("are refused unless `MAS_PRIVATE_URL_ALLOW` lists them — on save for literal addresses")
    refused = api_for(team_a, "admin").post("/api/providers", {
        "name": "Local", "type": "openai", "base_url": "http://10.0.0.1/v1", "models": [{"name": "m"}]})
    assert refused.status_code == 422, refused.content
    assert refused.json()["detail"][0]["loc"][:2] == ["body", "base_url"]


def test_frontmatter_past_the_yaml_limits_is_a_422_from_markdown_and_from_json(team_a, api_for):
    says("and definition data sent as JSON: nesting, keys and values in all (an alias counts everything it "
         "repeats), the length of one key and of one value. A refusal names the file, the line and the limit: "
         "a 422")
    editor = api_for(team_a, "editor")
    agent(team_a, "Writer")
    deep = "x"
    for _ in range(settings.MAS_YAML_MAX_DEPTH + 2):
        deep = [deep]
    as_json = editor.post("/api/agents", {"name": "Deep", "body": "b", "extra": {"metadata": deep}})
    assert as_json.status_code == 422, as_json.content
    assert "MAS_YAML_MAX_DEPTH" in as_json.json()["detail"][0]["msg"], as_json.content
    nested = "---\nname: Deep\nmetadata: " + "[" * (settings.MAS_YAML_MAX_DEPTH + 2) + "]" * (
        settings.MAS_YAML_MAX_DEPTH + 2) + "\n---\n\nb\n"
    as_markdown = editor.put("/api/agents/writer/markdown", nested, content_type="text/markdown")
    assert as_markdown.status_code == 422, as_markdown.content
    assert "MAS_YAML_MAX_DEPTH" in as_markdown.json()["detail"][0]["msg"]
