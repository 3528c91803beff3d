"""People in the loop on a real worker: approvals, edits, rejections, questions, deadlines, concurrent decisions.

Nothing here stands in for the approval services: decisions go through the
API (or the service the API calls), sessions suspend and resume on the
worker, and the scripted provider's ``expect`` proves what the model read.
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from agents_app.approvals.services import approvals_expire
from agents_app.execution.runs import run_cancel, run_start
from agents_app.models import Activation, ApprovalRequest, Run, Session, WorkspaceFile
from tests.runs import agent, call, events, finish, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

CODER = "tools:\n- code_exec\n- vfs_read\napproval:\n- code_exec\n"


def pending(run, timeout: float = 30) -> ApprovalRequest:
    """The run's one pending request, once its session has suspended (holding nothing)."""
    wait_until(lambda: Session.objects.filter(run=run, status="suspended").exists(), timeout,
               "the session to suspend for a person")
    return ApprovalRequest.objects.get(run=run, status="pending")


def code_call(code: str) -> dict:
    return call("code_exec", language="python", code=code)


def test_code_exec_waits_for_approval_and_runs_the_edited_code_once(team_a, celery_worker_process, api_for):
    agent(team_a, "Coder", CODER)
    script = {"coder": [code_call("open('out.txt', 'a').write('original\\n')"),
                        {"expect": '"exit_code": 0', "text": "Ran it."}]}
    run = run_start(team=team_a, agent="coder", input="Write a file", script=script)
    request = pending(run)
    assert Run.objects.get(pk=run.pk).status == "waiting"
    # No worker holds the run while it waits: its session and activation are suspended.
    # One word per state: the run waits for a person; its activation and session are suspended.
    assert (Session.objects.get(run=run).status, Activation.objects.get(run=run).status) == ("suspended", "suspended")
    [asked] = events(run, "approval_requested")
    assert asked.agent == "coder"
    assert asked.data == {
        "request": str(request.id), "kind": "approval", "agent": "coder",
        "call": {"id": "tc-1", "name": "code_exec"},
        "arguments": {"language": "python", "code": "open('out.txt', 'a').write('original\\n')"},
        "reason": "the agent policy requires approval for code_exec",
        "deadline": request.deadline.isoformat(), "default": "reject"}
    assert [e.data["status"] for e in events(run, "run_status")] == ["waiting"]
    assert events(run, "tool_result") == []

    operator = api_for(team_a, "operator")
    edited = {"language": "python", "code": "open('out.txt', 'a').write('edited\\n')"}
    response = operator.post(f"/api/approvals/{request.id}", {"decision": "approve", "arguments": edited})
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["status"], body["decided_by"], body["decision"]) == (
        "approved", operator.user.username, {"decision": "approve", "message": "", "arguments": edited})

    run = finish(run)
    assert (run.status, run.result) == ("succeeded", "Ran it."), Session.objects.get(run=run).failure["message"]
    assert WorkspaceFile.objects.get(run=run, path="out.txt").content == "edited\n"  # once, the edited code
    [result] = events(run, "tool_result")
    assert json.loads(result.data["content"])["exit_code"] == 0
    [decided] = events(run, "approval_decided")
    assert (decided.data["by"], decided.data["status"], decided.data["arguments"]) == (
        operator.user.username, "approved", edited)
    assert [e.data["status"] for e in events(run, "run_status")] == ["waiting", "running"]
    assert len(events(run, "approval_requested")) == 1
    request.refresh_from_db()
    assert request.consumed_at is not None
    assert [e.data["resumed"] for e in events(run, "session_start")] == [False, True]


def test_arguments_that_do_not_match_the_tools_schema_are_refused_and_nothing_is_decided(
        team_a, celery_worker_process, api_for):
    agent(team_a, "Coder", CODER)
    run = run_start(team=team_a, agent="coder", input="x",
                    script={"coder": [code_call("print(1)"), {"text": "done"}]})
    request = pending(run)
    operator = api_for(team_a, "operator")
    response = operator.post(f"/api/approvals/{request.id}",
                             {"decision": "approve", "arguments": {"language": "ruby", "code": "puts 1"}})
    assert response.status_code == 422
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["body", "arguments"]
    assert problem["msg"].startswith("arguments do not match the parameters of code_exec: language: 'ruby' is not ")
    request.refresh_from_db()
    assert (request.status, request.decided_by, request.decision) == ("pending", None, {})
    assert events(run, "approval_decided") == []
    assert operator.post(f"/api/approvals/{request.id}", {"decision": "answer", "answer": "yes"}).status_code == 422
    run_cancel(run=run)


def test_a_rejected_calls_message_reaches_the_model_and_the_tool_never_runs(team_a, celery_worker_process, api_for):
    agent(team_a, "Coder", CODER)
    message = "Do not touch the production database; read notes.md instead."
    operator = api_for(team_a, "operator")
    # The model's next turn is only played when what it was sent holds the person's message.
    script = {"coder": [code_call("open('x.txt', 'w').write('no')"),
                        {"expect": [f"code_exec was not run: {operator.user.username} rejected it. "
                                    f"Their message: {message}"], "text": "Understood."}]}
    run = run_start(team=team_a, agent="coder", input="x", script=script)
    request = pending(run)
    response = operator.post(f"/api/approvals/{request.id}", {"decision": "reject", "message": message})
    assert response.status_code == 200
    run = finish(run)
    assert (run.status, run.result) == ("succeeded", "Understood.")
    [result] = events(run, "tool_result")
    assert (result.data["ok"], result.data["error_kind"]) == (False, "rejected")
    assert not WorkspaceFile.objects.filter(run=run).exists()


def test_two_concurrent_decisions_one_wins_the_other_is_a_409(team_a, celery_worker_process, api_for):
    agent(team_a, "Coder", CODER)
    run = run_start(team=team_a, agent="coder", input="x",
                    script={"coder": [code_call("open('n.txt', 'a').write('x')"), {"text": "done"}]})
    request = pending(run)
    first, second = api_for(team_a, "operator"), api_for(team_a, "admin")
    barrier = threading.Barrier(2)
    answers: dict[str, int] = {}

    def decide(client, name):
        try:
            barrier.wait()
            answers[name] = client.post(f"/api/approvals/{request.id}", {"decision": "approve"}).status_code
        finally:
            connection.close()

    threads = [threading.Thread(target=decide, args=(client, name))
               for client, name in ((first, "first"), (second, "second"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers.values()) == [200, 409]
    run = finish(run)
    assert run.status == "succeeded"
    assert WorkspaceFile.objects.get(run=run, path="n.txt").content == "x"  # the tool ran once
    assert len(events(run, "approval_decided")) == 1
    winner = "first" if answers["first"] == 200 else "second"
    request.refresh_from_db()
    assert request.decided_by == {"first": first, "second": second}[winner].user
    again = first.post(f"/api/approvals/{request.id}", {"decision": "reject"})
    assert again.status_code == 409
    assert again.json()["detail"].startswith("this request was already decided: approved by ")


@pytest.mark.parametrize("outcome", ["reject", "approve", "fail"])
def test_a_deadline_applies_its_default_outcome_as_decided_by_the_system(team_a, celery_worker_process, outcome):
    agent(team_a, "Coder", "tools:\n- code_exec\napproval:\n- tool: code_exec\n  deadline_s: 60\n"
                           f"  default: {outcome}\n  reason: Code runs only with a person's consent\n")
    turns = [code_call("open('d.txt', 'w').write('ran')")]
    if outcome == "reject":
        turns.append({"expect": "no one decided before the deadline", "text": "Skipped."})
    elif outcome == "approve":
        turns.append({"expect": '"exit_code": 0', "text": "Ran."})
    run = run_start(team=team_a, agent="coder", input="x", script={"coder": turns}, limits={"max_retries": 0})
    request = pending(run)
    assert (request.reason, request.default_outcome) == ("Code runs only with a person's consent", outcome)
    assert 59 <= (request.deadline - request.created_at).total_seconds() <= 61
    assert approvals_expire() == []  # not yet due
    assert approvals_expire(now=request.deadline + timedelta(seconds=1)) == [str(request.id)]
    run = finish(run)
    request.refresh_from_db()
    assert (request.status, request.decided_by, request.decision["decision"]) == ("expired", None, outcome)
    [decided] = events(run, "approval_decided")
    assert (decided.data["by"], decided.data["status"], decided.data["expired"]) == ("the system", "expired", True)
    files = dict(WorkspaceFile.objects.filter(run=run).values_list("path", "content"))
    if outcome == "reject":
        assert (run.status, run.result, files) == ("succeeded", "Skipped.", {})
    elif outcome == "approve":
        assert (run.status, run.result, files) == ("succeeded", "Ran.", {"d.txt": "ran"})
    else:
        assert (run.status, files) == ("failed", {})
        session = Session.objects.get(run=run)
        assert session.failure["kind"] == "policy_denied"
        assert session.failure["suggested_retry"] is False
        assert session.failure["message"].startswith("no one decided on code_exec before the deadline")
        assert Session.objects.filter(run=run).count() == 1  # not retried


def test_ask_human_pauses_until_a_person_answers_with_one_of_the_choices(team_a, celery_worker_process, api_for):
    agent(team_a, "Planner", "tools:\n- ask_human\n")
    script = {"planner": [call("ask_human", question="Which region should I deploy to?",
                               choices=["eu-west", "us-east"]),
                          {"expect": "us-east", "text": "Deploying to us-east."}]}
    run = run_start(team=team_a, agent="planner", input="Deploy", script=script)
    request = pending(run)
    [asked] = events(run, "human_question")
    assert asked.data == {"request": str(request.id), "kind": "question", "agent": "planner",
                          "question": "Which region should I deploy to?", "choices": ["eu-west", "us-east"],
                          "reason": "the agent asks", "deadline": request.deadline.isoformat(), "default": "reject"}
    assert events(run, "approval_requested") == []
    operator = api_for(team_a, "operator")
    wrong = operator.post(f"/api/approvals/{request.id}", {"decision": "answer", "answer": "ap-south"})
    assert wrong.status_code == 422
    assert wrong.json()["detail"][0]["msg"] == "answer: must be one of the choices: eu-west, us-east"
    assert operator.get("/api/approvals?status=pending").json()[0]["id"] == str(request.id)
    response = operator.post(f"/api/approvals/{request.id}", {"decision": "answer", "answer": "us-east"})
    assert response.status_code == 200
    run = finish(run)
    assert (run.status, run.result) == ("succeeded", "Deploying to us-east.")
    [result] = events(run, "tool_result")
    assert (result.data["name"], result.data["ok"], result.data["content"]) == ("ask_human", True, "us-east")
    assert operator.get("/api/approvals?status=pending").json() == []


def test_a_decision_on_a_run_cancelled_meanwhile_is_refused_clearly(team_a, celery_worker_process, api_for):
    agent(team_a, "Coder", CODER)
    run = run_start(team=team_a, agent="coder", input="x",
                    script={"coder": [code_call("print(1)"), {"text": "never"}]})
    request = pending(run)
    run_cancel(run=run)
    response = api_for(team_a, "operator").post(f"/api/approvals/{request.id}", {"decision": "approve"})
    assert response.status_code == 409
    assert response.json() == {"detail": "the run is cancelled: nothing waits for this decision any more"}
    request.refresh_from_db()
    assert (request.status, request.decided_by) == ("cancelled", None)
    assert finish(run).status == "cancelled"
    assert events(run, "tool_result") == []


def test_a_run_may_add_approvals_never_remove_them_and_the_team_default_covers_every_agent(
        team_a, celery_worker_process):
    agent(team_a, "Reader", "tools:\n- vfs_write\n- vfs_read\n")
    team_a.approval_policy = ["vfs_write"]
    team_a.save(update_fields=["approval_policy"])
    run = run_start(team=team_a, agent="reader", input="x", approvals=["vfs_*"],
                    script={"reader": [call("vfs_write", path="a.md", content="a"), {"text": "done"}]})
    request = pending(run)
    # The agent has no rule of its own; the run's comes before the team's.
    assert request.reason == "the run policy requires approval for tools matching vfs_*"
    assert Run.objects.get(pk=run.pk).approvals == ["vfs_*"]
    run_cancel(run=run)


def test_viewers_see_the_inbox_but_cannot_decide_and_other_teams_see_nothing(
        team_a, team_b, celery_worker_process, api_for):
    agent(team_a, "Coder", CODER)
    run = run_start(team=team_a, agent="coder", input="x",
                    script={"coder": [code_call("print(1)"), {"text": "done"}]})
    request = pending(run)
    viewer, outsider = api_for(team_a, "viewer"), api_for(team_b, "admin")
    [listed] = viewer.get("/api/approvals?status=pending").json()
    assert (listed["id"], listed["run"], listed["run_status"], listed["tool"], listed["arguments"]) == (
        str(request.id), str(run.id), "waiting", "code_exec", {"language": "python", "code": "print(1)"})
    assert viewer.get(f"/api/approvals/{request.id}").json() == listed
    refused = viewer.post(f"/api/approvals/{request.id}", {"decision": "approve"})
    assert refused.status_code == 403
    # Another team's request does not exist for this team, whatever the role.
    assert outsider.get("/api/approvals").json() == []
    assert outsider.get(f"/api/approvals/{request.id}").status_code == 404
    assert outsider.post(f"/api/approvals/{request.id}", {"decision": "approve"}).status_code == 404
    assert outsider.get("/api/approvals/not-a-uuid").status_code == 404
    assert viewer.get("/api/approvals?status=maybe").status_code == 422
    request.refresh_from_db()
    assert (request.status, request.decided_by) == ("pending", None)
    assert events(run, "approval_decided") == []
    team = viewer.get("/api/team").json()
    assert team == {"slug": "alpha", "name": team_a.name, "approval_policy": [], "approval_deadline_s": 86400,
                    "approval_default": "reject", "webhook_url": "", "webhook_secret_set": False,
                    "max_sessions": 500, "session_limit": None, "weight": 1}
    assert viewer.patch("/api/team", {"approval_deadline_s": 60}).status_code == 403
    run_cancel(run=run)


def test_a_workflow_steps_gates_wait_before_it_starts_and_before_its_outputs_are_accepted(
        team_a, celery_worker_process, api_for):
    from workflows_app.kinds import WORKFLOW
    from tests.runs import define
    from workflows_app.services import workflow_run_start

    agent(team_a, "Writer")
    define(team_a, WORKFLOW, "---\nname: Publish\nsteps:\n- id: draft\n  agent: writer\n  prompt: Draft it\n"
                             "  gate: [start, outputs]\n---\n")
    run = workflow_run_start(team=team_a, workflow="publish", inputs={},
                         script={"writer": [{"text": "The draft."}]})
    operator = api_for(team_a, "operator")
    start = pending(run)
    assert (start.kind, start.tool, start.reason) == ("gate", "step start",
                                                      "step draft waits for approval before it starts")
    assert not events(run, "llm_request")  # nothing ran before the gate opened
    assert operator.post(f"/api/approvals/{start.id}", {"decision": "approve"}).status_code == 200
    outputs = wait_until(lambda: ApprovalRequest.objects.filter(run=run, status="pending").first(), 30,
                         "the outputs gate")
    assert (outputs.tool, outputs.arguments) == ("step outputs", {"step": "draft", "result": "The draft.",
                                                                  "outputs": {}})
    assert operator.post(f"/api/approvals/{outputs.id}", {"decision": "reject", "message": "Too short."}
                         ).status_code == 200
    run = finish(run)
    assert run.status == "failed"
    session = Session.objects.get(run=run)
    assert (session.status, session.failure["kind"], session.failure["message"]) == (
        "failed", "policy_denied", f"the step may not go on: {operator.user.username} rejected it. "
                                   f"Their message: Too short.")


STEP_POLICY = """---
name: Reviewed
steps:
- id: draft
  agent: writer
  prompt: Draft it
  approval:
  - vfs_write
- id: final
  agent: writer
  depends_on: [draft]
  prompt: Finish it
---
"""


def test_a_workflow_steps_approval_policy_holds_the_tool_calls_made_inside_it_and_its_childrens(
        team_a, celery_worker_process, api_for):
    from workflows_app.kinds import WORKFLOW
    from tests.runs import define
    from workflows_app.services import workflow_run_start

    agent(team_a, "Writer", "tools: [vfs_write, delegate]\n")
    agent(team_a, "Helper", "tools: [vfs_write]\n")
    define(team_a, WORKFLOW, STEP_POLICY)
    # In step draft the writer's write and its helper's wait for a person; in step final (no policy) the same
    # agent's write does not.
    script = {"writer": [call("vfs_write", path="notes.md", content="draft"),
                         call("delegate", agent="helper", task="Copy it"), {"text": "drafted"},
                         call("vfs_write", path="final.md", content="final"), {"text": "finished"}],
              "helper": [call("vfs_write", path="copy.md", content="copy"), {"text": "copied"}]}
    run = workflow_run_start(team=team_a, workflow="reviewed", inputs={}, script=script)
    operator = api_for(team_a, "operator")
    first = pending(run, timeout=60)
    assert (first.agent, first.tool, first.arguments, first.reason) == (
        "writer", "vfs_write", {"path": "notes.md", "content": "draft"},
        "the workflow step policy requires approval for vfs_write")
    assert not WorkspaceFile.objects.filter(run=run).exists()  # not written before the decision
    assert operator.post(f"/api/approvals/{first.id}", {"decision": "approve"}).status_code == 200
    second = wait_until(lambda: ApprovalRequest.objects.filter(run=run, status="pending").first(), 60,
                        "the helper's call to wait")
    assert (second.agent, second.tool, second.arguments) == ("helper", "vfs_write",
                                                             {"path": "copy.md", "content": "copy"})
    assert operator.post(f"/api/approvals/{second.id}", {"decision": "reject", "message": "No copies."}
                         ).status_code == 200
    run = finish(run)
    assert run.status == "succeeded"
    assert [(e.data["step"], e.data["outputs"]) for e in events(run, "step_complete")] == [
        ("draft", {}), ("final", {})]
    rejected = [e.data for e in events(run, "tool_result") if e.agent == "helper"]
    assert [(r["ok"], "No copies." in r["content"]) for r in rejected] == [(False, True)]
    assert dict(WorkspaceFile.objects.filter(run=run).values_list("path", "content")) == {
        "notes.md": "draft", "final.md": "final"}
    assert [(e.agent, e.data["arguments"]["path"]) for e in events(run, "approval_requested")] == [
        ("writer", "notes.md"), ("helper", "copy.md")]  # final.md, written in step final, asked nobody
    assert ApprovalRequest.objects.filter(run=run).count() == 2


def test_a_workflow_steps_approval_entries_are_checked_when_saved(team_a):
    from mas_core.definitions.markdown import DefinitionError
    from workflows_app.kinds import WORKFLOW
    from workflows_app.models import Workflow
    from tests.runs import define

    agent(team_a, "Writer")
    with pytest.raises(DefinitionError) as refused:
        define(team_a, WORKFLOW, STEP_POLICY.replace("  - vfs_write", "  - tool: vfs_write\n    default: maybe"))
    assert str(refused.value) == (
        "<definition>:7: steps.0.approval: entry 1: default: 'maybe' must be one of reject, approve, fail")
    assert not Workflow.objects.exists()


def test_the_teams_mcp_unmarked_default_holds_every_mcp_tool_not_marked_read_only(
        team_a, celery_worker_process, api_for):
    import sys

    team_a.stdio_mcp_allowed = True  # the operator's grant: stdio MCP servers
    team_a.save(update_fields=["stdio_mcp_allowed"])

    from tools_app.kinds import MCP
    from tests.runs import define
    from tests.tools_app.mcp_servers.launch import SERVER
    from tools_app.mcp.services import mcp_server_approve, mcp_server_test
    from tools_app.models import MCPServer

    define(team_a, MCP, f"---\nname: demo\ntransport: stdio\ncommand: {sys.executable}\nargs:\n- {SERVER}\n"
                        "- stdio\ntimeout_s: 15\n---\n")
    row = MCPServer.objects.get(team=team_a, slug="demo")
    assert mcp_server_test(row=row)["ok"] is True
    mcp_server_approve(row=row)
    admin = api_for(team_a, "admin")
    assert admin.patch("/api/team", {"approval_policy": ["mcp_unmarked"]}).json()["approval_policy"] == [
        "mcp_unmarked"]
    agent(team_a, "Lead", "tools: []\nmcp_servers:\n- demo\n")
    script = {"lead": [call("mcp__demo__add", a=2, b=40),  # marked read-only by its server: runs at once
                       call("mcp__demo__hang", seconds=0),
                       {"text": "done"}]}
    run = run_start(team=team_a, agent="lead", input="x", script=script)
    request = pending(run, timeout=60)
    assert (request.tool, request.reason) == (
        "mcp__demo__hang", "the team policy requires approval for every MCP tool not marked read-only")
    assert [(e.data["name"], e.data["content"]) for e in events(run, "tool_result")] == [("mcp__demo__add", "42")]
    assert admin.post(f"/api/approvals/{request.id}", {"decision": "approve"}).status_code == 200
    run = finish(run)
    assert (run.status, run.result) == ("succeeded", "done")
    assert [e.data["name"] for e in events(run, "tool_result")] == ["mcp__demo__add", "mcp__demo__hang"]
    assert [e.data["tool"] for e in events(run, "mcp_tool_call")] == ["add", "hang"]
