"""Approval policies: what matches, what is refused on save, and the manual's examples as written."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.utils import timezone

from agents_app.approvals.policy import entries_check, policy_rules, rule_for
from agents_app.approvals.services import request_data
from agents_app.kinds import AGENT
from mas_core.definitions.markdown import DefinitionError
from mas_core.definitions.services import definition_parse
from agents_app.models import ApprovalRequest
from tests.manual import example

PAGE = "docs/concepts/people-in-the-loop.md"


def test_names_patterns_and_mcp_unmarked_match_what_they_say():
    rules = policy_rules(agent=["code_exec", {"tool": "mcp__github__*", "deadline_s": 60, "default": "fail"}],
                         run=["vfs_w?ite"], team=["mcp_unmarked"])
    assert rule_for(rules, "code_exec").source == "agent"
    github = rule_for(rules, "mcp__github__create_issue", mcp=True)
    assert (github.source, github.deadline_s, github.default) == ("agent", 60, "fail")
    assert rule_for(rules, "vfs_write").source == "run"
    assert rule_for(rules, "mcp__files__delete", mcp=True).source == "team"
    assert rule_for(rules, "mcp__files__read", mcp=True, read_only=True) is None
    assert rule_for(rules, "vfs_read") is None
    assert rule_for(policy_rules(agent=["*"], run=[], team=[]), "ask_human") is None  # asking is the pause


@pytest.mark.parametrize("entries, message", [
    ("code_exec", "a list of tool names, patterns or mappings"),
    (["rm -rf"], "entry 1: 'rm -rf' is not a tool name or pattern (letters, digits, _ - and the wildcards * ? [ ])"),
    ([{"tool": "x", "deadline_s": 0}], "entry 1: deadline_s: 0 must be a whole number of seconds from 1 to 2592000"),
    ([{"tool": "x", "default": "maybe"}], "entry 1: default: 'maybe' must be one of reject, approve, fail"),
    ([{"tool": "x", "when": "always"}], "entry 1: unknown key(s) when (known: tool, deadline_s, default, reason)"),
    (["x"] * 101, "at most 100 entries"),
])
def test_bad_entries_are_refused_naming_the_problem(entries, message):
    with pytest.raises(ValueError) as error:
        entries_check(entries)
    assert str(error.value) == message


def test_the_manuals_agent_needs_approval_for_what_it_lists(team_a):
    markdown = example(PAGE, language="markdown", heading="Requiring approval").text
    parsed = definition_parse(kind=AGENT, team=team_a, text=markdown)
    rules = policy_rules(agent=parsed.spec.approval, run=[], team=[])
    assert rule_for(rules, "code_exec").pattern == "code_exec"
    assert rule_for(rules, "mcp__github__merge_pull_request", mcp=True).pattern == "mcp__github__*"
    fetch = rule_for(rules, "web_fetch")
    assert (fetch.deadline_s, fetch.default, fetch.describe("web_fetch")) == (
        600, "approve", "Outbound requests are reviewed")
    assert rule_for(rules, "ask_human") is None


def test_an_agent_with_a_bad_approval_entry_is_refused_on_save(team_a):
    with pytest.raises(DefinitionError) as error:
        definition_parse(kind=AGENT, team=team_a, text="---\nname: X\napproval:\n- tool: code_exec\n"
                                                       "  default: later\n---\n\nWork.\n")
    assert "default: 'later' must be one of reject, approve, fail" in str(error.value)


@pytest.mark.django_db
def test_the_manuals_webhook_body_has_the_keys_a_request_sends():
    body = json.loads(example(PAGE, language="json", heading="Notifications").text)
    assert sorted(body) == ["data", "event", "sent_at", "team"]
    request = ApprovalRequest(kind="approval", agent="deployer", tool="code_exec", call_id="call_1",
                              arguments={}, reason="", deadline=timezone.now())
    assert sorted(body["data"]) == sorted(["run", *request_data(request)])


@pytest.mark.django_db
def test_beat_and_every_workers_sweep_give_an_overdue_request_its_default(team_a):
    from datetime import timedelta

    from agents_app.execution.recovery import Sweep, recovery_sweep
    from agents_app.execution.runs import run_start
    from agents_app.models import Event, Session
    from tests.runs import agent

    assert settings.CELERY_BEAT_SCHEDULE["expire-approvals"] == {
        "task": "agents_app.tasks.expire_approvals", "schedule": 15.0}
    agent(team_a, "Lead")
    run = run_start(team=team_a, agent="lead", input="x")  # in this test's transaction: never sent to a worker
    activation = run.activations.get()
    session = Session.objects.create(run=run, activation=activation, agent="lead", tier="medium")
    due = ApprovalRequest.objects.create(team=team_a, run=run, session=session, agent="lead", tool="code_exec",
                                         call_id="call_1", deadline=timezone.now() - timedelta(seconds=1))
    later = ApprovalRequest.objects.create(team=team_a, run=run, session=session, agent="lead", tool="code_exec",
                                           call_id="call_2", deadline=timezone.now() + timedelta(hours=1))
    assert recovery_sweep() == Sweep(resumed=[], dispatched=[], expired=[str(due.id)])
    due.refresh_from_db()
    later.refresh_from_db()
    assert (due.status, due.decided_by, due.decision["decision"]) == ("expired", None, "reject")
    assert later.status == "pending"
    [decided] = Event.objects.filter(run=run, type="approval_decided")
    assert (decided.data["request"], decided.data["by"]) == (str(due.id), "the system")
