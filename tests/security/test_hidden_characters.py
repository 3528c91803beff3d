"""Names and paths refuse direction controls and invisible characters (issue 23, point 8).

``Invoice\u202eFDP`` was saved as an agent's name and shown as ``InvoicePDF``
reversed; a workspace file could be named so that it reads as another.
Through the API, markdown sync and the workspace tools.
"""

from __future__ import annotations

import pytest

from agents_app.models import Agent, DefinitionVersion
from mas_core.definitions.storage import team_defs_dir
from mas_core.definitions.sync import markdown_sync
from mas_core.text import hidden_character
from tests.agents_app.test_api_crud import CASES
from tools_app.paths import normalise_path, normalise_prefix
from tools_app.plugin import ToolError

pytestmark = pytest.mark.django_db

REFUSED = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u200e",
           "\u200f", "\u061c", "\u200b", "\u2060", "\u00ad", "\ufeff", "\u2062", "\U000e0041", "\u2028", "\t",
           "\ue000"]
ALLOWED = ["Café au lait", "naïve", "محلل البيانات", "חוקר", "研究员", "👩\u200d💻 coder", "می\u200cخواهم", "x-1_y.z"]


@pytest.mark.parametrize("char", REFUSED)
def test_each_hidden_character_is_found(char):
    assert hidden_character(f"ab{char}cd") == char


@pytest.mark.parametrize("text", ALLOWED)
def test_names_in_any_script_pass(text):
    assert hidden_character(text) is None


def test_an_agent_name_with_a_direction_control_is_refused_by_the_api(team_a, api_for):
    api = api_for(team_a, "editor")
    response = api.post("/api/agents", {**CASES[0].payload, "name": "Invoice\u202eFDP.exe"})
    assert response.status_code == 422
    assert "U+202E RIGHT-TO-LEFT OVERRIDE" in response.content.decode()
    assert not Agent.objects.filter(team=team_a).exists()


def test_a_markdown_name_with_an_invisible_character_is_refused_with_its_field(team_a, api_for):
    api = api_for(team_a, "editor")
    assert api.post("/api/agents", CASES[0].payload).status_code == 201
    text = "---\nname: Research\u200bX\ndescription: Scouts\n---\n\nYou scout.\n"
    response = api.put("/api/agents/researcher-x/markdown", text, content_type="text/markdown")
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "name"]
    assert "U+200B ZERO WIDTH SPACE" in error["msg"]
    assert Agent.objects.get(team=team_a, slug="researcher-x").name == "Researcher X"
    assert DefinitionVersion.objects.filter(team=team_a, slug="researcher-x").count() == 1


def test_markdown_sync_refuses_a_file_name_with_a_direction_control(team_a):
    folder = team_defs_dir(team_a) / "agents"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report\u202edm.md").write_text("---\nname: Report\ndescription: x\n---\n\nYou report.\n")
    report = markdown_sync(team=team_a, mode="import")
    [error] = report.errors
    assert error.path == "agents/report\u202edm.md"
    assert "U+202E RIGHT-TO-LEFT OVERRIDE" in error.detail
    assert not Agent.objects.filter(team=team_a).exists()
    assert (folder / "report\u202edm.md").exists()  # not renamed either


@pytest.mark.parametrize("path", ["notes/invoice\u202efdp.exe", "a\u2066b/c.md", "\ufeffplan.md", "x\u200b.md"])
def test_workspace_paths_refuse_them(path):
    with pytest.raises(ToolError, match=r"contains (a direction control|an invisible character) \(U\+"):
        normalise_path(path)
    with pytest.raises(ToolError):
        normalise_prefix(path)
