"""provider_for: from provider rows/specs to a ready provider, model and prices."""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace

import pytest

from agents_app.llm.anthropic_provider import AnthropicProvider
from agents_app.llm.gemini_provider import GeminiProvider
from agents_app.llm.openai_provider import OpenAIProvider
from agents_app.llm.pricing import Prices, usage_cost
from agents_app.llm.registry import (
    provider_config,
    provider_for,
    register_provider_type,
)
from agents_app.llm.scripted import MemoryCursor, ScriptedProvider
from mas_core.llm_types import ProviderError, Usage
from agents_app.specs import ProviderSpec

from tests.processes import in_a_fresh_process

from .fake_servers import openai_stream, sse
from .helpers import request, run

ENV = {"OPENAI_KEY": "sk-1", "ANTHROPIC_KEY": "ak-1", "GEMINI_KEY": "gk-1"}
PROVIDERS = [
    {"slug": "openai", "name": "OpenAI", "type": "openai", "api_key_env": "OPENAI_KEY", "models": [
        {"name": "gpt-4.1-mini", "tier": "small", "input_price": "0.40", "output_price": "1.60"},
        {"name": "gpt-4.1", "tier": "medium", "input_price": "2", "output_price": "8"},
    ]},
    {"slug": "anthropic", "name": "Anthropic", "type": "anthropic", "api_key_env": "ANTHROPIC_KEY", "models": [
        {"name": "claude-sonnet-4", "tier": "large", "input_price": "3", "output_price": "15"},
        {"name": "claude-haiku", "tier": "small", "input_price": "1", "output_price": "5"},
    ]},
    {"slug": "gemini", "name": "Gemini", "type": "gemini", "api_key_env": "GEMINI_KEY", "models": []},
    {"slug": "ollama", "name": "Ollama", "type": "openai", "base_url": "http://127.0.0.1:11434/v1", "models": []},
    {"slug": "replay", "name": "Replay", "type": "scripted", "models": [{"name": "demo", "tier": None}]},
]


def test_provider_model_reference():
    resolved = provider_for("anthropic:claude-sonnet-4", providers=PROVIDERS, environ=ENV)
    assert isinstance(resolved.provider, AnthropicProvider)
    assert (resolved.provider_slug, resolved.model, resolved.tier) == ("anthropic", "claude-sonnet-4", "large")
    assert resolved.prices == Prices(Decimal(3), Decimal(15))


def test_tier_takes_the_first_provider_that_has_it():
    small = provider_for("small", providers=PROVIDERS, environ=ENV)
    assert (small.provider_slug, small.model) == ("openai", "gpt-4.1-mini")
    assert isinstance(small.provider, OpenAIProvider)
    large = provider_for("large", providers=PROVIDERS, environ=ENV)
    assert (large.provider_slug, large.model) == ("anthropic", "claude-sonnet-4")


def test_unlisted_models_of_a_provider_without_a_list_are_free():
    resolved = provider_for("gemini:gemini-2.5-flash", providers=PROVIDERS, environ=ENV)
    assert isinstance(resolved.provider, GeminiProvider)
    assert (resolved.model, resolved.prices) == ("gemini-2.5-flash", Prices())


def test_local_openai_compatible_server_needs_no_key():
    resolved = provider_for("ollama:llama3.2", providers=PROVIDERS, environ={})
    assert isinstance(resolved.provider, OpenAIProvider)
    assert resolved.provider.base_url == "http://127.0.0.1:11434/v1"


def test_http_providers_are_shared_scripted_ones_are_not():
    a = provider_for("openai:gpt-4.1", providers=PROVIDERS, environ=ENV).provider
    b = provider_for("small", providers=PROVIDERS, environ=ENV).provider
    assert a is b
    cursor = MemoryCursor({"x": 1})
    scripted = provider_for("replay:demo", providers=PROVIDERS, script={"x": [{"text": "a"}]}, cursor=cursor)
    assert isinstance(scripted.provider, ScriptedProvider) and scripted.provider.cursor is cursor


@pytest.mark.parametrize("ref, kind, message", [
    ("openai:gpt-4.1", "auth", "environment variable OPENAI_KEY is not set (API key of provider openai)"),
    ("medium", "auth", "environment variable OPENAI_KEY is not set (API key of provider openai)"),
    ("mistral:large", "bad_request", ("unknown provider 'mistral' in model 'mistral:large' "
                                     "(providers: openai, anthropic, gemini, ollama, replay)")),
    ("anthropic:claude-2", "bad_request", ("provider anthropic lists no model 'claude-2' "
                                          "(models: claude-sonnet-4, claude-haiku)")),
    ("gpt-4", "bad_request", "model 'gpt-4' is neither provider:model nor a tier (small, medium, large)"),
    ("replay:demo", "bad_request", "provider replay is scripted but no script was given"),
])
def test_clear_errors(ref, kind, message):
    with pytest.raises(ProviderError) as info:
        provider_for(ref, providers=PROVIDERS, environ={})
    assert (info.value.kind, info.value.message) == (kind, message)


def test_missing_tier_and_unknown_type():
    with pytest.raises(ProviderError, match="no model of tier large is configured"):
        provider_for("large", providers=PROVIDERS[:1], environ=ENV)
    with pytest.raises(ProviderError, match="unknown type 'cohere'"):
        provider_for("c:m", providers=[{"slug": "c", "type": "cohere"}], environ=ENV)
    with pytest.raises(ProviderError, match="names no api_key_env"):
        provider_for("a:m", providers=[{"slug": "a", "type": "anthropic"}], environ=ENV)


def test_reads_spec_objects_and_rows():
    spec = ProviderSpec(name="openai", type="openai", api_key_env="OPENAI_KEY",
                        models=[{"name": "gpt-4.1", "tier": "medium", "input_price": "2", "output_price": "8"}])
    assert provider_config(spec).model("gpt-4.1").prices == Prices(Decimal(2), Decimal(8))

    class Manager:  # stands in for the ``models`` related manager
        def all(self):
            return [SimpleNamespace(name="gpt-x", tier="small", input_price=Decimal("0.1000"),
                                    output_price=Decimal("0.2000"))]

    row = SimpleNamespace(slug="team-openai", name="Team OpenAI", provider_type="openai",
                          base_url="", api_key_env="OPENAI_KEY", models=Manager())
    resolved = provider_for("small", providers=[row], environ=ENV)
    assert (resolved.provider_slug, resolved.model) == ("team-openai", "gpt-x")
    assert resolved.prices == Prices(Decimal("0.1"), Decimal("0.2"))
    assert resolved.provider.base_url is None


def test_register_rejects_duplicates():
    with pytest.raises(ValueError):
        register_provider_type("openai", lambda config, key: None)
    with pytest.raises(ValueError):
        register_provider_type("scripted", lambda config, key: None)


def test_end_to_end_call_and_cost(server):
    providers = [{"slug": "local", "type": "openai", "base_url": f"{server.url}/v1", "api_key_env": "LOCAL_KEY",
                  "models": [{"name": "qwen", "tier": "small", "input_price": "0.15", "output_price": "0.60"}]}]
    resolved = provider_for("small", providers=providers, environ={"LOCAL_KEY": "secret"})
    server.add(sse(openai_stream(text=["fine"], usage=(1234, 567))))
    response, _ = run(resolved.provider, request(resolved.model))
    assert server.requests[0].headers["authorization"] == "Bearer secret"
    assert server.requests[0].body["model"] == "qwen"
    # 1234 × 0.15 / 1e6 + 567 × 0.60 / 1e6 = 0.0001851 + 0.0003402
    assert usage_cost(response.usage, resolved.prices) == Decimal("0.00052530")


def test_usage_cost_rounds_half_up_to_a_hundred_millionth():
    assert usage_cost(Usage(1, 0), Prices.of("0.005", 0)) == Decimal("0.00000001")  # 0.000000005 → up
    assert usage_cost(Usage(1, 0), Prices.of("0.004", 0)) == Decimal("0.00000000")
    assert usage_cost(Usage(0, 0), Prices.of(100, 100)) == Decimal("0E-8")
    assert usage_cost(Usage(1_000_000, 2_000_000), Prices.of(3, 15)) == Decimal("33.00000000")


def test_a_process_imports_a_providers_sdk_only_when_it_builds_one():
    """Web and worker processes start without the three SDKs (~5 s of imports); building a provider of a type
    imports that type's SDK and no other."""
    script = (
        "import sys, django; django.setup()\n"
        "sdks = lambda: sorted(m for m in ('openai', 'anthropic', 'google.genai') if m in sys.modules)\n"
        "print(sdks())\n"
        "from agents_app.llm.registry import provider_for\n"
        "provider = provider_for('ollama:llama3.2', providers=[{'slug': 'ollama', 'type': 'openai',\n"
        "    'base_url': 'http://127.0.0.1:11434/v1', 'models': []}], environ={}).provider\n"
        "print(type(provider).__name__, sdks())\n"
    )
    result = in_a_fresh_process(script)
    assert (result.returncode, result.stdout) == (0, "[]\nOpenAIProvider ['openai']\n"), result.stderr


def test_a_providers_first_call_imports_nothing_and_builds_no_tls_context():
    """What the SDKs load lazily (openai's resources, the HTTP transport, google-auth's async parts) and the TLS
    context (the CA bundle read, ~70 ms) are paid when a provider is built, not in its first call: that call runs
    inside the model call's timeout (MAS_MODEL_TIMEOUT_S), and a cold worker's first call took more than 1 s."""
    script = (
        "import asyncio, ssl, sys, django; django.setup()\n"
        "from agents_app.llm.registry import PROVIDER_TYPES, ProviderConfig\n"
        "from mas_core.llm_types import Message, ModelRequest, ProviderError\n"
        "contexts = []\n"
        "built = ssl.SSLContext.load_verify_locations\n"
        "ssl.SSLContext.load_verify_locations = lambda *a, **k: (contexts.append(1), built(*a, **k))[1]\n"
        "for kind in ('openai', 'anthropic', 'gemini'):\n"
        "    provider = PROVIDER_TYPES[kind](ProviderConfig(slug=kind, type=kind,\n"
        "                                                   base_url='http://10.255.255.1:9/v1'), 'key')\n"
        "    before, contexts[:] = set(sys.modules), []\n"
        "    async def first():\n"
        "        try:\n"
        "            await provider.complete(ModelRequest(model='m', messages=[Message(role='user', content='hi')]))\n"
        "        except ProviderError as error:\n"
        "            return error.kind\n"
        "    print(kind, asyncio.run(first()), sorted(set(sys.modules) - before), len(contexts))\n"
    )
    result = in_a_fresh_process(script)
    # 10.255.255.1 is private and not in MAS_PRIVATE_URL_ALLOW: refused when the transport connects, so every
    # part of the call before the network ran.
    assert (result.returncode, result.stdout) == (0, "openai bad_request [] 0\nanthropic bad_request [] 0\n"
                                                     "gemini bad_request [] 0\n"), result.stderr
