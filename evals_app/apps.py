from django.apps import AppConfig


class EvalsAppConfig(AppConfig):
    name = "evals_app"
    verbose_name = "Evals"

    def ready(self) -> None:
        from mas_core.definitions.kinds import register_kind
        from evals_app.kinds import EVAL

        # The definitions framework knows no app above it: datasets join its kinds here (markdown mirror,
        # versions, sync), after workflows, since a dataset names the agent or workflow it tests.
        register_kind(EVAL)
