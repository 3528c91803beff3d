"""People in the loop in a real browser: Chromium approves a tool call and answers a question on the run page.

Runs are started through the API on daphne (scripted provider, a real Celery
worker) and suspend for a person; the page shows the pending call live, its
buttons POST to /api/approvals/<id> with the page's session and CSRF token,
and the run is seen resuming and finishing over the websocket. The scripted
model's ``expect`` proves what reached it. Screenshots go to ``var/artifacts/``.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from agents_app.models import ApprovalRequest, Run, WorkspaceFile
from agents_app.execution.runs import run_cancel
from tests.e2e.test_monitor_browser import ARTIFACTS, asgi_server, chromium, in_thread, sign_in  # noqa: F401
from tests.runs import agent, call, events

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def start(server: str, token: str, agent_slug: str, script: dict) -> str:
    request = urllib.request.Request(
        f"{server}/api/runs", method="POST",
        data=json.dumps({"agent": agent_slug, "input": "Do the job", "script": script}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
        return json.load(response)["id"]


def settle(run_id: str) -> None:
    """A run a failed test left waiting is cancelled here, off Playwright's thread (not by the teardown, on it)."""
    run = Run.objects.get(pk=run_id)
    if run.status not in {"succeeded", "failed", "cancelled"}:
        in_thread(run_cancel, run=run)


def line(page, event_type: str) -> str:
    return page.text_content(f"#events tr[data-type={event_type}] summary")


def test_an_operator_approves_a_pending_call_on_the_monitor_and_watches_the_run_resume(
        team_a, make_member, make_token, celery_worker_process, asgi_server, chromium):  # noqa: F811
    agent(team_a, "Coder", "tools:\n- code_exec\napproval:\n- code_exec\n")
    olga = make_member(team_a, role="operator", username="olga")
    make_member(team_a, role="viewer", username="vic")
    code = "open('out.txt', 'w').write('approved')"
    run_id = start(asgi_server.url, make_token(team_a, olga), "coder", {"coder": [
        call("code_exec", language="python", code=code),
        {"latency_ms": 800, "expect": '"exit_code": 0', "text": "Ran it."}]})

    operator = chromium.new_context(viewport={"width": 1300, "height": 1000})
    viewer = chromium.new_context(viewport={"width": 1300, "height": 1000})
    try:
        page = operator.new_page()
        sign_in(page, asgi_server.url, "olga", f"/runs/{run_id}/")
        card = ".approval[data-kind=approval]"
        page.wait_for_selector(f"{card}[data-status=pending] button.approve", timeout=30_000)
        page.wait_for_selector("#status.waiting", timeout=10_000)
        assert page.text_content(f"{card} code.tool") == "code_exec"
        assert json.loads(page.text_content(f"{card} pre.arguments")) == {"language": "python", "code": code}
        assert page.text_content(f"{card} .why").startswith("the agent policy requires approval for code_exec")
        assert line(page, "approval_requested").startswith(
            'asks to call code_exec {"code":"open(\'out.txt\', \'w\').write(\'approved\')","language":"python"}')
        assert line(page, "run_status") == "run waiting for a person (1 pending)"
        # One word per state: the run is waiting for a person, its agent's session is suspended.
        page.wait_for_selector("#tree g.node[data-agent=coder][data-status=suspended]", timeout=10_000)
        assert line(page, "session_suspended") == "coder suspended: waits for an approval"

        watcher = viewer.new_page()
        sign_in(watcher, asgi_server.url, "vic", f"/runs/{run_id}/")
        watcher.wait_for_selector(f"{card}[data-status=pending] .view-only", timeout=15_000)
        assert watcher.query_selector(f"{card} button") is None  # a viewer sees the request, no button

        # Edited arguments that do not fit the tool are refused with the server's reason; still pending.
        page.click(f"{card} button.edit")
        page.fill(f"{card} textarea.edit-arguments", '{"language": "ruby", "code": "puts 1"}')
        page.click(f"{card} button.approve-edited")
        page.wait_for_selector(f"{card} .error:not([hidden])", timeout=10_000)
        assert page.text_content(f"{card} .error").startswith(
            "arguments do not match the parameters of code_exec: language: 'ruby' is not ")
        assert page.get_attribute(card, "data-status") == "pending"

        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "monitor-approval-pending.png"), full_page=True)
        page.click(f"{card} button.approve")
        page.wait_for_selector(f"{card}[data-status=approved]", timeout=10_000)
        assert page.query_selector(f"{card} button") is None
        assert page.text_content(f"{card} .outcome") == "Approved by olga."
        assert page.is_hidden(f"{card} .error")  # the refusal before is gone with the decision
        # The run resumes live: the tool runs, the model answers, the run ends — on both pages.
        page.wait_for_selector("#events tr[data-type=tool_result]", timeout=30_000)
        page.wait_for_selector("#status.succeeded", timeout=30_000)
        assert page.text_content("#result") == "Ran it."
        page.wait_for_selector("#tree g.node[data-agent=coder][data-status=done]", timeout=10_000)
        assert line(page, "approval_decided") == "Approved by olga."
        statuses = page.eval_on_selector_all("#events tr[data-type=run_status] summary", "s => s.map(x => x.textContent)")
        assert statuses == ["run waiting for a person (1 pending)", "run running"]
        watcher.wait_for_selector("#status.succeeded", timeout=30_000)
        assert watcher.text_content(f"{card} .outcome") == "Approved by olga."
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "monitor-approval.png"), full_page=True)
    finally:
        operator.close()
        viewer.close()
        settle(run_id)

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.result) == ("succeeded", "Ran it.")
    assert WorkspaceFile.objects.get(run=run, path="out.txt").content == "approved"  # ran once, as asked
    request = ApprovalRequest.objects.get(run=run)
    assert (request.status, request.decided_by, request.decision) == (
        "approved", olga, {"decision": "approve", "message": ""})
    assert len(events(run, "tool_result")) == 1 and len(events(run, "approval_decided")) == 1


def test_an_operator_answers_an_agents_question_with_one_of_its_choices(
        team_a, make_member, make_token, celery_worker_process, asgi_server, chromium):  # noqa: F811
    agent(team_a, "Planner", "tools:\n- ask_human\n")
    olga = make_member(team_a, role="operator", username="olga")
    run_id = start(asgi_server.url, make_token(team_a, olga), "planner", {"planner": [
        call("ask_human", question="Which region should I deploy to?", choices=["eu-west", "us-east"]),
        # Each turn is played only if the tool result the model reads is the person's answer.
        {"latency_ms": 300, "expect": "us-east", **call("ask_human", question="When?")},
        {"latency_ms": 800, "expect": "Tuesday at 9", "text": "Deploying to us-east on Tuesday at 9."}]})

    context = chromium.new_context(viewport={"width": 1300, "height": 1000})
    try:
        page = context.new_page()
        sign_in(page, asgi_server.url, "olga", f"/runs/{run_id}/")
        card = ".approval[data-kind=question]"
        page.wait_for_selector(f"{card}[data-status=pending] button.choice", timeout=30_000)
        first = f'.approval[data-request="{page.get_attribute(card, "data-request")}"]'
        assert page.text_content(f"{card} .question") == "Which region should I deploy to?"
        assert page.eval_on_selector_all(f"{card} button.choice", "bs => bs.map(b => b.dataset.choice)") == [
            "eu-west", "us-east"]
        assert line(page, "human_question") == "asks a person: “Which region should I deploy to?” [eu-west | us-east]"
        # The same question waits in the admin's inbox.
        inbox = context.new_page()
        inbox.goto(f"{asgi_server.url}/admin/agents_app/approvalrequest/")
        rows = inbox.eval_on_selector_all("#result_list tbody tr", "rs => rs.map(r => [r.querySelector('.field-what')"
                                                                    ".textContent, r.querySelector('.field-details')"
                                                                    ".textContent, r.querySelector('.field-status')"
                                                                    ".textContent])")
        assert rows == [["Question: Which region should I deploy to?", "eu-west | us-east", "Pending"]]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        inbox.screenshot(path=str(ARTIFACTS / "admin-approvals-inbox.png"), full_page=True)
        inbox.click("#result_list .field-what a")
        inbox.wait_for_selector("#decide-form button[data-choice=us-east]")
        inbox.screenshot(path=str(ARTIFACTS / "admin-approval-question.png"), full_page=True)
        inbox.close()
        page.click(f"{first} button.choice[data-choice=us-east]")
        page.wait_for_selector(f"{first}[data-status=answered]", timeout=10_000)
        assert page.query_selector(f"{first} button") is None
        assert page.text_content(f"{first} .outcome") == "Answered by olga: “us-east”"
        # The agent resumes and asks again, without choices this time: a free answer.
        second = f"{card}[data-status=pending]:has(textarea.answer)"
        page.wait_for_selector(second, timeout=30_000)
        assert page.text_content(f"{second} .question") == "When?"
        page.fill(f"{second} textarea.answer", "Tuesday at 9")
        page.click(f"{second} button.answer-send")
        page.wait_for_selector("#status.succeeded", timeout=30_000)
        assert page.eval_on_selector_all(card, "cs => cs.map(c => [c.dataset.status, c.querySelector('.outcome')"
                                               ".textContent])") == [
            ["answered", "Answered by olga: “us-east”"], ["answered", "Answered by olga: “Tuesday at 9”"]]
        assert page.text_content("#result") == "Deploying to us-east on Tuesday at 9."
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "monitor-question.png"), full_page=True)
    finally:
        context.close()
        settle(run_id)

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.result) == ("succeeded", "Deploying to us-east on Tuesday at 9.")
    assert [(e.data["name"], e.data["ok"], e.data["content"]) for e in events(run, "tool_result")] == [
        ("ask_human", True, "us-east"), ("ask_human", True, "Tuesday at 9")]
    assert list(ApprovalRequest.objects.filter(run=run).order_by("created_at").values_list(
        "status", "decided_by", "decision")) == [
        ("answered", olga.pk, {"decision": "answer", "answer": "us-east"}),
        ("answered", olga.pk, {"decision": "answer", "answer": "Tuesday at 9"})]


def test_an_operator_edits_a_result_a_guardrail_holds_and_the_model_reads_the_edit(
        team_a, make_member, make_token, celery_worker_process, asgi_server, chromium):  # noqa: F811
    from agents_app.kinds import GUARDRAIL
    from tests.runs import define

    define(team_a, GUARDRAIL, "---\nname: Read notes first\napplies_to: [tool_result]\ntools: [vfs_read]\n"
                              "detector:\n  type: pii\n  kinds: [email]\naction: ask\ndefault: true\n---\n")
    agent(team_a, "Reader", "tools: [vfs_write, vfs_read]\n")
    olga = make_member(team_a, role="operator", username="olga")
    note = "Write to ann@example.org about the keys."
    run_id = start(asgi_server.url, make_token(team_a, olga), "reader", {"reader": [
        call("vfs_write", path="note.md", content=note), call("vfs_read", path="note.md"),
        {"latency_ms": 800, "expect": "Write to the office about the keys.", "text": "Done."}]})

    context = chromium.new_context(viewport={"width": 1300, "height": 1000})
    try:
        page = context.new_page()
        sign_in(page, asgi_server.url, "olga", f"/runs/{run_id}/")
        card = ".approval[data-kind=result]"
        page.wait_for_selector(f"{card}[data-status=pending] button.approve", timeout=30_000)
        assert page.text_content(f"{card} .what") == "reader holds the result of vfs_read"
        assert page.text_content(f"{card} pre.result") == note
        assert line(page, "approval_requested") == (
            "holds the result of vfs_read for a person: guardrail 'Read notes first' (read-notes-first) asks a "
            "person before the model reads this result: Write to [email] about the keys.")
        page.click(f"{card} button.edit")
        page.fill(f"{card} textarea.edit-result", "Write to the office about the keys.")
        page.click(f"{card} button.approve-edited")
        page.wait_for_selector(f"{card}[data-status=approved]", timeout=10_000)
        page.wait_for_selector("#status.succeeded", timeout=30_000)
        assert page.text_content("#result") == "Done."
    finally:
        context.close()
        settle(run_id)

    run = Run.objects.get(pk=run_id)
    request = ApprovalRequest.objects.get(run=run)
    assert (request.kind, request.status, request.decision) == ("result", "approved", {
        "decision": "approve", "message": "", "arguments": {"result": "Write to the office about the keys."}})
    assert [e.data["content"] for e in events(run, "tool_result") if e.data["name"] == "vfs_read"] == [
        "Write to the office about the keys."]
