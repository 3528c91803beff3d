"""The demo's second scenario (`make demo` → `manage.py demo_scenario`) on a real worker, as a person takes part.

The launch lead asks a question, delegates to two specialists that run at the same time, writes its plan
once a person approves the write, and stores a memory; with no model provider every turn is the bundled
demo recording, and says so. Decisions go through the API, as the dashboard's and the monitor's do.
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from agents_app.execution.modelchoice import DEMO_RECORDING, NO_PROVIDER_NOTICE
from agents_app.management.commands.demo_scenario import AGENT, TASK
from agents_app.models import ApprovalRequest, Run, Session, Team, WorkspaceFile
from memory_app.models import Memory
from tests.runs import events, finish, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker,
              pytest.mark.usefixtures("demo_secrets")]

LABEL = "*Recorded answer (MAS demo recording, no model called).*"


def scenario(*args: str) -> str:
    out = StringIO()
    call_command("demo_scenario", "--base-url", "http://127.0.0.1:8000", *args, stdout=out)
    return out.getvalue()


def asked(run, kind: str) -> ApprovalRequest:
    """The run's one pending request of ``kind``, once its session has suspended for it."""
    return wait_until(lambda: Session.objects.filter(run=run, status="suspended").exists()
                      and ApprovalRequest.objects.filter(run=run, status="pending", kind=kind).first(),
                      60, f"the run to wait for a person's {kind}")


def test_the_launch_scenario_asks_delegates_in_parallel_waits_for_approval_and_remembers(
        celery_worker_process, api_for):
    call_command("setup_demo", stdout=StringIO())
    team = Team.objects.get(slug="demo")

    out = scenario()

    run = Run.objects.get(team=team, agent=AGENT)
    assert (run.input, run.script) == (TASK, None)
    assert out == (f"The launch scenario started: run {run.id} of agent {AGENT} in team demo.\n"
                   "  It asks you a question, then waits for your approval of its plan. Answer both under\n"
                   f"  \"Needs you\" on the dashboard http://127.0.0.1:8000/admin/ or on its monitor page "
                   f"http://127.0.0.1:8000/runs/{run.id}/\n")
    question = asked(run, "question")
    assert (question.question, question.choices) == (
        "Who is the launch note for?", ["Engineers evaluating MAS", "Managers deciding on MAS"])
    assert Run.objects.get(pk=run.pk).status == "waiting"

    # Again while it waits: nothing new starts.
    assert scenario().startswith(f"The launch scenario's run {run.id} is still waiting: nothing started.\n")
    assert Run.objects.filter(team=team).count() == 1

    operator = api_for(team, "operator")
    response = operator.post(f"/api/approvals/{question.id}",
                             {"decision": "answer", "answer": "Engineers evaluating MAS"})
    assert response.status_code == 200, response.content

    approval = asked(run, "approval")
    assert (approval.tool, approval.arguments["path"]) == ("vfs_write", "launch-plan.md")
    # The two specialists ran at the same time: each started before either ended.
    sessions = {(e.type, e.agent) for e in events(run) if e.type in {"session_start", "session_end"}}
    order = [(e.type, e.agent) for e in events(run) if e.type in {"session_start", "session_end"}
             and e.agent in {"market-analyst", "risk-analyst"}]
    assert sorted(order[:2]) == [("session_start", "market-analyst"), ("session_start", "risk-analyst")], order
    assert sorted(order[2:]) == [("session_end", "market-analyst"), ("session_end", "risk-analyst")], order
    assert ("session_start", AGENT) in sessions
    assert not WorkspaceFile.objects.filter(run=run, path="launch-plan.md").exists()  # not before the approval

    response = operator.post(f"/api/approvals/{approval.id}", {"decision": "approve"})
    assert response.status_code == 200, response.content
    run = finish(run, timeout=120)

    assert run.status == "succeeded", run.error
    assert run.notice == NO_PROVIDER_NOTICE
    recording = json.loads(DEMO_RECORDING.read_text())
    assert run.result == recording[AGENT][-1]["text"]
    assert set(WorkspaceFile.objects.filter(run=run).values_list("path", "author")) == {
        ("notes/market.md", "market-analyst"), ("notes/risks.md", "risk-analyst"),
        ("launch-plan.md", AGENT)}
    [memory] = Memory.objects.filter(team=team)
    assert (memory.agent, memory.type, memory.tags, memory.run_id) == (AGENT, "procedure", ["launch"], run.id)
    # Every answer the run shows is labelled as a recording.
    texts = [e.data["text"] for e in events(run, "llm_response")]
    assert len(texts) == 9 and all(text.startswith(LABEL) for text in texts), texts
    assert scenario().startswith(f"The launch scenario started: run ")  # a finished scenario is started anew
    assert Run.objects.filter(team=team, agent=AGENT).count() == 2
