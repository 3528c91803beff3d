"""agents_app's definition kinds: model providers, skills, guardrails, agents and remote agents (registered in
``AgentsAppConfig.ready``)."""

from __future__ import annotations

from agents_app.specs import AgentSpec, GuardrailSpec, ProviderSpec, RemoteAgentSpec, SkillSpec
from mas_core.definitions.kinds import Kind


def provider_models_sync(row, parsed) -> None:
    """A provider's model rows follow its spec's ``models`` list."""
    from agents_app.models import ProviderModel

    ProviderModel.objects.filter(provider=row).delete()
    ProviderModel.objects.bulk_create(
        ProviderModel(
            provider=row,
            name=model.name,
            tier=model.tier or "",
            input_price=model.input_price,
            output_price=model.output_price,
            context_window=model.context_window,
            max_output_tokens=model.max_output_tokens,
        )
        for model in parsed.spec.models
    )


PROVIDER = Kind("provider", "Model provider", "agents_app.ModelProvider", ProviderSpec, "providers", order=10,
                after_save=provider_models_sync)
SKILL = Kind("skill", "Skill", "agents_app.Skill", SkillSpec, "skills", keeps_unknown_keys=True,
             directory_per_item=True, order=40)
# Before the agents (and the workflow steps) that name them.
GUARDRAIL = Kind("guardrail", "Guardrail", "agents_app.Guardrail", GuardrailSpec, "guardrails", order=45)
AGENT = Kind("agent", "Agent", "agents_app.Agent", AgentSpec, "agents", keeps_unknown_keys=True, order=50)
# After the agents, whose names they may not take; before the workflows whose steps name them.
REMOTE_AGENT = Kind("remote_agent", "Remote agent", "agents_app.RemoteAgent", RemoteAgentSpec, "remote_agents",
                    order=55)
