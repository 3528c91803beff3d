"""The Approvals inbox and the team's approval settings in the admin, on runs a real worker suspended.

Decisions made here go through ``approval_decide`` (as the API's): the runs
resume on the worker and the scripted model's ``expect`` proves what it read.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from agents_app.execution.runs import run_cancel, run_start
from agents_app.models import ApprovalRequest, Team, WorkspaceFile
from tests.agents_app.test_approvals import CODER, code_call, pending
from tests.runs import agent, call, events, finish, wait_until

INBOX = reverse("admin:agents_app_approvalrequest_changelist")
SETTINGS = reverse("admin:agents_app_approvalrequest_settings")


def page(pk) -> str:
    return reverse("admin:agents_app_approvalrequest_change", args=[pk])


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def listed(client: Client, **params) -> list[tuple[str, str, str]]:
    response = client.get(INBOX, params)
    assert response.status_code == 200
    return [(str(row.pk), row.status, row.tool) for row in response.context["cl"].result_list]


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_the_inbox_lists_the_teams_pending_requests_newest_first_and_viewers_only_see_them(
        team_a, team_b, make_member, celery_worker_process):
    agent(team_a, "Coder", CODER)
    agent(team_a, "Planner", "tools:\n- ask_human\n")
    agent(team_b, "Coder", CODER)
    first = run_start(team=team_a, agent="coder", input="x", script={"coder": [code_call("print(1)"), {"text": "a"}]})
    first_request = pending(first)
    second = run_start(team=team_a, agent="planner", input="y", script={"planner": [
        call("ask_human", question="Which region?", choices=["eu-west", "us-east"]), {"text": "b"}]})
    question = pending(second)
    theirs = run_start(team=team_b, agent="coder", input="z", script={"coder": [code_call("print(2)"), {"text": "c"}]})
    their_request = pending(theirs)
    third = run_start(team=team_a, agent="coder", input="w", script={"coder": [code_call("print(3)"), {"text": "d"}]})
    third_request = pending(third)

    viewer = signed_in(make_member(team_a, "viewer", username="vic"))
    # Pending first (the default), newest first, only this team's.
    assert listed(viewer) == [(str(third_request.id), "pending", "code_exec"),
                              (str(question.id), "pending", "ask_human"),
                              (str(first_request.id), "pending", "code_exec")]
    inbox = viewer.get(INBOX).content.decode()
    assert "<h1>Approvals inbox</h1>" in inbox and f'href="{SETTINGS}"' in inbox
    assert "Question: Which region?" in inbox and "eu-west | us-east" in inbox

    # The request's page shows the arguments pretty-printed, and no button to a viewer.
    body = viewer.get(page(first_request.id)).content.decode()
    assert '<pre id="arguments">{\n  &quot;code&quot;: &quot;print(1)&quot;,\n  &quot;language&quot;: &quot;python&quot;\n}</pre>' in body
    assert 'id="decide-form"' not in body and 'id="reject-form"' not in body and 'id="view-only"' in body
    body = viewer.get(page(question.id)).content.decode()
    assert '<td id="question">Which region?</td>' in body and "eu-west, us-east" in body
    assert 'data-choice="eu-west"' not in body
    # A viewer's POST is refused and decides nothing; another team's request does not exist here.
    assert viewer.post(page(first_request.id), {"decision": "approve"}).status_code == 403
    assert viewer.get(page(their_request.id)).status_code == 404
    assert viewer.post(page(their_request.id), {"decision": "approve"}).status_code == 404
    assert viewer.get(page("not-a-uuid")).status_code == 404
    assert ApprovalRequest.objects.filter(status="pending").count() == 4
    assert not any(events(run, "approval_decided") for run in (first, second, theirs, third))

    # An operator's page has the buttons: approve, approve with edited arguments, reject; choices for a question.
    operator = signed_in(make_member(team_a, "operator", username="olga"))
    body = operator.get(page(first_request.id)).content.decode()
    for marker in ('id="approve"', 'id="approve-edited"', 'id="reject"', 'name="arguments"', 'name="message"'):
        assert marker in body, marker
    body = operator.get(page(question.id)).content.decode()
    assert 'data-choice="eu-west"' in body and 'data-choice="us-east"' in body and 'id="approve"' not in body

    # Decided requests leave the pending list and show under their status, and under "all".
    assert operator.post(page(first_request.id), {"decision": "reject", "message": "no"}).status_code == 302
    assert listed(operator) == [(str(third_request.id), "pending", "code_exec"),
                                (str(question.id), "pending", "ask_human")]
    assert listed(operator, status="rejected") == [(str(first_request.id), "rejected", "code_exec")]
    assert listed(operator, status="all") == [(str(third_request.id), "pending", "code_exec"),
                                              (str(question.id), "pending", "ask_human"),
                                              (str(first_request.id), "rejected", "code_exec")]
    assert listed(operator, kind="question") == [(str(question.id), "pending", "ask_human")]
    assert finish(first).status == "succeeded"
    for run in (second, theirs, third):
        run_cancel(run=run)


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_an_operator_approves_with_edited_arguments_and_a_second_decision_is_a_409(
        team_a, make_member, celery_worker_process):
    agent(team_a, "Coder", CODER)
    run = run_start(team=team_a, agent="coder", input="x", script={"coder": [
        code_call("open('out.txt', 'a').write('original\\n')"), {"expect": '"exit_code": 0', "text": "Ran it."}]})
    request = pending(run)
    olga = make_member(team_a, "operator", username="olga")
    operator = signed_in(olga)

    # Not JSON, or not the tool's parameters: refused with the reason, the request stays pending.
    response = operator.post(page(request.id), {"decision": "approve_edited", "arguments": "{'code': 1"})
    assert response.status_code == 422
    assert ("The arguments are not JSON: Expecting property name enclosed in double quotes (line 1, column 2)."
            in response.content.decode())
    response = operator.post(page(request.id), {"decision": "approve_edited",
                                                "arguments": json.dumps({"language": "ruby", "code": "puts 1"})})
    assert response.status_code == 422
    text = response.content.decode()
    assert "arguments do not match the parameters of code_exec: language: &#x27;ruby&#x27; is not " in text
    assert "puts 1" in text  # the edited text is kept for another try
    request.refresh_from_db()
    assert (request.status, request.decided_by, request.decision) == ("pending", None, {})

    edited = {"language": "python", "code": "open('out.txt', 'a').write('edited\\n')"}
    response = operator.post(page(request.id), {"decision": "approve_edited", "arguments": json.dumps(edited)})
    assert (response.status_code, response.headers["Location"]) == (302, INBOX)
    run = finish(run)
    assert (run.status, run.result) == ("succeeded", "Ran it.")
    assert WorkspaceFile.objects.get(run=run, path="out.txt").content == "edited\n"
    request.refresh_from_db()
    assert (request.status, request.decided_by, request.decision) == (
        "approved", olga, {"decision": "approve", "message": "", "arguments": edited})
    [decided] = events(run, "approval_decided")
    assert (decided.data["by"], decided.data["status"]) == ("olga", "approved")

    # Someone else clicks too late: refused, nothing changes, the page says who decided.
    admin = signed_in(make_member(team_a, "admin"))
    response = admin.post(page(request.id), {"decision": "reject", "message": "stop"})
    assert response.status_code == 409
    text = response.content.decode()
    assert "this request was already decided: approved by olga at " in text
    assert 'id="decide-form"' not in text and "approved by olga" in text
    request.refresh_from_db()
    assert (request.status, request.decided_by) == ("approved", olga)
    assert len(events(run, "approval_decided")) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_rejection_message_and_an_answer_reach_the_model(team_a, make_member, celery_worker_process):
    agent(team_a, "Coder", CODER)
    agent(team_a, "Planner", "tools:\n- ask_human\n")
    operator = signed_in(make_member(team_a, "operator", username="olga"))
    coder = run_start(team=team_a, agent="coder", input="x", script={"coder": [
        code_call("open('x.txt', 'w').write('no')"),
        {"expect": ["code_exec was not run: olga rejected it. Their message: Read notes.md instead."],
         "text": "Understood."}]})
    rejected = pending(coder)
    planner = run_start(team=team_a, agent="planner", input="y", script={"planner": [
        call("ask_human", question="Which region?", choices=["eu-west", "us-east"]),
        {"expect": "us-east", **call("ask_human", question="When?")},
        {"expect": "Tuesday at 9", "text": "Deploying to us-east on Tuesday at 9."}]})
    question = pending(planner)

    assert operator.post(page(rejected.id), {"decision": "reject",
                                             "message": "Read notes.md instead."}).status_code == 302
    # Not one of the choices: refused by the service, as through the API.
    response = operator.post(page(question.id), {"decision": "answer", "choice": "ap-south"})
    assert response.status_code == 422
    assert "answer: must be one of the choices: eu-west, us-east" in response.content.decode()
    # A question is answered or declined, not approved.
    assert operator.post(page(question.id), {"decision": "approve"}).status_code == 422
    assert operator.post(page(question.id), {"decision": "answer", "choice": "us-east"}).status_code == 302
    # Asked again without choices: a free answer, typed (an empty one is refused).
    free = wait_until(lambda: ApprovalRequest.objects.filter(run=planner, status="pending").first(), 30,
                      "the second question")
    body = operator.get(page(free.id)).content.decode()
    assert '<textarea name="answer" id="id_answer"' in body and "data-choice" not in body
    response = operator.post(page(free.id), {"decision": "answer", "answer": "  "})
    assert response.status_code == 422
    assert "answer: the answer to the question, a non-empty text" in response.content.decode()
    assert operator.post(page(free.id), {"decision": "answer", "answer": "Tuesday at 9"}).status_code == 302

    coder, planner = finish(coder), finish(planner)
    assert (coder.status, coder.result) == ("succeeded", "Understood.")
    assert not WorkspaceFile.objects.filter(run=coder).exists()
    assert (planner.status, planner.result) == ("succeeded", "Deploying to us-east on Tuesday at 9.")
    assert [(e.data["name"], e.data["content"]) for e in events(planner, "tool_result")] == [
        ("ask_human", "us-east"), ("ask_human", "Tuesday at 9")]
    assert list(ApprovalRequest.objects.order_by("created_at").values_list("status", "decision")) == [
        ("rejected", {"decision": "reject", "message": "Read notes.md instead."}),
        ("answered", {"decision": "answer", "answer": "us-east"}),
        ("answered", {"decision": "answer", "answer": "Tuesday at 9"})]


@pytest.mark.django_db
def test_team_settings_are_saved_through_the_service_and_the_secret_is_write_only(
        team_a, team_b, make_member, api_for, settings):
    settings.MAS_WEB_FETCH_ALLOW = []
    admin = signed_in(make_member(team_a, "admin", username="ada"))
    form = admin.get(SETTINGS)
    assert form.status_code == 200 and form.context["team"] == team_a
    assert 'id="secret-state">not set<' in form.content.decode()

    data = {"approval_policy": "- code_exec\n- tool: mcp__github__*\n  deadline_s: 600\n  default: fail\n",
            "approval_deadline_s": "3600", "approval_default": "approve",
            "webhook_url": "https://hooks.example.com/mas", "webhook_secret": "s3cret-value"}
    response = admin.post(SETTINGS, data)
    assert (response.status_code, response.headers["Location"]) == (302, f"{SETTINGS}?team=alpha")
    team = Team.objects.get(pk=team_a.pk)
    assert (team.approval_policy, team.approval_deadline_s, team.approval_default, team.webhook_url,
            team.webhook_secret) == (["code_exec", {"tool": "mcp__github__*", "deadline_s": 600, "default": "fail"}],
                                     3600, "approve", "https://hooks.example.com/mas", "s3cret-value")
    # The API reads the same settings; the page never shows the secret.
    assert api_for(team_a, "viewer").get("/api/team").json() == {
        "slug": "alpha", "name": team_a.name, "approval_policy": team.approval_policy, "approval_deadline_s": 3600,
        "approval_default": "approve", "webhook_url": "https://hooks.example.com/mas", "webhook_secret_set": True,
        "max_sessions": 500, "session_limit": None, "weight": 1}
    body = admin.get(SETTINGS).content.decode()
    assert "s3cret-value" not in body and 'id="secret-state">set<' in body
    # As YAML (the database keeps the mapping's keys in its own order).
    assert ">\n- code_exec\n- tool: mcp__github__*\n  default: fail\n  deadline_s: 600\n</textarea>" in body

    # Saved again without a secret: it is kept. Removed on request.
    assert admin.post(SETTINGS, {**data, "webhook_secret": ""}).status_code == 302
    assert Team.objects.get(pk=team_a.pk).webhook_secret == "s3cret-value"
    assert admin.post(SETTINGS, {**data, "webhook_secret": "", "remove_secret": "on"}).status_code == 302
    assert Team.objects.get(pk=team_a.pk).webhook_secret == ""

    # The service's refusals land on their fields, and nothing is saved.
    for changes, message in [
        ({"webhook_url": "http://169.254.169.254/latest"}, "webhook_url: http://169.254.169.254/latest host"),
        ({"approval_policy": "- tool: code_exec\n  when: always\n"},
         "approval_policy: entry 1: unknown key(s) when (known: tool, deadline_s, default, reason)"),
        ({"approval_policy": "- [unclosed\n"}, "Not YAML (line 2)"),
        ({"approval_deadline_s": "0"}, "Ensure this value is greater than or equal to 1."),
    ]:
        response = admin.post(SETTINGS, {**data, **changes})
        assert response.status_code == 422, changes
        assert message in response.content.decode(), (changes, response.content.decode())
    team = Team.objects.get(pk=team_a.pk)
    assert (team.webhook_url, team.approval_deadline_s, len(team.approval_policy)) == (
        "https://hooks.example.com/mas", 3600, 2)

    # Operators and viewers see the settings, disabled; their POST is refused.
    operator = signed_in(make_member(team_a, "operator"))
    body = operator.get(SETTINGS).content.decode()
    assert 'id="view-only"' in body and 'value="Save"' not in body and body.count(" disabled") == 6
    assert operator.post(SETTINGS, {**data, "approval_deadline_s": "60"}).status_code == 403
    assert Team.objects.get(pk=team_a.pk).approval_deadline_s == 3600
    # Another team's settings do not exist for this user.
    assert admin.get(SETTINGS, {"team": team_b.slug}).status_code == 404
    assert admin.post(f"{SETTINGS}?team={team_b.slug}", data).status_code == 404
    assert Team.objects.get(pk=team_b.pk).approval_deadline_s == 86400
