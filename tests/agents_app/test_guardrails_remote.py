"""Guardrails that ask someone else: an llm_judge (a model of the team, billed to the run on its guardrail line)
and a webhook (the team's own service), in real runs on real workers; and what their settings and answers may be.

The model is a local server speaking OpenAI's wire format, or the scripted provider; the team's service is a
local HTTP server. Each test reads what they were sent, the run's events, costs and how its session ended.
"""

from __future__ import annotations

import json
import os
from decimal import Decimal

import pytest

from agents_app.approvals.webhooks import SIGNATURE_HEADER, signature
from agents_app.execution.guardrail_calls import JUDGE_SYSTEM, verdict
from agents_app.execution.runs import run_start
from agents_app.kinds import GUARDRAIL, PROVIDER
from agents_app.models import Run, Session
from agents_app.specs import GuardrailSpec
from mas_core.guardrails import DetectorError, detector_build, webhook_findings
from mas_core.guardrails.remote import WebhookAnswerError
from tests.agents_app.llm.fake_servers import FakeServer, closed_port_url, hang, json_reply, openai_stream, sse
from tests.runs import agent, call, define, events, finish
from tests.workers import start_worker, stop_worker

ADVICE = "The text gives personalised investment advice."


def guardrail(team, name: str, frontmatter: str) -> None:
    define(team, GUARDRAIL, f"---\nname: {name}\n{frontmatter}---\n\nNotes for people.\n")


def judge(name: str, *, action: str = "block", on_error: str = "flag", where: str = "model_answer",
          default: bool = True) -> str:
    return (f"applies_to: [{where}]\ndetector:\n  type: llm_judge\n  criterion: {ADVICE}\n  on_error: {on_error}\n"
            f"action: {action}\ndefault: {str(default).lower()}\n")


def of_purpose(run, type: str) -> list[dict]:
    return [e.data for e in events(run, type) if e.data.get("purpose") == "guardrail"]


def failure(run) -> tuple[str, str]:
    session = Session.objects.get(run=run)
    return session.failure["kind"], session.failure["message"]


# -- llm_judge -----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_judge_of_the_team_flags_an_answer_and_its_call_is_billed_on_the_guardrail_line(
        team_a, celery_worker_process, api_for):
    server = FakeServer().start()
    try:
        define(team_a, PROVIDER, f"---\nname: Fake\ntype: openai\nbase_url: {server.url}/v1\nmodels:\n"
                                 "- name: m-medium\n  tier: medium\n  input_price: '1.0'\n  output_price: '2.0'\n"
                                 "- name: m-small\n  tier: small\n  input_price: '0.5'\n  output_price: '4.0'\n---\n")
        agent(team_a, "Adviser", "tier: medium\n")
        guardrail(team_a, "No advice", judge("no advice"))
        server.add(sse(openai_stream(text=["Buy ACME ", "shares now."], usage=(1000, 10))),
                   sse(openai_stream(text=['{"flagged": true}'], usage=(200, 5))))
        run = finish(run_start(team=team_a, agent="adviser", input="Should I buy ACME?"))
    finally:
        server.stop()

    assert run.status == "failed"
    assert failure(run) == ("guardrail", "guardrail 'No advice' (no-advice) blocked the model's answer")
    # The judge is the team's small model, asked the criterion about the answer, which is data to it.
    asked = server.requests[1].body
    assert (len(server.requests), asked["model"], asked["temperature"]) == (2, "m-small", 0)
    assert [(m["role"], m["content"]) for m in asked["messages"]] == [
        ("system", JUDGE_SYSTEM + ADVICE),
        ("user", "The text to judge, between the markers:\n<<<TEXT\nBuy ACME shares now.\nTEXT>>>")]
    # Billed to the run: 1,000 + 10 tokens of the agent's model, 200 + 5 of the judge's, the judge's on its line.
    assert (run.cost_usd, run.guardrail_cost_usd) == (Decimal("0.00114"), Decimal("0.00012"))
    assert of_purpose(run, "llm_request") == [{"model": "m-small", "tier": "small", "purpose": "guardrail",
                                               "guardrail": "no-advice", "messages": 2, "tools": 0}]
    [response] = of_purpose(run, "llm_response")
    assert (response["verdict"], response["text"], response["cost_usd"]) == ("flagged", "", "0.00012")
    assert [e.data for e in events(run, "guardrail_triggered")] == [
        {"guardrail": "no-advice", "where": "model_answer", "action": "block", "excerpt": "[llm_judge]"}]
    # Nothing of the answer streamed before the judge had its say.
    assert events(run, "stream_chunk") == []
    totals = api_for(team_a).get(f"/api/runs/{run.id}").json()["totals"]
    assert (totals["cost_usd"], totals["guardrail_cost_usd"]) == ("0.00114", "0.00012")


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_scripted_judge_allows_and_a_verdict_that_is_none_is_taken_as_found(team_a, celery_worker_process):
    guardrail(team_a, "No advice", judge("no advice", action="redact"))
    agent(team_a, "Adviser")
    allowed = finish(run_start(team=team_a, agent="adviser", input="Hi", script={
        "adviser": [{"text": "Diversify, and read the prospectus."}], "guardrail": [{"text": '{"flagged": false}'}]}))
    unsure = finish(run_start(team=team_a, agent="adviser", input="Hi", script={
        "adviser": [{"text": "Buy ACME."}], "guardrail": [{"text": "Probably yes."}]}))

    assert (allowed.status, allowed.result) == ("succeeded", "Diversify, and read the prospectus.")
    assert [r["verdict"] for r in of_purpose(allowed, "llm_response")] == ["allowed"]
    assert events(allowed, "guardrail_triggered") == [] and events(allowed, "error") == []
    # on_error: flag takes what the judge did not answer as found: the whole answer is redacted.
    assert (unsure.status, unsure.result) == ("succeeded", "[llm_judge]")
    assert [e.data for e in events(unsure, "error")] == [{
        "where": "guardrail", "guardrail": "no-advice", "kind": "malformed",
        "message": 'the judge did not answer {"flagged": true} or {"flagged": false}'}]
    assert [e.data["text"] for e in events(unsure, "llm_response") if "purpose" not in e.data] == ["[llm_judge]"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_spent_guardrail_line_asks_no_judge_and_on_error_decides(team_a, celery_worker_process):
    define(team_a, PROVIDER, "---\nname: Play\ntype: scripted\nmodels:\n"
                             "- name: s-small\n  tier: small\n  input_price: '1.0'\n  output_price: '1.0'\n---\n")
    guardrail(team_a, "Strict judge", judge("strict", default=False))
    guardrail(team_a, "Lenient judge", judge("lenient", on_error="allow", default=False))
    agent(team_a, "Strict", "guardrails: [strict-judge]\n")
    agent(team_a, "Lenient", "guardrails: [lenient-judge]\n")
    script = {"guardrail": [{"text": '{"flagged": false}'}]}
    strict = finish(run_start(team=team_a, agent="strict", input="Hi", budget={"max_guardrail_cost_usd": "0"},
                              script={"strict": [{"text": "Hold."}], **script}))
    lenient = finish(run_start(team=team_a, agent="lenient", input="Hi", budget={"max_guardrail_cost_usd": "0"},
                               script={"lenient": [{"text": "Hold."}], **script}))

    for run in (strict, lenient):
        run = Run.objects.get(pk=run.pk)
        assert (of_purpose(run, "llm_request"), run.guardrail_cost_usd, run.script_cursor.get("guardrail")) == (
            [], Decimal(0), None)
        [error] = [e.data for e in events(run, "error")]
        assert (error["where"], error["kind"]) == ("guardrail", "budget")
        assert error["message"].startswith("the run's guardrail budget of $0.00 cannot cover a judge's call: $0.00 "
                                           "spent or held, and the call may cost up to $")
    assert failure(strict) == ("guardrail", "guardrail 'Strict judge' (strict-judge) blocked the model's answer")
    assert (lenient.status, lenient.result) == ("succeeded", "Hold.")


# -- webhook -------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_the_teams_service_redacts_a_tool_result_denies_arguments_and_a_silent_one_is_on_error(
        team_a, settings, monkeypatch):
    from mas_project.celery import app

    settings.MAS_WEB_FETCH_ALLOW = ["127.0.0.1"]  # the guardrail's URL is checked when saved, as a webhook's is
    team_a.webhook_secret = "hook-secret"
    team_a.save(update_fields=["webhook_secret"])
    service = FakeServer().start()
    down = closed_port_url()
    guardrail(team_a, "Accounts", f"applies_to: [tool_result]\ntools: [vfs_read]\ndetector:\n  type: webhook\n"
                                  f"  url: {service.url}/check\naction: redact\ndefault: true\n")
    guardrail(team_a, "Paths", f"applies_to: [tool_arguments]\ntools: [vfs_write]\ndetector:\n  type: webhook\n"
                               f"  url: {service.url}/paths\naction: block\n")
    guardrail(team_a, "Down", f"applies_to: [tool_arguments]\ntools: [vfs_write]\ndetector:\n  type: webhook\n"
                              f"  url: {down}/x\n  on_error: allow\naction: block\n")
    guardrail(team_a, "Slow", f"applies_to: [tool_arguments]\ntools: [vfs_write]\ndetector:\n  type: webhook\n"
                              f"  url: {service.url}/slow\n  timeout_s: 0.5\naction: block\n")
    agent(team_a, "Reader", "tools: [vfs_write, vfs_read]\n")
    agent(team_a, "Writer", "tools: [vfs_write]\nguardrails: [paths]\n")
    agent(team_a, "Careless", "tools: [vfs_write]\nguardrails: [down]\n")
    agent(team_a, "Hasty", "tools: [vfs_write]\nguardrails: [slow]\n")
    note = "Account 12345678 belongs to Ann."
    queue = f"hook-{os.getpid()}"
    monkeypatch.setitem(app.conf, "task_default_queue", queue)
    worker = start_worker(queue, queue=queue, env={"MAS_WEB_FETCH_ALLOW": "127.0.0.1"})
    try:
        service.add(json_reply(200, {"decision": "redact", "spans": [{"start": 8, "end": 16, "label": "account"}]}))
        read = finish(run_start(team=team_a, agent="reader", input="Read the note", script={"reader": [
            call("vfs_write", path="note.md", content=note), call("vfs_read", path="note.md"),
            {"text": "Read.", "expect": ["Account [account] belongs to Ann."]}]}))
        service.add(json_reply(200, {"decision": "deny"}))
        denied = finish(run_start(team=team_a, agent="writer", input="Write", script={"writer": [
            call("vfs_write", path="../etc/passwd", content="x"), {"text": "unreached"}]}))
        careless = finish(run_start(team=team_a, agent="careless", input="Write", script={"careless": [
            call("vfs_write", path="a.md", content="x"), {"text": "Written."}]}))
        service.add(hang(3))
        hasty = finish(run_start(team=team_a, agent="hasty", input="Write", script={"hasty": [
            call("vfs_write", path="a.md", content="x"), {"text": "unreached"}]}))
    finally:
        stop_worker(worker)
        service.stop()

    # The service was sent the text, where and which tool, signed with the team's webhook secret.
    check, paths, slow = service.requests
    assert (check.path, check.body) == ("/check", {"guardrail": "accounts", "team": team_a.slug, "run": str(read.id),
                                                   "where": "tool_result", "tool": "vfs_read", "text": note})
    raw = json.dumps(check.body, ensure_ascii=False).encode()
    assert check.headers[SIGNATURE_HEADER.lower()] == signature("hook-secret", raw)
    assert (read.status, read.result) == ("succeeded", "Read.")
    assert [e.data["content"] for e in events(read, "tool_result") if e.data["name"] == "vfs_read"] == [
        "Account [account] belongs to Ann."]
    assert [(e.data["guardrail"], e.data["excerpt"]) for e in events(read, "guardrail_triggered")] == [
        ("accounts", "Account [account] belongs to Ann.")]

    assert (paths.path, paths.body["where"], paths.body["text"]) == ("/paths", "tool_arguments", "../etc/passwd")
    assert failure(denied) == ("guardrail", "guardrail 'Paths' (paths) blocked the tool call's arguments of vfs_write")
    # Unreachable, on_error allow: the call goes on, and the session says what happened.
    assert (careless.status, careless.result) == ("succeeded", "Written.")
    assert [(e.data["guardrail"], e.data["kind"]) for e in events(careless, "error")] == [
        ("down", "connection"), ("down", "connection")]
    # No answer in time, on_error flag: taken as found, so the block blocks.
    assert slow.path == "/slow"
    assert failure(hasty) == ("guardrail", "guardrail 'Slow' (slow) blocked the tool call's arguments of vfs_write")
    assert [(e.data["kind"], e.data["message"]) for e in events(hasty, "error")][:1] == [
        ("timeout", "the guardrail's webhook gave no answer within 0.5 s")]


# -- settings and answers ----------------------------------------------------------------------


def test_remote_detectors_settings_are_checked_when_saved_naming_the_field(settings):
    settings.MAS_WEB_FETCH_ALLOW = []
    refusals = {}
    for name, detector in {
        "no criterion": {"type": "llm_judge"},
        "long criterion": {"type": "llm_judge", "criterion": "x" * 2001},
        "model": {"type": "llm_judge", "criterion": ADVICE, "model": "huge"},
        "max_chars": {"type": "llm_judge", "criterion": ADVICE, "max_chars": 99},
        "on_error": {"type": "llm_judge", "criterion": ADVICE, "on_error": "ignore"},
        "no url": {"type": "webhook"},
        "loopback": {"type": "webhook", "url": "http://127.0.0.1:9/check"},
        "scheme": {"type": "webhook", "url": "ftp://example.com/check"},
        "timeout": {"type": "webhook", "url": "https://example.com/check", "timeout_s": 11},
        "unknown": {"type": "webhook", "url": "https://example.com/check", "headers": {}},
    }.items():
        with pytest.raises(DetectorError) as refused:
            detector_build(detector)
        refusals[name] = (refused.value.field, str(refused.value))
    assert refusals == {
        "no criterion": ("detector.criterion", 'is required: what the judge flags, as a sentence ("The text gives '
                                               'personalised investment advice.")'),
        "long criterion": ("detector.criterion", "is 2001 characters long; at most 2000 are allowed"),
        "model": ("detector.model", "must be a tier (small, medium, large) or provider:model, not 'huge'"),
        "max_chars": ("detector.max_chars", "must be a whole number from 100 to 100,000, not 99"),
        "on_error": ("detector.on_error", "must be flag (take the text as found) or allow, not 'ignore'"),
        "no url": ("detector.url", "is required: the http(s) URL of the team's service"),
        "loopback": ("detector.url", "host 127.0.0.1 is a private/loopback/link-local address; refused (allow it "
                                     "in MAS_WEB_FETCH_ALLOW)"),
        "scheme": ("detector.url", "must start with http:// or https://"),
        "timeout": ("detector.timeout_s", "must be a number of seconds above 0, at most 10, not 11"),
        "unknown": ("detector.headers", "is not a setting of a webhook detector (it has: max_chars, on_error, "
                                        "timeout_s, url)"),
    }
    assert detector_build({"type": "llm_judge", "criterion": ADVICE}).remote == {
        "criterion": ADVICE, "model": "small", "max_chars": 8000, "on_error": "flag"}
    assert detector_build({"type": "webhook", "url": "https://example.com/check"}).remote == {
        "url": "https://example.com/check", "timeout_s": 2.0, "max_chars": 20000, "on_error": "flag"}
    with pytest.raises(TypeError, match="asked by the session"):
        detector_build({"type": "llm_judge", "criterion": ADVICE}).find("text")


def test_a_remote_detector_is_refused_where_no_session_asks():
    for where in ("run_input", "model_request"):
        spec = {"name": "J", "applies_to": [where], "action": "block",
                "detector": {"type": "llm_judge", "criterion": ADVICE}}
        if where == "run_input":
            with pytest.raises(ValueError, match="a llm_judge asks a model or a service, which a session does; it "
                                                 "cannot check run_input"):
                GuardrailSpec.model_validate(spec)
        else:
            assert GuardrailSpec.model_validate(spec).applies_to == ["model_request"]


def test_a_webhooks_answer_is_read_strictly():
    assert webhook_findings({"decision": "allow"}, sent=10, whole=30) == []
    assert webhook_findings({"decision": "deny"}, sent=10, whole=30) == [(0, 30, "webhook")]
    assert webhook_findings({"decision": "redact", "spans": [{"start": 2, "end": 5}, {"start": 0, "end": 10,
                                                                                      "label": "iban"}]},
                            sent=10, whole=30) == [(2, 5, "webhook"), (0, 10, "iban")]
    refused = {}
    for name, answer in {
        "list": [], "decision": {"decision": "maybe"}, "no spans": {"decision": "redact"},
        "past": {"decision": "redact", "spans": [{"start": 5, "end": 11}]},
        "empty span": {"decision": "redact", "spans": [{"start": 5, "end": 5}]},
        "bool": {"decision": "redact", "spans": [{"start": True, "end": 4}]},
        "label": {"decision": "redact", "spans": [{"start": 1, "end": 4, "label": "<b>"}]},
        "many": {"decision": "redact", "spans": [{"start": 1, "end": 2}] * 1001},
    }.items():
        with pytest.raises(WebhookAnswerError) as error:
            webhook_findings(answer, sent=10, whole=30)
        refused[name] = str(error.value)
    assert refused == {
        "list": "the answer is not a JSON object", "decision": "decision must be allow, deny or redact, not 'maybe'",
        "no spans": "a redact decision needs a non-empty list of spans",
        "past": "spans[0] needs whole numbers 0 <= start < end <= 10",
        "empty span": "spans[0] needs whole numbers 0 <= start < end <= 10",
        "bool": "spans[0] needs whole numbers 0 <= start < end <= 10",
        "label": "spans[0].label must be lower-case letters, digits and _ (at most 40)",
        "many": "1001 spans; at most 1000 are taken",
    }


def test_a_judges_verdict_is_a_json_flag_or_none():
    assert [verdict(text) for text in ('{"flagged": true}', '```json\n{"flagged": false}\n```', ' {"flagged":false} ',
                                       "yes", '{"flagged": "true"}', '["flagged"]', "", '{"flagged": true} ok')] == [
        True, False, False, None, None, None, None, None]
