"""What a run tells the layer above it, without importing it.

agents_app runs agents; workflows_app, above it, runs workflows of them. A
run's end, its cancellation and a workflow step's settling must reach the
workflow engine, and the run pages show a workflow's steps. workflows_app
fills these slots in its ``AppConfig.ready``; until then (or with no
workflows at all) they do nothing, and every run is a plain agent run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents_app.execution.errors import RunError


def _not_a_workflow(*args: Any, **kwargs: Any) -> None:
    return None


def _no_workflows(*args: Any, **kwargs: Any) -> list[Any]:
    return []


def _no_workflow_start(*args: Any, **kwargs: Any) -> Any:
    raise RunError("workflows cannot be started here: the workflows app is not installed")


@dataclass
class RunHooks:
    # Nothing is left to run (the run is locked): True when the hook settled the run's outcome itself.
    run_finish: Callable[..., bool | None] = _not_a_workflow
    # The run was cancelled (the run is locked).
    run_cancelled: Callable[..., None] = _not_a_workflow
    # A workflow's step or plan activation settled (the run is locked): keyword arguments as
    # workflows_app.services.workflow_activation_settled takes them.
    activation_settled: Callable[..., None] = _not_a_workflow
    # Per step of a workflow run, for the API's run detail; None for agent runs.
    run_steps: Callable[..., list[dict[str, Any]] | None] = _not_a_workflow
    # The steps and dependencies a run executes, for the monitor's graph; None for agent runs.
    run_graph: Callable[..., dict[str, Any] | None] = _not_a_workflow
    # A fork of a workflow run (both runs locked, the fork saved with its run_start): rebuild the workflow's
    # state as of the fork point, resume its steps in progress and queue its next steps; keyword arguments
    # parent, fork, seq, base (the fork's run_start seq) and edit (None, or the tool event and its new result),
    # as agents_app.execution.forks.sessions_restore takes them. Returns the scripted provider's positions for
    # the fork; None for a run that is no workflow's (or no workflow app).
    run_fork: Callable[..., dict[str, int] | None] = _not_a_workflow
    # The team's workflows a person may start, for the monitor's start form (keyword argument team): a list of
    # agents_app.starts.StartChoice, each with the inputs the workflow declares.
    workflow_choices: Callable[..., list[Any]] = _no_workflows
    # Start a run of the team's workflow (keyword arguments team, workflow (its slug), inputs, user, and trace:
    # a door's mas_core.telemetry.RunTrace or None), as POST /api/workflows/{slug}/runs does; raises
    # agents_app.execution.errors.RunError when it cannot.
    workflow_start: Callable[..., Any] = _no_workflow_start
    # The team's workflows its tokens may call through the doors (keyword argument team): (slug, when made in
    # seconds, the inputs it declares) each.
    workflows_exposed: Callable[..., list[Any]] = _no_workflows


RUN_HOOKS = RunHooks()


def run_hooks_set(**hooks: Callable[..., Any]) -> None:
    """Fill the named slots (from an ``AppConfig.ready``); an unknown name is refused."""
    for name, hook in hooks.items():
        if not hasattr(RUN_HOOKS, name):
            raise TypeError(f"no run hook named {name!r}")
        setattr(RUN_HOOKS, name, hook)
