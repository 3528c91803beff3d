from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AgentsAppConfig(AppConfig):
    name = "agents_app"
    verbose_name = "Agents and teams"

    def ready(self) -> None:
        from agents_app import needs_you  # noqa: F401  (the dashboard's first block)
        from agents_app.kinds import AGENT, GUARDRAIL, PROVIDER, REMOTE_AGENT, SKILL
        from mas_core.definitions.kinds import register_kind
        from mas_core.teams import role_groups_sync

        for kind in (PROVIDER, SKILL, GUARDRAIL, AGENT, REMOTE_AGENT):
            register_kind(kind)

        # After every app's migrations: the groups need the permissions of
        # tools_app and workflows_app models too. Safe to run repeatedly.
        post_migrate.connect(role_groups_sync, dispatch_uid="mas_role_groups")
