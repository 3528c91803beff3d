from django.apps import AppConfig


class EvalsAppConfig(AppConfig):
    name = "evals_app"
    verbose_name = "Evals"

    def ready(self) -> None:
        from agents_app.execution.recovery import sweep_hook_register
        from evals_app.collection import eval_runs_sweep
        from mas_core.definitions.kinds import register_kind
        from evals_app.kinds import EVAL

        # The definitions framework knows no app above it: datasets join its kinds here (markdown mirror,
        # versions, sync), after workflows, since a dataset names the agent or workflow it tests.
        register_kind(EVAL)
        # agents_app's recovery sweep (every worker's, and beat's) restarts eval collections that stopped.
        sweep_hook_register("eval_runs", eval_runs_sweep)
