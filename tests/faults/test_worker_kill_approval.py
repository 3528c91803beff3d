"""A worker SIGKILLed after a person's decision and before the approved tool ran.

The worker is frozen (SIGSTOP) before the decision, so the decision's resume
reaches no running worker — or reaches the frozen one, which then dies with
it. A second worker resumes the session from its suspension: the person is
not asked again, and the approved tool runs exactly once.
"""

import os
import signal
import time

import pytest

from agents_app.approvals.services import approval_decide
from agents_app.execution.runs import run_start
from agents_app.models import ApprovalRequest, Event, Run, Session, WorkspaceFile
from tests.runs import agent, call, wait_until
from tests.workers import start_worker, stop_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

STALE_S = 3


def test_sigkill_between_the_decision_and_the_tool_runs_the_tool_once_without_asking_again(
        team_a, make_member, monkeypatch):
    from mas_project.celery import app

    queue = f"approval-crash-{os.getpid()}"
    monkeypatch.setitem(app.conf, "task_default_queue", queue)
    agent(team_a, "Coder", "tools:\n- code_exec\napproval:\n- code_exec\n")
    operator = make_member(team_a, "operator")
    script = {"coder": [call("code_exec", language="bash", code="echo ran >> log.txt"),
                        {"expect": '"exit_code": 0', "text": "Logged."}]}
    env = {"MAS_SESSION_STALE_S": str(STALE_S), "MAS_REAP_INTERVAL_S": "1"}
    first = start_worker(f"approval-crash-a-{os.getpid()}", queue=queue, env=env)
    try:
        run = run_start(team=team_a, agent="coder", input="Log it", script=script)
        wait_until(lambda: Session.objects.filter(run=run, status="suspended").exists(), 30, "the session to suspend")
        request = ApprovalRequest.objects.get(run=run, status="pending")
        os.killpg(first.process.pid, signal.SIGSTOP)
        approval_decide(team=team_a, request_id=request.id, user=operator, decision="approve")
        time.sleep(0.5)
        os.killpg(first.process.pid, signal.SIGKILL)
        first.process.wait(10)
    finally:
        stop_worker(first)
    assert Run.objects.get(pk=run.pk).status == "running"  # decided: no longer waiting for a person
    assert not WorkspaceFile.objects.filter(run=run).exists()  # the tool has not run
    time.sleep(STALE_S + 0.5)

    second = start_worker(f"approval-crash-b-{os.getpid()}", queue=queue, env=env)
    try:
        run = wait_until(lambda: Run.objects.filter(pk=run.pk, status__in=["succeeded", "failed"]).first(), 60,
                         "the run to finish")
    finally:
        stop_worker(second)

    assert (run.status, run.result) == ("succeeded", "Logged.")
    assert WorkspaceFile.objects.get(run=run, path="log.txt").content == "ran\n"  # the tool ran once
    events = list(Event.objects.filter(run=run).order_by("seq"))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.type for e in events].count("approval_requested") == 1  # not asked again
    assert [e.type for e in events].count("approval_decided") == 1
    assert [e.data["name"] for e in events if e.type == "tool_result"] == ["code_exec"]
    assert [(s.attempt, s.status) for s in Session.objects.filter(run=run)] == [(1, "ok")]
    request.refresh_from_db()
    assert (request.status, request.decided_by, request.consumed_at is not None) == ("approved", operator, True)
