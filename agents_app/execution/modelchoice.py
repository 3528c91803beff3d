"""Which model a session calls: a reference (``provider:model`` or a tier) resolved against the team's providers.

``model_choice`` decides without building a provider — escalation uses it to name the model of a rung
before the next attempt starts — and ``model_resolve`` builds what the session calls. A run with a
script plays it through the scripted provider, billed as the model the reference names (a tier: the
team's first scripted model of that tier); with no usable provider the demo recording stands in.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

from django.db import connection

from agents_app.llm.pricing import Prices
from agents_app.llm.registry import ProviderConfig, Resolved, build_provider, provider_config, resolve_model
from agents_app.llm.scripted import MemoryCursor, ScriptedProvider
from agents_app.llm.windows import ModelLimits, model_limits
from agents_app.models import ModelProvider, Run, Team
from mas_core.llm_types import ProviderError
from mas_core.specs import TIERS

DEMO_RECORDING = Path(__file__).resolve().parent.parent / "llm" / "demo_recording.json"
NO_PROVIDER_NOTICE = (
    "No model provider is configured for this team (or its API key is not set): "
    "this run replays the bundled demo recording with the scripted provider."
)


@dataclass(frozen=True)
class Choice:
    provider_slug: str
    model: str
    tier: str | None  # the model row's (for a script or the demo recording: the tier it stands in for)
    prices: Prices
    source: str  # "script" | "demo" | "provider"
    config: ProviderConfig | None = None
    limits: ModelLimits = ModelLimits()

    @property
    def ref(self) -> str:
        return f"{self.provider_slug}:{self.model}"


def model_choice(*, run: Run, ref: str, tier: str, agent: str = "") -> Choice:
    """The model ``ref`` names for ``agent`` in ``run``; ``tier`` is the session's (what the demo recording
    stands in for).

    In an eval run the script plays only the agents it names (the fixtures of the case): the others are
    the agents under test and call the team's models — only when the dataset allows real models
    (``Run.eval_real_models``); otherwise such a call is refused (the bundled demo recording, which is no
    real model, still stands in when the team has none).
    Raises :class:`~mas_core.llm_types.ProviderError` saying what to configure when nothing serves it.
    """
    if run.script is not None and not (run.is_eval and agent and agent not in run.script and "*" not in run.script):
        return _scripted(run, ref)
    usable = usable_providers(team_id=run.team_id, only=run.provider)
    if not usable:
        return Choice("scripted", "demo-recording", tier, Prices(), "demo")
    if run.is_eval and not run.eval_real_models:
        raise ProviderError("bad_request", real_models_refusal(agent=agent, providers=[p.slug for p in usable]))
    config, model = resolve_model(ref, [provider_config(p) for p in usable])
    return Choice(config.slug, model.name, model.tier, model.prices, "provider", config, model.limits)


def usable_providers(*, team_id: int, only: str = "") -> list[ModelProvider]:
    """The team's providers that call a real model (not scripted; with a URL or their key set), in order."""
    providers = list(ModelProvider.objects.filter(team_id=team_id).prefetch_related("models"))
    if only:
        providers = [p for p in providers if p.slug == only]
    return [p for p in providers if p.provider_type != "scripted" and (p.base_url or os.environ.get(p.api_key_env))]


def real_models_refusal(*, agent: str, providers: list[str], case: str = "") -> str:
    """Why an eval case may not call the team's models for ``agent``, and what to do about it."""
    where = f"case {case!r} does not script" if case else "the eval case does not script"
    return (f"{where} agent {agent or '?'!r}, so it would call the team's real models "
            f"(provider{'s' if len(providers) > 1 else ''} {', '.join(providers)}); an eval calls none unless "
            f"its dataset says allow_real_models: true — script the agent's turns in the case, or allow it")


# A model the team names ``<provider>:<model>`` (at most one row: both names are unique), as a script plays it.
_NAMED_MODEL_SQL = """SELECT m.tier, m.input_price, m.output_price, m.context_window, m.max_output_tokens
FROM agents_app_providermodel m JOIN agents_app_modelprovider p ON p.id = m.provider_id
WHERE p.team_id = %s AND p.slug = %s AND m.name = %s"""
# The team's first scripted model of a tier (by provider, then name): what a script plays for that tier.
_SCRIPTED_TIER_SQL = """SELECT m.name, m.input_price, m.output_price, m.context_window, m.max_output_tokens
FROM agents_app_providermodel m JOIN agents_app_modelprovider p ON p.id = m.provider_id
WHERE p.team_id = %s AND p.provider_type = 'scripted' AND m.tier = %s ORDER BY p.slug, m.name LIMIT 1"""


def _scripted(run: Run, ref: str) -> Choice:
    if ref not in TIERS:  # a model, named: the script plays it, billed at its row's prices
        slug, _, name = ref.partition(":")
        row = _row(_NAMED_MODEL_SQL, [run.team_id, slug, name])
        if row is None:
            return Choice(slug, name, None, Prices(), "script", limits=model_limits(name))
        return Choice(slug, name, row[0] or None, Prices.of(row[1], row[2]), "script",
                      limits=model_limits(name, context_window=row[3], max_output_tokens=row[4]))
    row = _row(_SCRIPTED_TIER_SQL, [run.team_id, ref])
    if row is None:
        return Choice("scripted", "scripted", ref, Prices(), "script")
    return Choice("scripted", row[0], ref, Prices.of(row[1], row[2]), "script",
                  limits=model_limits(row[0], context_window=row[3], max_output_tokens=row[4]))


def _row(sql: str, params: list) -> tuple | None:
    # Raw SQL: every session of a scripted run (tests, benchmarks, evals) reads its model here.
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


@functools.cache
def _demo_recording() -> dict:
    """The bundled recording, read once per process (it was read and parsed at every session that used it)."""
    return json.loads(DEMO_RECORDING.read_text())


def model_resolve(*, run: Run, ref: str, tier: str, cursor: MemoryCursor, agent: str = "") -> tuple[Resolved, str]:
    """The provider a session of ``agent`` calls, and a notice when the demo recording stands in."""
    choice = model_choice(run=run, ref=ref, tier=tier, agent=agent)
    if choice.source == "script":
        provider = ScriptedProvider(run.script, cursor)
    elif choice.source == "demo":
        provider = ScriptedProvider(_demo_recording(), cursor, replay=True)
    else:  # the team's slug: its provider key must be one the operator declared for it (MAS_TEAM_SECRETS)
        team = Team.objects.filter(pk=run.team_id).values_list("slug", flat=True).first() or ""
        provider = build_provider(choice.config, team=team, cursor=cursor)
    notice = NO_PROVIDER_NOTICE if choice.source == "demo" else ""
    return Resolved(provider, choice.provider_slug, choice.model, choice.tier, choice.prices, choice.limits), notice
