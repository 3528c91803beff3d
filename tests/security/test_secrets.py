"""Secrets never leave the server: not in API responses, events, logs, markdown or exported scripts.

Canary values are planted where secrets live — a provider's API key (in the
environment variable its row names, set for the worker too), MCP header and
env values (``MCPServer.secret_headers`` / ``secret_env``), a remote agent's
header (in the environment variable its ``${NAME}`` refers to), the caller's
API token — then a real run on a real worker uses the provider (a local server
speaking the OpenAI wire format, which must receive the key: the canary is
live, not decorative). Afterwards every GET route of the API (read from the
NinjaAPI object, so new routes are swept too), every event, the admin pages,
the markdown files and versions, the run's exported script and the worker's
log are searched for the canaries.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.contrib import admin
from django.test import Client
from django.urls import reverse

from agents_app.kinds import REMOTE_AGENT
from mas_core.secrets import references_expanded
from tools_app.kinds import MCP
from agents_app.models import DefinitionVersion, Event, Run, Team
from tests.agents_app.llm.fake_servers import FakeServer, closed_port_url, json_reply, openai_error, openai_stream, sse
from tests.security.test_team_isolation import api_routes, fill

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

PROVIDER_KEY = "sk-canary-provider-5b1d0c"
HEADER_SECRET = "canary-header-9e2f41"
ENV_SECRET = "canary-env-3a7c88"
REMOTE_SECRET = "canary-remote-header-6d2e90"
KEY_ENV = "SECURITY_SWEEP_PROVIDER_KEY"
REMOTE_ENV = "SECURITY_SWEEP_PARTNER_TOKEN"
REMOTE_CARD = "https://agents.example.com/a2a/r/.well-known/agent-card.json"  # a public address: saved as is
DEMO_MCP = str(Path(__file__).parents[1] / "tools_app" / "mcp_servers" / "demo.py")
# Set at import, before the session's worker process starts: it inherits the key as a real deployment would.
os.environ[KEY_ENV] = PROVIDER_KEY
os.environ[REMOTE_ENV] = REMOTE_SECRET


def canaries_in(text: str, extra: tuple[str, ...] = ()) -> list[str]:
    return [c for c in (PROVIDER_KEY, HEADER_SECRET, ENV_SECRET, REMOTE_SECRET, *extra) if c in text]


def finish(run_id, timeout=60) -> Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run_id)
        if run.status in {"succeeded", "failed", "cancelled"}:
            return run
        time.sleep(0.2)
    raise AssertionError(f"run still {run.status}")


@pytest.fixture
def model_server():
    server = FakeServer().start()
    yield server
    server.stop()


def setup_team(api, model_url: str) -> dict[str, str]:
    # The operator's grant: the canaries go through a stdio server too.
    Team.objects.filter(memberships__user=api.user).update(stdio_mcp_allowed=True)
    """A provider whose key is a canary, MCP servers holding canary secrets, an agent using them, a remote agent
    whose header refers to a canary."""
    slugs = {}
    made = api.post("/api/providers", {"name": "Canary LLM", "type": "openai", "base_url": f"{model_url}/v1",
                                       "api_key_env": KEY_ENV, "models": [{"name": "gpt-fake", "tier": "medium"}]})
    assert made.status_code == 201, made.json()
    slugs["providers"] = made.json()["slug"]
    made = api.post("/api/mcp-servers", {"name": "Canary MCP", "transport": "streamable-http",
                                         "url": f"{closed_port_url()}/mcp",
                                         "headers": {"Authorization": f"Bearer {HEADER_SECRET}"}})
    assert made.status_code == 201, made.json()
    assert made.json()["secret_header_keys"] == ["Authorization"] and made.json()["headers"] == {}
    slugs["mcp-servers"] = made.json()["slug"]
    # A stdio server written as markdown with a literal env value (a team admin may).
    made = api.post("/api/mcp-servers", {"name": "Canary Stdio", "transport": "stdio", "command": "true"})
    assert made.status_code == 201, made.json()
    stdio = made.json()["slug"]
    markdown = (f"---\nname: Canary Stdio\ntransport: stdio\ncommand: {sys.executable}\nargs:\n- {DEMO_MCP}\n"
                f"- stdio\nenv:\n  TOKEN: {ENV_SECRET}\n---\n")
    put = api.put(f"/api/mcp-servers/{stdio}/markdown", markdown, content_type="text/markdown")
    assert put.status_code == 200, put.json()
    assert put.json()["secret_env_keys"] == ["TOKEN"] and put.json()["env"] == {}
    made = api.post("/api/agents", {"name": "Keeper", "tier": "medium", "tools": ["vfs_write"],
                                    "mcp_servers": [slugs["mcp-servers"], stdio],
                                    "body": "You keep secrets."})
    assert made.status_code == 201, made.json()
    slugs["agents"] = made.json()["slug"]
    for plural, payload in {"skills": {"name": "Canary Skill", "body": "x"},
                            "tools": {"name": "canary_tool", "prompt": "x {{t}}", "parameters": {"t": {}}},
                            "workflows": {"name": "Canary Flow",
                                          "steps": [{"id": "s", "agent": slugs["agents"], "prompt": "go"}]},
                            "evals": {"name": "Canary Evals", "agent": slugs["agents"], "cases": [
                                {"id": "c", "task": "go", "checks": [{"type": "status", "equals": "succeeded"}]}]},
                            "guardrails": {"name": "Canary Guard", "applies_to": ["model_answer"],
                                           "detector": {"type": "secrets"}, "action": "warn"},
                            # Its header refers to the canary (a literal is refused): the value never shows.
                            "remote-agents": {"name": "Canary Partner", "card_url": REMOTE_CARD,
                                              "headers": {"Authorization": f"Bearer ${{{REMOTE_ENV}}}"}},
                            }.items():
        made = api.post(f"/api/{plural}", payload)
        assert made.status_code == 201, made.json()
        slugs[plural] = made.json()["slug"]
    return slugs


def env_seen_by(row, name: str) -> str:
    """What the stdio server's process has in its environment (its demo tool env_value tells)."""
    import asyncio

    from tools_app.mcp.client import Connection, ServerConfig

    config = ServerConfig.of(row)  # reads the row's team: outside the event loop

    async def ask() -> str:
        connection = Connection(config)
        await connection.open()
        try:
            return await connection.call("env_value", {"name": name})
        finally:
            await connection.close()

    return asyncio.run(ask())


def log_tail(path: Path, offset: int) -> str:
    with open(path, "rb") as handle:
        handle.seek(offset)
        return handle.read().decode(errors="replace")


def test_no_secret_reaches_a_response_event_log_file_or_script(team_a, api_for, model_server,
                                                               celery_worker_process):
    log_path = celery_worker_process.log_path
    log_offset = log_path.stat().st_size if log_path.exists() else 0
    api = api_for(team_a, "admin")
    slugs = setup_team(api, model_server.url)
    # Test and approve the stdio server: it really starts, with the secret in its environment.
    tested = api.post("/api/mcp-servers/canary-stdio/test")
    assert tested.status_code == 200 and tested.json()["ok"] is True, tested.json()
    approved = api.post("/api/mcp-servers/canary-stdio/approve")
    assert "env_value" in approved.json()["approved"]
    assert canaries_in(tested.content.decode() + approved.content.decode()) == []
    assert env_seen_by(MCP.model.objects.get(team=team_a, slug="canary-stdio"), "TOKEN") == ENV_SECRET  # live
    # The remote agent's header would carry the canary (live): its sessions send what this expands to.
    partner = REMOTE_AGENT.model.objects.get(team=team_a, slug=slugs["remote-agents"])
    assert references_expanded(partner.spec["headers"], what="header", team=team_a.slug) == {
        "Authorization": f"Bearer {REMOTE_SECRET}"}
    model_server.add(
        sse(openai_stream(tool_calls=[("call_1", "vfs_write", ['{"path": "out/report.md", ', '"content": "ok"}']),
                                      ("call_2", "mcp__canary-stdio__add", ['{"a": 2, "b": 40}'])],
                          usage=(10, 3))),
        sse(openai_stream(text=["All ", "kept."], usage=(12, 2))),
    )
    started = api.post("/api/runs", {"agent": slugs["agents"], "input": "Keep the secrets."})
    assert started.status_code == 201, started.json()
    run = finish(started.json()["id"])
    assert (run.status, run.result) == ("succeeded", "All kept."), run.error

    calls = [(e.data["name"], e.data["ok"], e.data["content"])
             for e in Event.objects.filter(run=run, type="tool_result").order_by("seq")]
    assert calls[1] == ("mcp__canary-stdio__add", True, "42"), calls
    connects = {e.data["server"]: e.data["ok"] for e in Event.objects.filter(run=run, type="mcp_connect")}
    assert connects == {"canary-stdio": True, "canary-mcp": False}  # the HTTP one is down: its error is an event
    # The provider really used the key: the canary is live.
    assert [r.headers["authorization"] for r in model_server.requests] == [f"Bearer {PROVIDER_KEY}"] * 2
    assert not canaries_in(json.dumps([r.body for r in model_server.requests]))

    # A memory and a run-less memory id, so every route has something to show.
    memory = api.post("/api/memories", {"content": "the sky is blue"}).json()
    from django.utils import timezone

    from agents_app.models import ApprovalRequest
    from evals_app.models import EvalRun

    eval_run = EvalRun.objects.create(team=team_a, dataset_slug=slugs["evals"], dataset_version=1,
                                      agent=slugs["agents"], deadline=timezone.now(), status="finished")
    # And a request for a person in the run (the approvals routes show it).
    approval = ApprovalRequest.objects.create(team=team_a, run=run, session=run.sessions.first(), agent="x",
                                              call_id="call_1", tool="vfs_write", deadline=timezone.now())
    side = SimpleNamespace(slugs=slugs, run=run, memory=SimpleNamespace(id=memory["id"]), eval_run=eval_run,
                           approval=approval)
    token = api.token
    swept = 0
    for route in api_routes():
        if route.method != "GET":
            continue
        url = fill(route, side)
        response = api.get(url)
        assert response.status_code in {200, 503}, (str(route), response.status_code, response.content[:300])
        assert canaries_in(response.content.decode(), (token,)) == [], str(route)
        swept += 1
    assert swept >= 40
    # The stdio server (its env secret came in as markdown) read every way too.
    numbers = [v["number"] for v in api.get("/api/mcp-servers/canary-stdio/versions").json()]
    assert numbers
    for suffix in ("", "/markdown", "/versions", *(f"/versions/{n}" for n in numbers)):
        response = api.get(f"/api/mcp-servers/canary-stdio{suffix}")
        assert response.status_code == 200 and canaries_in(response.content.decode()) == [], suffix

    events = list(Event.objects.filter(run=run).order_by("seq").values_list("type", "data"))
    assert {"llm_request", "llm_response", "tool_call", "tool_result", "run_complete"} <= {t for t, _ in events}
    assert canaries_in(json.dumps(events, default=str), (token,)) == []

    script = api.get(f"/api/runs/{run.id}/script")
    assert script.status_code == 200 and "keeper" in script.json()
    assert canaries_in(script.content.decode(), (token,)) == []

    files = {str(p): p.read_text() for p in Path(settings.MAS_DEFS_ROOT).rglob("*") if p.is_file()}
    files |= {str(p): p.read_text() for p in Path(team_a.defs_dir).rglob("*") if p.is_file()}
    assert any(path.endswith(".md") and "Canary Stdio" in text for path, text in files.items())
    assert canaries_in(json.dumps(files)) == []
    versions = list(DefinitionVersion.objects.filter(team=team_a).values_list("content", flat=True))
    assert len(versions) >= 7 and canaries_in(json.dumps(versions)) == []

    worker_log = log_tail(log_path, log_offset)
    assert canaries_in(worker_log, (token,)) == []


def test_admin_pages_show_secret_names_never_values(team_a, api_for, make_member, model_server):
    api = api_for(team_a, "admin")
    slugs = setup_team(api, model_server.url)
    client = Client()
    client.force_login(make_member(team_a, "admin"))
    pages = 0
    for model, model_admin in admin.site._registry.items():
        meta = model._meta
        if meta.app_label not in {"agents_app", "tools_app", "workflows_app"}:
            continue
        listing = client.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"))
        assert not canaries_in(listing.content.decode(), (api.token,)), meta.label
        if listing.status_code != 200:
            continue
        for row in listing.context["cl"].result_list:
            page = client.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[row.pk]))
            assert page.status_code == 200, (meta.label, row.pk)
            assert not canaries_in(page.content.decode(), (api.token,)), (meta.label, row.pk)
            pages += 1
    assert pages >= 8
    stdio = MCP.model.objects.get(team=team_a, slug="canary-stdio")
    assert stdio.secret_env == {"TOKEN": ENV_SECRET}
    page = client.get(reverse("admin:tools_app_mcpserver_change", args=[stdio.pk])).content.decode()
    assert "env TOKEN" in page


def test_a_provider_error_that_echoes_the_key_does_not_carry_it_into_events(team_a, api_for, model_server,
                                                                             celery_worker_process):
    """Some APIs quote the key they refused ("Incorrect API key provided: sk-…"): it must not be recorded."""
    log_path = celery_worker_process.log_path
    log_offset = log_path.stat().st_size if log_path.exists() else 0
    api = api_for(team_a, "admin")
    slugs = setup_team(api, model_server.url)
    model_server.add(*[json_reply(401, openai_error(401, f"Incorrect API key provided: {PROVIDER_KEY}"))] * 10)
    started = api.post("/api/runs", {"agent": slugs["agents"], "input": "x"})
    run = finish(started.json()["id"])
    assert run.status == "failed"
    assert model_server.requests, "the provider was never called"
    events = list(Event.objects.filter(run=run).values_list("data", flat=True))
    assert any("Incorrect API key provided" in json.dumps(data) for data in events), events
    assert canaries_in(json.dumps(events)) == []
    assert canaries_in(run.error) == []
    assert canaries_in(api.get(f"/api/runs/{run.id}").content.decode()) == []
    assert "[redacted]" in run.error or any("[redacted]" in json.dumps(data) for data in events)
    assert canaries_in(log_tail(log_path, log_offset)) == []


# Which environment variables a definition may name, and which addresses its URLs may reach: by the
# operator's declaration (MAS_TEAM_SECRETS, MAS_PRIVATE_URL_ALLOW), in test_team_secrets.py and test_url_policy.py.
