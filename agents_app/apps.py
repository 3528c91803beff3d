from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AgentsAppConfig(AppConfig):
    name = "agents_app"
    verbose_name = "Agents and teams"

    def ready(self) -> None:
        from agents_app.services import role_groups_sync

        post_migrate.connect(role_groups_sync, sender=self, dispatch_uid="mas_role_groups")
