"""MCP servers over the API: write-only secrets, and the stdio permission."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from mas_core.definitions.services import STDIO_NEEDS_PERMISSION

from mas_core.definitions.storage import team_defs_dir
from agents_app.models import DefinitionVersion
from tools_app.models import MCPServer
from tests.tools_app.stdio_teams import team_a, team_b  # noqa: F401 (fixtures: the teams hold the stdio grant)



pytestmark = pytest.mark.django_db

HEADER_SECRET = "Bearer sk-live-HEADER-7f3a9c"
ENV_SECRET = "ghp_ENVSECRET_5b1d2e"

HTTP_SERVER = {
    "name": "Search",
    "transport": "streamable-http",
    "url": "https://mcp.example.com/mcp",
    "headers": {"Authorization": HEADER_SECRET, "X-Org": "${ORG_ID}"},
}
STDIO_SERVER = {
    "name": "Git",
    "transport": "stdio",
    "command": "uvx",
    "args": ["mcp-server-git"],
    "env": {"GITHUB_TOKEN": ENV_SECRET, "HOME": "${MCP_HOME}"},
}


def everything_the_api_shows(api, plural: str, slug: str) -> str:
    """Every response about the server, concatenated."""
    url = f"/api/{plural}/{slug}"
    parts = [api.get(f"/api/{plural}").content, api.get(url).content, api.get(f"{url}/markdown").content,
             api.get(f"{url}/versions").content]
    for version in api.get(f"{url}/versions").json():
        parts.append(api.get(f"{url}/versions/{version['number']}").content)
    return b"\n".join(parts).decode()


def test_header_secrets_are_stored_but_never_shown(team_a, api_for):
    api = api_for(team_a, "editor")
    created = api.post("/api/mcp-servers", HTTP_SERVER)

    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["headers"] == {"X-Org": "${ORG_ID}"}
    assert body["secret_header_keys"] == ["Authorization"]
    assert body["secret_env_keys"] == []
    assert body["warnings"] == ["headers: literal values of Authorization are stored as secrets"]
    assert "sk-live-HEADER" not in created.content.decode()
    row = MCPServer.objects.get(team=team_a, slug="search")
    assert row.secret_headers == {"Authorization": HEADER_SECRET}
    assert row.spec["headers"] == {"X-Org": "${ORG_ID}"}

    assert "sk-live-HEADER" not in everything_the_api_shows(api, "mcp-servers", "search")
    assert "sk-live-HEADER" not in (team_defs_dir(team_a) / "mcp/search.md").read_text()
    assert not DefinitionVersion.objects.filter(team=team_a, content__contains="sk-live-HEADER").exists()


def test_env_secrets_of_a_stdio_server(team_a, api_for):
    api = api_for(team_a, "admin")
    created = api.post("/api/mcp-servers", STDIO_SERVER)

    assert created.status_code == 201, created.json()
    assert created.json()["env"] == {"HOME": "${MCP_HOME}"}
    assert created.json()["secret_env_keys"] == ["GITHUB_TOKEN"]
    assert MCPServer.objects.get(team=team_a, slug="git").secret_env == {"GITHUB_TOKEN": ENV_SECRET}
    assert ENV_SECRET not in created.content.decode()
    assert ENV_SECRET not in everything_the_api_shows(api, "mcp-servers", "git")
    assert ENV_SECRET not in (team_defs_dir(team_a) / "mcp/git.md").read_text()
    assert not DefinitionVersion.objects.filter(team=team_a, content__contains=ENV_SECRET).exists()


def test_secrets_survive_edits_that_do_not_mention_them_and_empty_deletes(team_a, api_for):
    api = api_for(team_a, "editor")
    api.post("/api/mcp-servers", HTTP_SERVER)

    # A client cannot send back what it cannot read: leaving a secret out keeps it.
    replaced = api.put("/api/mcp-servers/search", {**HTTP_SERVER, "headers": {"X-Org": "${ORG_ID}"}, "timeout_s": 5})
    assert replaced.json()["secret_header_keys"] == ["Authorization"]
    patched = api.patch("/api/mcp-servers/search", {"description": "web search"})
    assert patched.json()["secret_header_keys"] == ["Authorization"]
    markdown = api.get("/api/mcp-servers/search/markdown").content.decode()
    api.put("/api/mcp-servers/search/markdown", markdown.replace("timeout_s: 5", "timeout_s: 6"),
            content_type="text/markdown")
    assert MCPServer.objects.get(team=team_a, slug="search").secret_headers == {"Authorization": HEADER_SECRET}

    rotated = api.patch("/api/mcp-servers/search", {"headers": {"Authorization": "Bearer new-one"}})
    assert rotated.json()["secret_header_keys"] == ["Authorization"]
    assert MCPServer.objects.get(team=team_a, slug="search").secret_headers == {"Authorization": "Bearer new-one"}

    removed = api.patch("/api/mcp-servers/search", {"headers": {"Authorization": ""}})
    assert removed.json()["secret_header_keys"] == []
    assert MCPServer.objects.get(team=team_a, slug="search").secret_headers == {}

    # Turning a secret into a reference stores no secret either.
    referenced = api.patch("/api/mcp-servers/search", {"headers": {"Authorization": "Bearer ${SEARCH_TOKEN}"}})
    assert referenced.json()["headers"] == {"Authorization": "Bearer ${SEARCH_TOKEN}"}
    assert referenced.json()["secret_header_keys"] == []


def test_editor_may_not_create_a_stdio_server(team_a, api_for):
    api = api_for(team_a, "editor")
    response = api.post("/api/mcp-servers", STDIO_SERVER)
    assert response.status_code == 403
    assert response.json() == {
        "detail": STDIO_NEEDS_PERMISSION
    }
    assert not MCPServer.objects.filter(team=team_a).exists()
    assert not (team_defs_dir(team_a) / "mcp/git.md").exists()


def test_editor_may_not_change_or_delete_a_stdio_server(team_a, api_for):
    admin = api_for(team_a, "admin")
    assert admin.post("/api/mcp-servers", STDIO_SERVER).status_code == 201
    editor = api_for(team_a, "editor")

    assert editor.get("/api/mcp-servers/git").status_code == 200
    assert editor.put("/api/mcp-servers/git", {**STDIO_SERVER, "args": ["evil"]}).status_code == 403
    assert editor.patch("/api/mcp-servers/git", {"description": "x"}).status_code == 403
    assert editor.put(
        "/api/mcp-servers/git/markdown", "---\nname: Git\ntransport: sse\nurl: https://x.example\n---\n",
        content_type="text/markdown",
    ).status_code == 403
    assert editor.delete("/api/mcp-servers/git").status_code == 403
    row = MCPServer.objects.get(team=team_a, slug="git")
    assert (row.version, row.spec["args"], row.transport) == (1, ["mcp-server-git"], "stdio")


def test_editor_may_not_turn_an_http_server_into_stdio(team_a, api_for):
    editor = api_for(team_a, "editor")
    editor.post("/api/mcp-servers", HTTP_SERVER)
    response = editor.put("/api/mcp-servers/search", {**STDIO_SERVER, "name": "Search"})
    assert response.status_code == 403
    assert MCPServer.objects.get(team=team_a, slug="search").transport == "streamable-http"


def test_the_stdio_permission_lets_an_editor_manage_stdio_servers(team_a, api_for):
    editor = api_for(team_a, "editor")
    editor.user.user_permissions.add(Permission.objects.get(codename="manage_stdio_mcpserver"))

    assert editor.get("/api/me").json()["can_manage_stdio"] is True
    assert editor.post("/api/mcp-servers", STDIO_SERVER).status_code == 201
    assert editor.patch("/api/mcp-servers/git", {"args": ["mcp-server-git", "--readonly"]}).json()["args"] == [
        "mcp-server-git",
        "--readonly",
    ]
    assert editor.delete("/api/mcp-servers/git").status_code == 200


def test_transport_rules_are_422_with_the_field(team_a, api_for):
    api = api_for(team_a, "admin")
    response = api.post("/api/mcp-servers", {"name": "Broken", "transport": "stdio"})
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert (error["loc"], error["type"]) == (["body", "command"], "invalid_definition")
    assert error["msg"].endswith("required for the stdio transport")
    wrong = api.post("/api/mcp-servers", {"name": "Broken", "transport": "sse", "url": "ftp://x"})
    assert wrong.json()["detail"][0]["loc"] == ["body", "url"]
