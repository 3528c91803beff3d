"""From provider rows (or their specs) to a ready provider, model name and prices.

``provider_for`` is the one entry point: given a model reference —
``"provider:model"`` or a tier name — and the team's providers, it returns
the provider object to call, the model name to send and the prices to bill.
It reads rows duck-typed (a ``ModelProvider`` with its ``models``, or a spec
dict as in ``ProviderSpec``) so the kernel can pass either and tests need no DB.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mas_core.specs import TIERS
from mas_core.netpolicy import private_url_refusal
from mas_core.secrets import env_refusal

from .pricing import Prices
from .scripted import ScriptCursor, ScriptedProvider
from mas_core.llm_types import Provider, ProviderError
from .windows import ModelLimits, model_limits


@dataclass(frozen=True)
class ModelInfo:
    name: str
    tier: str | None
    prices: Prices
    limits: ModelLimits = ModelLimits()


@dataclass(frozen=True)
class ProviderConfig:
    slug: str
    type: str
    base_url: str | None = None
    api_key_env: str | None = None
    models: tuple[ModelInfo, ...] = ()

    def model(self, name: str) -> ModelInfo | None:
        return next((model for model in self.models if model.name == name), None)


@dataclass
class Resolved:
    """What a session needs for one model call."""

    provider: Provider
    provider_slug: str
    model: str
    tier: str | None
    prices: Prices = field(default_factory=Prices)
    limits: ModelLimits = field(default_factory=ModelLimits)  # context window, max output tokens


# type → factory(config, api_key). Scripted providers are built apart: they
# take a script and a cursor, not a key.
HttpFactory = Callable[[ProviderConfig, str], Provider]
PROVIDER_TYPES: dict[str, HttpFactory] = {}


def register_provider_type(type_name: str, factory: HttpFactory) -> None:
    if not type_name or type_name in PROVIDER_TYPES or type_name == "scripted":
        raise ValueError(f"provider type {type_name!r} is empty or already registered")
    PROVIDER_TYPES[type_name] = factory


# Each factory imports its provider's module, and so its SDK, at the first provider it builds: the three SDKs cost a
# process ~5 s to import, which every web and worker process would pay at start for providers most teams never use.
def _openai(config: ProviderConfig, key: str) -> Provider:
    from .openai_provider import OpenAIProvider

    return OpenAIProvider(api_key=key, base_url=config.base_url)


def _anthropic(config: ProviderConfig, key: str) -> Provider:
    from .anthropic_provider import AnthropicProvider

    return AnthropicProvider(api_key=key, base_url=config.base_url)


def _gemini(config: ProviderConfig, key: str) -> Provider:
    from .gemini_provider import GeminiProvider

    return GeminiProvider(api_key=key, base_url=config.base_url)


register_provider_type("openai", _openai)
register_provider_type("anthropic", _anthropic)
register_provider_type("gemini", _gemini)


def provider_config(source: Any) -> ProviderConfig:
    """Read a ``ModelProvider`` row, a ``ProviderSpec`` or a spec dict."""
    if isinstance(source, ProviderConfig):
        return source
    if isinstance(source, Mapping):
        get = source.get
        slug = get("slug") or get("name") or ""
        type_name = get("type") or get("provider_type") or ""
        models_source: Iterable[Any] = get("models") or []
    else:
        def get(key: str, default: Any = None) -> Any:
            return getattr(source, key, default)
        slug = get("slug") or get("name") or ""
        type_name = get("provider_type") or get("type") or ""
        models_source = get("models") or []
        if hasattr(models_source, "all"):  # a related manager
            models_source = models_source.all()
    models = []
    for model in models_source:
        read = model.get if isinstance(model, Mapping) else (lambda key, m=model: getattr(m, key, None))
        models.append(ModelInfo(name=read("name"), tier=read("tier") or None,
                                prices=Prices.of(read("input_price"), read("output_price")),
                                limits=model_limits(read("name") or "", context_window=read("context_window"),
                                                    max_output_tokens=read("max_output_tokens"))))
    return ProviderConfig(slug=str(slug), type=str(type_name), base_url=get("base_url") or None,
                          api_key_env=get("api_key_env") or None, models=tuple(models))


_cache: dict[tuple[str, str | None, str], Provider] = {}


def build_provider(config: ProviderConfig, *, team: str = "", script: Mapping[str, Any] | None = None,
                   cursor: ScriptCursor | None = None, environ: Mapping[str, str] | None = None) -> Provider:
    """The provider object for one config of team ``team`` (a slug); HTTP providers are shared per
    (type, URL, key).

    The key variable and the base_url are checked again here, as the operator's
    policy stands now (MAS_TEAM_SECRETS, MAS_PRIVATE_URL_ALLOW): a row saved
    before it changed is refused, with the reason, before anything is sent.
    """
    if config.type == "scripted":
        if script is None:
            raise ProviderError("bad_request", f"provider {config.slug} is scripted but no script was given")
        return ScriptedProvider(script, cursor)
    factory = PROVIDER_TYPES.get(config.type)
    if factory is None:
        raise ProviderError("bad_request", f"provider {config.slug} has unknown type {config.type!r}; "
                            f"known: scripted, {', '.join(PROVIDER_TYPES)}")
    if config.base_url:
        refusal = private_url_refusal(config.base_url)
        if refusal:
            raise ProviderError("bad_request", f"provider {config.slug}: base_url {refusal}")
    key = api_key(config, environ if environ is not None else os.environ, team=team)
    cache_key = (config.type, config.base_url, key)
    if cache_key not in _cache:
        _cache[cache_key] = factory(config, key)
        _cache[cache_key].secrets = (key,)  # redacted from its error messages
    return _cache[cache_key]


def api_key(config: ProviderConfig, environ: Mapping[str, str], *, team: str = "") -> str:
    if not config.api_key_env:
        # Local OpenAI-compatible servers (Ollama, llama.cpp) take any key.
        if config.type == "openai" and config.base_url:
            return "not-needed"
        raise ProviderError("auth", f"provider {config.slug} names no api_key_env to read its API key from")
    refusal = env_refusal(config.api_key_env, team=team)
    if refusal:  # a row saved before the operator changed MAS_TEAM_SECRETS, or written around the services
        raise ProviderError("auth", f"provider {config.slug}: api_key_env {refusal}")
    value = environ.get(config.api_key_env, "").strip()
    if not value:
        raise ProviderError("auth", f"environment variable {config.api_key_env} is not set "
                            f"(API key of provider {config.slug})")
    return value


def resolve_model(ref: str, configs: list[ProviderConfig]) -> tuple[ProviderConfig, ModelInfo]:
    """``provider:model`` or a tier → the provider config and model (first match wins for tiers)."""
    if ref in TIERS:
        for config in configs:
            for model in config.models:
                if model.tier == ref:
                    return config, model
        raise ProviderError("bad_request", f"no model of tier {ref} is configured; "
                            "give a model a tier in a provider definition")
    slug, sep, name = ref.partition(":")
    if not sep or not slug or not name:
        raise ProviderError("bad_request", f"model {ref!r} is neither provider:model nor a tier ({', '.join(TIERS)})")
    config = next((config for config in configs if config.slug == slug), None)
    if config is None:
        known = ", ".join(config.slug for config in configs) or "none"
        raise ProviderError("bad_request", f"unknown provider {slug!r} in model {ref!r} (providers: {known})")
    model = config.model(name)
    if model is None:
        if config.models:
            listed = ", ".join(model.name for model in config.models)
            raise ProviderError("bad_request", f"provider {slug} lists no model {name!r} (models: {listed})")
        model = ModelInfo(name=name, tier=None, prices=Prices(), limits=model_limits(name))  # unlisted: free
    return config, model


def provider_for(ref: str, *, providers: Iterable[Any], team: str = "", script: Mapping[str, Any] | None = None,
                 cursor: ScriptCursor | None = None, environ: Mapping[str, str] | None = None) -> Resolved:
    """Resolve a model reference against the providers of team ``team`` (a slug) and build the provider.

    ``providers``: ``ModelProvider`` rows, ``ProviderSpec`` objects or spec
    dicts, in preference order (the first provider with a model of a tier
    serves that tier). Raises :class:`ProviderError` with a message that says
    what to configure.
    """
    configs = [provider_config(source) for source in providers]
    config, model = resolve_model(ref, configs)
    provider = build_provider(config, team=team, script=script, cursor=cursor, environ=environ)
    return Resolved(provider=provider, provider_slug=config.slug, model=model.name, tier=model.tier,
                    prices=model.prices, limits=model.limits)
