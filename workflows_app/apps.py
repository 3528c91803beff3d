from django.apps import AppConfig


class WorkflowsAppConfig(AppConfig):
    name = "workflows_app"
    verbose_name = "Workflows"

    def ready(self) -> None:
        from agents_app.execution.hooks import run_hooks_set
        from mas_core.definitions.kinds import register_kind
        from mas_core.hooks import channel_published_connect
        from workflows_app import services
        from workflows_app.forks import workflow_fork
        from workflows_app.kinds import WORKFLOW
        from workflows_app.triggers import channel_message_published

        register_kind(WORKFLOW)
        # The layers below know no workflow: a run's end, cancellation and settled steps reach the engine
        # through agents_app's run hooks, and a channel message through the foundation's listeners.
        run_hooks_set(run_finish=services.workflow_finish, run_cancelled=services.workflow_cancelled,
                      activation_settled=services.workflow_activation_settled, run_steps=services.workflow_steps,
                      run_graph=services.workflow_graph, run_fork=workflow_fork,
                      workflow_choices=services.workflow_start_choices,
                      workflows_exposed=services.workflows_exposed,
                      workflow_start=services.workflow_start_by_hand)
        channel_published_connect(channel_message_published)
