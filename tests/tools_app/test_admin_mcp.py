"""MCP servers in the admin: the stdio permission and write-only secrets."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from tools_app.kinds import MCP
from mas_core.definitions.storage import team_defs_dir
from agents_app.models import DefinitionVersion
from tests.agents_app.test_admin_definitions import admin_url, client_for, files_under, save_definition
from tools_app.models import MCPServer
from tests.tools_app.stdio_teams import team_a, team_b  # noqa: F401 (fixtures: the teams hold the stdio grant)



STDIO = "---\nname: local-files\ntransport: stdio\ncommand: npx\nargs:\n- -y\n- server-filesystem\n---\n"
HTTP = "---\nname: search\ntransport: streamable-http\nurl: https://mcp.example.com/mcp\n---\n"
SECRET = "s3cr3t-value-7f2c9a"


def add(client, team, text: str, secrets: str = ""):
    return client.post(admin_url(MCP, "add"), {"team": team.pk, "markdown": text, "secrets": secrets})


def grant_stdio(user) -> None:
    user.user_permissions.add(Permission.objects.get(codename="manage_stdio_mcpserver"))


def test_editor_without_permission_cannot_create_stdio(team_a, make_member):
    client = client_for(make_member(team_a, "editor"))
    response = add(client, team_a, STDIO)
    assert response.status_code == 200
    [error] = response.context["adminform"].form.errors["markdown"]
    assert error.startswith("Field transport: a stdio MCP server runs a command on the server")
    assert not MCPServer.objects.exists()
    assert not DefinitionVersion.objects.filter(kind="mcp").exists()
    assert files_under(team_a) == []


@pytest.mark.parametrize("how", ["permission", "team admin"])
def test_stdio_create_with_permission_or_admin_role(team_a, make_member, how):
    user = make_member(team_a, "editor" if how == "permission" else "admin")
    if how == "permission":
        grant_stdio(user)
    response = add(client_for(user), team_a, STDIO)
    assert response.status_code == 302
    row = MCPServer.objects.get(team=team_a, slug="local-files")
    assert (row.transport, row.version) == ("stdio", 1)
    assert (team_defs_dir(team_a) / "mcp" / "local-files.md").read_text() == STDIO


def test_editor_cannot_turn_http_into_stdio(team_a, make_member):
    row = save_definition(MCP, team_a, HTTP)
    client = client_for(make_member(team_a, "editor"))
    stdio = STDIO.replace("local-files", "search")
    response = client.post(admin_url(MCP, "change", row.pk), {"markdown": stdio, "secrets": ""})
    assert response.status_code == 200
    assert "markdown" in response.context["adminform"].form.errors
    row.refresh_from_db()
    assert (row.transport, row.version) == ("streamable-http", 1)


def test_editor_can_view_but_not_change_or_delete_stdio(team_a, make_member):
    row = save_definition(MCP, team_a, STDIO)
    client = client_for(make_member(team_a, "editor"))
    page = client.get(admin_url(MCP, "change", row.pk))
    assert page.status_code == 200
    assert 'name="_save"' not in page.content.decode()
    edited = STDIO.replace("server-filesystem", "server-shell")
    assert client.post(admin_url(MCP, "change", row.pk), {"markdown": edited, "secrets": ""}).status_code == 403
    assert client.post(admin_url(MCP, "delete", row.pk), {"post": "yes"}).status_code == 403
    bulk = client.post(
        admin_url(MCP, "changelist"), {"action": "delete_selected", "_selected_action": [row.pk], "post": "yes"}
    )
    assert bulk.status_code == 403
    row.refresh_from_db()
    assert (row.version, row.spec["args"]) == (1, ["-y", "server-filesystem"])
    assert (team_defs_dir(team_a) / "mcp" / "local-files.md").exists()


def test_user_with_permission_edits_and_deletes_stdio(team_a, make_member):
    row = save_definition(MCP, team_a, STDIO)
    user = make_member(team_a, "editor")
    grant_stdio(user)
    client = client_for(user)
    edited = STDIO.replace("server-filesystem", "server-shell")
    assert client.post(admin_url(MCP, "change", row.pk), {"markdown": edited, "secrets": ""}).status_code == 302
    row.refresh_from_db()
    assert row.version == 2
    assert client.post(admin_url(MCP, "delete", row.pk), {"post": "yes"}).status_code == 302
    assert not MCPServer.objects.filter(pk=row.pk).exists()
    assert not (team_defs_dir(team_a) / "mcp" / "local-files.md").exists()


def pages_of(client, row) -> dict[str, str]:
    """Every admin page that shows something about ``row``."""
    version = DefinitionVersion.objects.filter(team=row.team, kind="mcp", slug=row.slug).first()
    urls = {
        "changelist": admin_url(MCP, "changelist"),
        "change": admin_url(MCP, "change", row.pk),
        "history": admin_url(MCP, "history", row.pk),
        "delete": admin_url(MCP, "delete", row.pk),
        "add": admin_url(MCP, "add"),
        "versions": reverse("admin:agents_app_definitionversion_changelist"),
        "version": reverse("admin:agents_app_definitionversion_change", args=[version.pk]),
        "index": reverse("admin:index"),
    }
    pages = {}
    for name, url in urls.items():
        response = client.get(url)
        assert response.status_code == 200, name
        pages[name] = response.content.decode()
    return pages


def test_http_secrets_are_write_only(team_a, make_member):
    client = client_for(make_member(team_a, "editor"))
    response = add(client, team_a, HTTP, secrets=f"Authorization=Bearer {SECRET}\nX-Trace=on\n")
    assert response.status_code == 302
    row = MCPServer.objects.get(team=team_a, slug="search")
    assert row.secret_headers == {"Authorization": f"Bearer {SECRET}", "X-Trace": "on"}
    assert row.secret_env == {}
    assert (team_defs_dir(team_a) / "mcp" / "search.md").read_text() == HTTP
    assert SECRET not in DefinitionVersion.objects.get(team=team_a, slug="search").content
    pages = pages_of(client, row)
    for name, body in pages.items():
        assert SECRET not in body, name
    # Searching for the value finds nothing (it would be an oracle otherwise).
    assert list(client.get(admin_url(MCP, "changelist"), {"q": SECRET}).context["cl"].result_list) == []
    # Only the names are shown, and the secrets textarea is empty.
    assert "header Authorization, header X-Trace" in pages["change"]
    assert '<textarea name="secrets" cols="100" rows="4" autocomplete="off" spellcheck="false"' in pages["change"]
    assert "</textarea>" in pages["change"].split('name="secrets"', 1)[1][:200]

    # Saving again with the secrets textarea empty keeps them; NAME= removes one.
    edited = HTTP.replace("search\n", "search\ndescription: Web search\n")
    assert client.post(admin_url(MCP, "change", row.pk), {"markdown": edited, "secrets": ""}).status_code == 302
    row.refresh_from_db()
    assert row.secret_headers == {"Authorization": f"Bearer {SECRET}", "X-Trace": "on"}
    removal = {"markdown": edited, "secrets": "X-Trace="}
    assert client.post(admin_url(MCP, "change", row.pk), removal).status_code == 302
    row.refresh_from_db()
    assert row.secret_headers == {"Authorization": f"Bearer {SECRET}"}


def test_stdio_secrets_go_to_env_and_markdown_literals_too(team_a, make_member):
    client = client_for(make_member(team_a, "admin"))
    text = STDIO[:-4] + f"env:\n  LOG_LEVEL: ${{MCP_LOG_LEVEL}}\n  DB_PASSWORD: {SECRET}\n---\n"
    response = add(client, team_a, text, secrets="API_KEY=k-" + SECRET)
    assert response.status_code == 302
    row = MCPServer.objects.get(team=team_a, slug="local-files")
    assert row.secret_env == {"DB_PASSWORD": SECRET, "API_KEY": "k-" + SECRET}
    assert row.spec["env"] == {"LOG_LEVEL": "${MCP_LOG_LEVEL}"}
    written = (team_defs_dir(team_a) / "mcp" / "local-files.md").read_text()
    assert SECRET not in written
    assert "LOG_LEVEL: ${MCP_LOG_LEVEL}" in written
    for name, body in pages_of(client, row).items():
        assert SECRET not in body, name
    assert "env API_KEY, env DB_PASSWORD" in client.get(admin_url(MCP, "change", row.pk)).content.decode()


def test_secrets_are_not_echoed_when_the_form_has_errors(team_a, make_member):
    client = client_for(make_member(team_a, "editor"))
    broken = HTTP.replace("url: https://mcp.example.com/mcp", "url: ftp://nowhere")
    response = add(client, team_a, broken, secrets=f"Authorization=Bearer {SECRET}")
    assert response.status_code == 200
    assert "markdown" in response.context["adminform"].form.errors
    assert SECRET not in response.content.decode()
    bad_line = add(client, team_a, HTTP, secrets=f"this line has no equals {SECRET}")
    assert bad_line.status_code == 200
    assert bad_line.context["adminform"].form.errors["secrets"] == [
        "Line 1: expected NAME=value with a valid headers name."
    ]
    assert SECRET not in bad_line.content.decode()
    assert not MCPServer.objects.exists()


def test_secret_of_another_team_is_unreachable(team_a, team_b, make_member):
    client_b = client_for(make_member(team_b, "editor"))
    assert add(client_b, team_b, HTTP, secrets=f"Authorization=Bearer {SECRET}").status_code == 302
    theirs = MCPServer.objects.get(team=team_b)
    client_a = client_for(make_member(team_a, "editor"))
    for view in ("change", "history", "delete"):
        assert client_a.get(admin_url(MCP, view, theirs.pk)).status_code == 404
    assert SECRET not in client_a.get(admin_url(MCP, "changelist")).content.decode()
