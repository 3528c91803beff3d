"""Definitions as markdown through the API: GET/PUT …/markdown, errors with lines, sync status."""

from __future__ import annotations

import pytest

from mas_core.definitions.storage import team_defs_dir
from agents_app.models import Agent, DefinitionVersion
from tests.agents_app.test_api_crud import CASES, create

pytestmark = pytest.mark.django_db

URL = "/api/agents/researcher-x/markdown"
SCOUT = "---\nname: Researcher X\ndescription: Scouts\ntier: small\n---\n\nYou scout.\n"


@pytest.fixture
def api(team_a, api_for):
    api = api_for(team_a, "editor")
    create(api, CASES[0])
    return api


def test_put_markdown_as_text(api, team_a):
    response = api.put(URL, SCOUT, content_type="text/markdown")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["version"], body["description"], body["tier"], body["tools"], body["body"]) == (
        2, "Scouts", "small", None, "You scout."
    )
    assert (body["file_status"], body["sync_status"]) == ("written", "in_sync")
    assert (team_defs_dir(team_a) / "agents/researcher-x.md").read_text() == SCOUT
    assert api.get(URL).content.decode() == SCOUT
    assert DefinitionVersion.objects.get(team=team_a, slug="researcher-x", number=2).content == SCOUT


def test_put_markdown_as_json_and_plain_text(api):
    assert api.put(URL, {"markdown": SCOUT}).json()["version"] == 2
    other = SCOUT.replace("Scouts", "Scouts well")
    assert api.put(URL, other, content_type="text/plain").json()["description"] == "Scouts well"


def test_the_file_name_stays_when_the_markdown_renames(api, team_a):
    renamed = api.put(URL, SCOUT.replace("name: Researcher X", "name: Scout"), content_type="text/markdown")
    assert (renamed.json()["slug"], renamed.json()["name"]) == ("researcher-x", "Scout")
    assert list(Agent.objects.filter(team=team_a).values_list("slug", flat=True)) == ["researcher-x"]


@pytest.mark.parametrize(
    "text, loc, line, message",
    [
        ("---\nname: A\nlimits:\n  max_steps: 0\n---\n", ["body", "limits", "max_steps"], 4,
         "Input should be greater than or equal to 1"),
        ("---\nname: A\ntools: [vfs_read, nope]\n---\n", ["body", "tools"], 3, "unknown tool(s) nope"),
        ("---\ndescription: no name\n---\n", ["body", "name"], None, "required field is missing"),
        ("no frontmatter\n", ["body"], 1, "must start with a '---' line opening the YAML frontmatter"),
        ("---\nname: A\n  bad: indent\n---\n", ["body"], 3, "invalid YAML"),
    ],
)
def test_markdown_errors_name_field_and_line(api, text, loc, line, message):
    response = api.put(URL, text, content_type="text/markdown")
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert (error["loc"], error.get("line"), error["type"]) == (loc, line, "invalid_definition")
    assert message in error["msg"]
    assert Agent.objects.get(slug="researcher-x").version == 1


def test_unknown_keys_of_strict_kinds_are_rejected_with_their_line(team_a, api_for):
    api = api_for(team_a, "editor")
    create(api, CASES[3])
    response = api.put(
        "/api/tools/summarize/markdown", "---\nname: summarize\nprompt: p\ncolour: red\n---\n", content_type="text/markdown"
    )
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert (error["loc"], error["line"]) == (["body", "colour"], 4)


def test_a_claude_code_agent_file_is_accepted_with_warnings(api):
    text = "---\nname: Researcher X\ndescription: x\ntools: Read, Grep, Task, NotebookEdit\nmodel: sonnet\n---\nGo.\n"
    response = api.put(URL, text, content_type="text/markdown")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["tools"], body["tier"], body["extra"]) == (
        ["vfs_read", "vfs_search", "spawn_agent"], "medium", {"unmapped_tools": ["NotebookEdit"]}
    )
    assert any("NotebookEdit" in warning for warning in body["warnings"])
    assert any("sonnet" in warning for warning in body["warnings"])


@pytest.mark.parametrize(
    "raw, content_type, status, loc",
    [
        (b"---\nname: A\n---\n", "application/xml", 415, None),
        (b"---\nname: \xff\n---\n", "text/markdown", 400, None),
        (b"---\nname: a\x00b\n---\n", "text/markdown", 400, None),
        (b'{"markdown": ', "application/json", 400, None),
        (b'["---"]', "application/json", 422, ["body"]),
        (b'{"markdown": 1}', "application/json", 422, ["body", "markdown"]),
        (b'{"text": "---"}', "application/json", 422, ["body", "markdown"]),
        (b"---\nname: A\n---\n" + b"x" * 300_000, "text/markdown", 413, None),
        (b"x" * (3 * 1024 * 1024), "text/markdown", 413, None),
    ],
)
def test_bad_markdown_requests_are_4xx(api, raw, content_type, status, loc):
    response = api.put(URL, raw, content_type=content_type)
    assert response.status_code == status, response.content[:300]
    if loc:
        assert response.json()["detail"][0]["loc"] == loc
    else:
        assert isinstance(response.json()["detail"], str)
    assert Agent.objects.get(slug="researcher-x").version == 1


def test_a_file_changed_on_disk_is_reported_and_not_overwritten(api, team_a):
    path = team_defs_dir(team_a) / "agents/researcher-x.md"
    edited = path.read_text().replace("Finds facts", "Edited by hand")
    path.write_text(edited)
    assert api.get("/api/agents/researcher-x").json()["sync_status"] == "disk_changed"

    response = api.patch("/api/agents/researcher-x", {"description": "Edited in the API"})

    assert response.status_code == 200
    body = response.json()
    assert (body["version"], body["file_status"], body["sync_status"]) == (2, "conflict", "conflict")
    assert body["warnings"] == [
        ("agents/researcher-x.md changed on disk since the last sync: not overwritten "
        "(run `manage.py sync_markdown` to resolve)")
    ]
    assert path.read_text() == edited


def test_a_file_deleted_on_disk_shows_as_such(api, team_a):
    (team_defs_dir(team_a) / "agents/researcher-x.md").unlink()
    assert api.get("/api/agents/researcher-x").json()["sync_status"] == "deleted_on_disk"


def test_skill_references_stay_when_its_markdown_is_replaced(team_a, api_for):
    api = api_for(team_a, "editor")
    create(api, CASES[1])
    response = api.put(
        "/api/skills/citations/markdown", "---\nname: Citations\n---\n\nCite.\n", content_type="text/markdown"
    )
    assert response.status_code == 200
    assert response.json()["references"] == {"styles/apa.md": "APA rules"}
    assert (team_defs_dir(team_a) / "skills/citations/styles/apa.md").read_text() == "APA rules"


@pytest.mark.parametrize("escaped", ['"a\\0b"', '"\\ud800"'])
@pytest.mark.parametrize("key", ["description", "unknown_key"])
def test_yaml_escapes_of_unstorable_text_are_4xx(api, team_a, key, escaped):
    before = (team_defs_dir(team_a) / "agents/researcher-x.md").read_text()
    response = api.put(URL, f"---\nname: Researcher X\n{key}: {escaped}\n---\n", content_type="text/markdown")
    assert response.status_code in (400, 422), response.content
    assert Agent.objects.get(slug="researcher-x").version == 1
    assert (team_defs_dir(team_a) / "agents/researcher-x.md").read_text() == before
