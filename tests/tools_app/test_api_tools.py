"""Custom tools over the API: names valid for every provider, template warnings."""

from __future__ import annotations

import pytest

from tools_app.models import CustomTool

pytestmark = pytest.mark.django_db


def test_template_variables_without_a_parameter_are_warned_about(team_a, api_for):
    api = api_for(team_a, "editor")
    response = api.post(
        "/api/tools",
        {"name": "translate", "parameters": {"text": {"type": "string"}}, "prompt": "Translate {{text}} to {{lang}}"},
    )
    assert response.status_code == 201
    assert response.json()["warnings"] == ["prompt uses {{lang}} but no parameter is named 'lang'"]


@pytest.mark.parametrize("name", ["has space", "x" * 65, "dots.not.allowed", "ümlaut"])
def test_tool_names_must_suit_every_provider(team_a, api_for, name):
    api = api_for(team_a, "editor")
    response = api.post("/api/tools", {"name": name, "prompt": "Do it"})
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "name"]
    assert error["msg"] == "must match ^[a-zA-Z0-9_-]{1,64}$ to be valid for every model provider"
    assert not CustomTool.objects.filter(team=team_a).exists()


def test_prompt_is_required_and_parameter_types_are_checked(team_a, api_for):
    api = api_for(team_a, "editor")
    response = api.post("/api/tools", {"name": "t", "parameters": {"x": {"type": "date"}}})
    assert response.status_code == 422
    assert sorted((tuple(e["loc"]), e["type"]) for e in response.json()["detail"]) == [
        (("body", "parameters", "x", "type"), "literal_error"),
        (("body", "prompt"), "missing"),
    ]
