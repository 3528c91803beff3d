"""From run to test case: a finished run becomes a case of an eval dataset.

The case holds the run's input (its task, or its workflow's inputs), its final result as the reference
(checked by an ``exact`` check, with its status), and the recorded turns of the *other* agents as its
script — so the agent under test meets the same colleagues, and only it calls a model.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from mas_core.definitions.markdown import DefinitionError
from mas_core.definitions.services import SaveResult, definition_save, definition_slug, definition_validate
from agents_app.execution.replay import run_script_export
from agents_app.models import Run, Team
from agents_app.models.runs import FINISHED_RUN_STATUSES
from evals_app.kinds import EVAL
from evals_app.models import EvalDataset
from evals_app.services import EvalError
from evals_app.specs import MAX_CASES


def _workflow_inputs(run: Run) -> dict[str, str]:
    start = run.events.filter(type="workflow_start").values_list("data", flat=True).first() or {}
    return {str(name): str(value) for name, value in (start.get("inputs") or {}).items()}


def case_from_run(*, run: Run, case_id: str, under_test: str) -> dict[str, Any]:
    """The case a finished ``run`` makes, as dataset data; ``under_test``: the agent left out of the script."""
    if run.status not in FINISHED_RUN_STATUSES:
        raise EvalError(f"the run is still {run.status}: save it as a case once it has finished",
                        conflict=True)
    script = {agent: turns for agent, turns in run_script_export(run=run).items() if agent != under_test}
    case: dict[str, Any] = {"id": case_id}
    if run.workflow:
        case["inputs"] = _workflow_inputs(run)
    else:
        case["task"] = run.input
    if script:
        case["script"] = script
    case["reference"] = run.result
    case["checks"] = [{"type": "status", "equals": run.status}, {"type": "exact"}]
    return case


@transaction.atomic
def eval_case_save(*, team: Team, run: Run, dataset: str, case_id: str = "", user=None) -> SaveResult:
    """Add ``run`` as a case of the team's dataset ``dataset`` (created for the run's agent if it does not exist)."""
    slug = definition_slug(dataset)
    row = EvalDataset.objects.select_for_update().filter(team=team, slug=slug).first()
    if row is not None:
        data = {**row.extra, **row.spec}
        body = row.body
    else:
        data = {"name": dataset, **({"workflow": run.workflow} if run.workflow else {"agent": run.agent}),
                "cases": []}
        body = ""
    if data.get("agent") and data["agent"] != run.agent:
        raise EvalError(f"dataset {slug!r} tests agent {data['agent']!r}; this run's agent is "
                        f"{run.agent or 'none (a workflow run)'}", field="dataset")
    if data.get("workflow") and data["workflow"] != run.workflow:
        raise EvalError(f"dataset {slug!r} tests workflow {data['workflow']!r}; this run is not one of it",
                        field="dataset")
    cases = list(data.get("cases") or [])
    if len(cases) >= MAX_CASES:
        raise EvalError(f"dataset {slug!r} holds {MAX_CASES} cases, the most a dataset may hold",
                        field="dataset")
    case_id = case_id or f"run-{str(run.id)[:8]}"
    if any(case.get("id") == case_id for case in cases):
        raise EvalError(f"dataset {slug!r} already has a case {case_id!r}", conflict=True)
    cases.append(case_from_run(run=run, case_id=case_id, under_test=run.agent))
    try:
        parsed = definition_validate(kind=EVAL, team=team, data={**data, "cases": cases}, body=body)
    except DefinitionError as error:
        raise EvalError(f"the run does not make a valid case: {error}", field="dataset") from None
    return definition_save(kind=EVAL, team=team, parsed=parsed, slug=slug, author=user, source="run")
