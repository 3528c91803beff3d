"""Issue 13, finding 5: MCP server URLs and provider base_urls pass web_fetch's address policy.

Loopback, private, link-local and cloud metadata addresses are refused unless
``MAS_PRIVATE_URL_ALLOW`` names them: on save (literal addresses, names such as
``localhost``) and when connecting (the name resolved and every address
checked, the connection pinned to the address checked). The test settings allow
127.0.0.1 for the suite's fake servers; these tests set their own lists.
"""

from __future__ import annotations

import socket

import pytest

from agents_app.llm.registry import provider_for
from mas_core.llm_types import ProviderError
from agents_app.models import ModelProvider
from tests.agents_app.llm.fake_servers import (
    anthropic_stream,
    gemini_stream,
    openai_stream,
    sse,
)
from tests.agents_app.llm.helpers import request, run, run_error
from tools_app.models import MCPServer

pytestmark = pytest.mark.django_db

SETTING = "MAS_PRIVATE_URL_ALLOW"
# (URL, an allow-list entry that admits it)
PRIVATE = [
    ("http://127.0.0.1:9/v1", "127.0.0.1"),
    ("http://169.254.169.254/latest/meta-data", "169.254.169.254"),
    ("http://10.1.2.3:8080/v1", "10.0.0.0/8"),
    ("http://192.168.1.20/v1", "192.168.0.0/16"),
    ("http://localhost:11434/v1", "127.0.0.1:11434"),
    ("http://ollama.localhost:11434/v1", "ollama.localhost"),
    ("http://[::1]:8080/v1", "[::1]:8080"),
    ("http://127.1:9/v1", "127.0.0.0/8"),
    ("http://[::ffff:10.0.0.1]/v1", "10.0.0.1"),
]


def refusal(host: str, *, resolves_to: str | None = None) -> str:
    what = f"host {host} resolves to {resolves_to}," if resolves_to else f"host {host} is"
    return f"{what} a private/loopback/link-local address; refused (allow it in {SETTING})"


def provider(url: str, name: str = "Local") -> dict:
    return {"name": name, "type": "openai", "base_url": url, "models": [{"name": "m", "tier": "medium"}]}


def mcp(url: str, name: str = "Local MCP") -> dict:
    return {"name": name, "transport": "streamable-http", "url": url}


def test_the_policy_list_is_not_empty():
    assert len(PRIVATE) >= 9


@pytest.mark.parametrize("url, entry", PRIVATE)
def test_a_private_url_is_refused_on_save_without_the_allow_list_and_accepted_with_it(team_a, api_for, settings,
                                                                                    url, entry):
    settings.MAS_PRIVATE_URL_ALLOW = []
    api = api_for(team_a, "admin")
    refused = api.post("/api/providers", provider(url))
    assert refused.status_code == 422
    [item] = refused.json()["detail"]
    assert item["loc"] == ["body", "base_url"] and item["msg"].endswith(f"refused (allow it in {SETTING})")
    refused = api.post("/api/mcp-servers", mcp(url))
    assert refused.status_code == 422
    [item] = refused.json()["detail"]
    assert item["loc"] == ["body", "url"] and item["msg"].endswith(f"refused (allow it in {SETTING})")
    assert not ModelProvider.objects.filter(team=team_a).exists() and not MCPServer.objects.filter(team=team_a).exists()

    settings.MAS_PRIVATE_URL_ALLOW = [entry]
    assert api.post("/api/providers", provider(url)).status_code == 201
    assert api.post("/api/mcp-servers", mcp(url)).status_code == 201


def test_the_messages_name_the_host_and_the_setting(team_a, api_for, settings):
    settings.MAS_PRIVATE_URL_ALLOW = ["127.0.0.1:11434"]  # that port only
    api = api_for(team_a, "admin")
    cases = {
        "http://127.0.0.1:8000/api": refusal("127.0.0.1"),
        "http://169.254.169.254/": refusal("169.254.169.254"),
        "http://localhost:6379/": refusal("localhost", resolves_to="127.0.0.1"),
        "http://metadata.google.internal/computeMetadata/v1": "host metadata.google.internal is a cloud metadata "
                                                               "service; refused",
        "file:///etc/passwd": "must start with http:// or https://",
    }
    for url, message in cases.items():
        assert api.post("/api/providers", provider(url)).json()["detail"][0]["msg"] == message, url
    # The cloud metadata names are refused whatever the list says.
    settings.MAS_PRIVATE_URL_ALLOW = ["metadata.google.internal"]
    response = api.post("/api/mcp-servers", mcp("http://metadata.google.internal/x"))
    assert response.json()["detail"][0]["msg"] == "host metadata.google.internal is a cloud metadata service; refused"
    assert not ModelProvider.objects.filter(team=team_a).exists() and not MCPServer.objects.filter(team=team_a).exists()


# -- when connecting ---------------------------------------------------------------------------------------


@pytest.fixture
def fake_dns(monkeypatch):
    """Names of the test's own that the resolver answers with a given address (the outside world's DNS)."""
    names: dict[str, str] = {}
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        key = host.decode() if isinstance(host, bytes) else host
        return real(names.get(key, host), port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return names


STREAMS = {
    "openai": ("/v1", lambda: sse(openai_stream(text=["pinned"], usage=(1, 1)))),
    "anthropic": ("", lambda: sse(anthropic_stream(text=["pinned"], usage=(1, 1)))),
    "gemini": ("", lambda: sse(gemini_stream(text=["pinned"], usage=(1, 1)))),
}


@pytest.mark.parametrize("kind", sorted(STREAMS))
def test_a_provider_host_that_resolves_to_loopback_is_refused_when_connecting(kind, fake_dns, model_server,
                                                                            settings, monkeypatch):
    """A name is not resolved on save; the connection resolves it, checks it and connects to what it checked."""
    fake_dns["model.rebind.test"] = "127.0.0.1"
    monkeypatch.setenv("LOCAL_PROBE_KEY", "k-probe")
    port = model_server.url.rsplit(":", 1)[1]
    suffix, reply = STREAMS[kind]
    spec = {"slug": f"{kind}-probe", "type": kind, "base_url": f"http://model.rebind.test:{port}{suffix}",
            "api_key_env": "LOCAL_PROBE_KEY", "models": [{"name": "m", "tier": "medium"}]}
    settings.MAS_PRIVATE_URL_ALLOW = []
    resolved = provider_for("medium", providers=[spec], team="alpha")

    error = run_error(resolved.provider, request("m"))
    assert (error.kind, error.message) == ("bad_request",
                                          f"{kind}: {refusal('model.rebind.test', resolves_to='127.0.0.1')}")
    assert not error.retryable
    assert model_server.requests == []

    settings.MAS_PRIVATE_URL_ALLOW = ["127.0.0.1"]
    model_server.add(reply())
    response, _ = run(resolved.provider, request("m"))
    assert response.text == "pinned"
    # Connected to the address it checked, still naming the host it was given.
    assert [r.headers["host"] for r in model_server.requests] == [f"model.rebind.test:{port}"]


def test_a_provider_saved_while_its_address_was_allowed_is_refused_once_it_is_not(team_a, api_for, settings,
                                                                                   model_server):
    settings.MAS_PRIVATE_URL_ALLOW = ["127.0.0.1"]
    api = api_for(team_a, "admin")
    assert api.post("/api/providers", provider(f"{model_server.url}/v1")).status_code == 201
    settings.MAS_PRIVATE_URL_ALLOW = []
    with pytest.raises(ProviderError) as refused:
        provider_for("medium", providers=list(ModelProvider.objects.filter(team=team_a)), team="alpha")
    assert (refused.value.kind, refused.value.message) == ("bad_request",
                                                          f"provider local: base_url {refusal('127.0.0.1')}")
    assert model_server.requests == []


def test_an_mcp_host_that_resolves_to_loopback_is_refused_when_connecting(team_a, api_for, settings, fake_dns,
                                                                        listener):
    fake_dns["mcp.rebind.test"] = "127.0.0.1"
    settings.MAS_PRIVATE_URL_ALLOW = []
    api = api_for(team_a, "admin")
    made = api.post("/api/mcp-servers", mcp(f"http://mcp.rebind.test:{listener.port}/mcp", name="Rebind"))
    assert made.status_code == 201, made.json()  # names are not resolved on save

    tested = api.post("/api/mcp-servers/rebind/test").json()
    assert tested == {"ok": False, "timings_ms": {}, "tools": [], "error": "MCP server rebind: url refused: "
                      + refusal("mcp.rebind.test", resolves_to="127.0.0.1")}
    assert listener.settle() == []

    # Allowed, it connects — to the address checked, with the name in the Host header.
    settings.MAS_PRIVATE_URL_ALLOW = ["127.0.0.1"]
    assert api.post("/api/mcp-servers/rebind/test").json()["ok"] is False  # a listener, not an MCP server
    received = listener.settle()
    assert received and all(f"host: mcp.rebind.test:{listener.port}" in r.lower() for r in received)


def test_an_mcp_server_saved_while_its_address_was_allowed_is_refused_once_it_is_not(team_a, api_for, settings,
                                                                                      listener):
    settings.MAS_PRIVATE_URL_ALLOW = ["127.0.0.1"]
    api = api_for(team_a, "admin")
    for transport in ("streamable-http", "sse"):
        made = api.post("/api/mcp-servers", {**mcp(f"{listener.url}/mcp", name=f"Local {transport}"),
                                             "transport": transport})
        assert made.status_code == 201, made.json()
    settings.MAS_PRIVATE_URL_ALLOW = []
    for slug in ("local-streamable-http", "local-sse"):
        tested = api.post(f"/api/mcp-servers/{slug}/test").json()
        assert tested["error"] == f"MCP server {slug}: url refused: {refusal('127.0.0.1')}"
    assert listener.settle() == []
