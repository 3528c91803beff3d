"""Guardrails on what leaves through the team's webhook (the ``outgoing`` point).

The runs are run, and their notifications delivered, by a real worker to a real local HTTP server; what arrives
is what the run's ``outgoing`` guardrails (the team's defaults and the run's own) let leave. The data walk itself
is checked on notifications built here, as the approvals' are.
"""

from __future__ import annotations

import json
import logging

import pytest

from agents_app.execution.guardrails import MAX_ARGUMENT_DEPTH, MAX_ARGUMENT_STRINGS, outgoing_checked
from agents_app.execution.runs import run_start
from agents_app.kinds import GUARDRAIL
from agents_app.models import Run
from tests.agents_app import test_approval_webhooks as webhooks
from tests.runs import agent, define, events, finish, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

Receiver = webhooks.Receiver
webhook_worker = webhooks.webhook_worker  # the webhook tests' worker fixture (MAS_WEB_FETCH_ALLOW), shared

CARD = "4242 4242 4242 4242"
ANSWER = f"Charge {CARD} today."
CARDS = "detector:\n  type: pii\n  kinds: [card]\n"


def guardrail(team, name: str, frontmatter: str) -> None:
    define(team, GUARDRAIL, f"---\nname: {name}\n{frontmatter}---\n")


def triggered(run) -> list[dict]:
    return [e.data for e in events(run, "guardrail_triggered")]


def receiving(team, api_for, settings) -> Receiver:
    """A receiver the team's webhook points at."""
    settings.MAS_WEB_FETCH_ALLOW = ["127.0.0.1"]
    receiver = Receiver()
    response = api_for(team, "admin").patch("/api/team", {"webhook_url": receiver.url})
    assert response.status_code == 200, response.content
    return receiver


def charged(team, **start) -> Run:
    """A finished run of the team's clerk whose result holds a card number."""
    return finish(run_start(team=team, agent="clerk", input="Charge the customer.",
                            script={"clerk": [{"text": ANSWER}]}, **start))


def delivered(team, api_for, settings) -> tuple[Run, Receiver]:
    """A finished run of the team's clerk (:func:`charged`) and the receiver once its run end has arrived."""
    receiver = receiving(team, api_for, settings)
    try:
        run = charged(team)
        wait_until(lambda: receiver.received, 30, "the run end's webhook")
    finally:
        receiver.close()
    return run, receiver


def run_end(run: Run, result: str) -> dict:
    return {"run": str(run.id), "agent": "clerk", "workflow": "", "status": "succeeded", "result": result,
            "error": ""}


# -- through a real worker to a real receiver --------------------------------------------------------


def test_a_card_number_in_a_run_end_reaches_the_webhook_redacted(team_a, webhook_worker, api_for, settings):
    guardrail(team_a, "No cards out", f"applies_to: [outgoing]\n{CARDS}action: redact\ndefault: true\n")
    agent(team_a, "Clerk")
    run, receiver = delivered(team_a, api_for, settings)

    # The run keeps its result: only what leaves is checked.
    assert (run.status, run.result) == ("succeeded", ANSWER)
    [(_, body)] = receiver.received
    sent = json.loads(body)
    assert (sent["event"], sent["team"], sent["data"]) == ("run_end", "alpha", run_end(run, "Charge [card] today."))
    assert CARD not in body.decode("utf-8")
    assert triggered(run) == [{"guardrail": "no-cards-out", "where": "outgoing", "action": "redact",
                               "event": "run_end", "excerpt": "Charge [card] today."}]
    assert events(run)[-1].type == "guardrail_triggered"  # appended with the run's end, after run_complete


def test_a_block_guardrail_a_run_names_stops_that_runs_notification_and_no_other(
        team_a, webhook_worker, api_for, settings):
    guardrail(team_a, "Hold cards", f"applies_to: [outgoing]\n{CARDS}action: block\n")
    agent(team_a, "Clerk")
    receiver = receiving(team_a, api_for, settings)
    try:
        held = charged(team_a, guardrails=["hold-cards"])
        # The second run starts once the first has ended: had the first's notification been queued (when its end
        # was committed), it would have been delivered first.
        sent = charged(team_a)
        wait_until(lambda: receiver.received, 30, "the second run's webhook")
    finally:
        receiver.close()

    # Not told is all a block does to the run.
    assert (held.status, held.result, sent.status) == ("succeeded", ANSWER, "succeeded")
    assert [json.loads(body)["data"] for _, body in receiver.received] == [run_end(sent, ANSWER)]
    assert triggered(held) == [{"guardrail": "hold-cards", "where": "outgoing", "action": "block",
                                "event": "run_end", "excerpt": "Charge [card] today."}]
    assert triggered(sent) == []


def test_guardrails_of_other_points_or_of_another_team_leave_the_notification_as_it_was(
        team_a, team_b, webhook_worker, api_for, settings):
    guardrail(team_a, "Cards in answers", f"applies_to: [model_answer]\n{CARDS}action: warn\ndefault: true\n")
    guardrail(team_b, "Hold cards", f"applies_to: [outgoing]\n{CARDS}action: block\ndefault: true\n")
    agent(team_a, "Clerk")
    run, receiver = delivered(team_a, api_for, settings)

    assert [json.loads(body)["data"] for _, body in receiver.received] == [run_end(run, ANSWER)]
    assert [(fired["guardrail"], fired["where"]) for fired in triggered(run)] == [("cards-in-answers",
                                                                                    "model_answer")]


# -- the data walk -----------------------------------------------------------------------------------


def test_every_string_of_the_data_is_checked_and_the_rest_kept(team_a):
    guardrail(team_a, "Mask cards", f"applies_to: [outgoing]\n{CARDS}action: mask\ndefault: true\n")
    guardrail(team_a, "Note addresses", "applies_to: [outgoing, model_answer]\ndetector:\n  type: pii\n"
                                        "  kinds: [email]\naction: warn\ndefault: true\n")
    run = Run.objects.create(team=team_a, agent="clerk", input="x")
    data = {"run": str(run.id), "count": 2, "arguments": {
        "to": "ann@example.com", "lines": [f"card {CARD}", 3, None, True, {"deep": [CARD]}]}}
    checked = outgoing_checked(team_id=team_a.id, team="alpha", run_id=str(run.id), event="approval_requested",
                               data=data)

    masked = "*" * len(CARD)
    assert checked == {"run": str(run.id), "count": 2, "arguments": {
        "to": "ann@example.com", "lines": [f"card {masked}", 3, None, True, {"deep": [masked]}]}}
    assert data["arguments"]["lines"][0] == f"card {CARD}"  # the caller's data is left as it was
    assert [(fired["guardrail"], fired["action"], fired["event"], fired["excerpt"]) for fired in triggered(run)] == [
        ("note-addresses", "warn", "approval_requested", "[email]"),
        ("mask-cards", "mask", "approval_requested", "card [card]"),
        ("mask-cards", "mask", "approval_requested", "[card]")]


def test_a_blocked_notification_is_logged_by_its_guardrail_never_its_text(team_a, team_b, caplog):
    guardrail(team_a, "Hold plans", "applies_to: [outgoing]\ndetector:\n  type: keywords\n  words: [classified]\n"
                                    "action: block\n")
    named = Run.objects.create(team=team_a, agent="clerk", input="x", guardrails=["hold-plans"])
    unnamed = Run.objects.create(team=team_a, agent="clerk", input="x")
    data = {"question": "Is the classified plan ready?", "choices": ["yes", "no"]}

    with caplog.at_level(logging.WARNING, logger="agents_app.execution.guardrails"):
        blocked = outgoing_checked(team_id=team_a.id, team="alpha", run_id=str(named.id), event="human_question",
                                   data={"run": str(named.id), **data})
    assert blocked is None
    [record] = caplog.records
    assert (record.getMessage(), record.guardrail, record.event, record.run) == (
        "webhook notification not sent: blocked by a guardrail", "hold-plans", "human_question", str(named.id))
    assert "classified" not in json.dumps(record.__dict__, default=str)
    assert triggered(named) == [{"guardrail": "hold-plans", "where": "outgoing", "action": "block",
                                 "event": "human_question", "excerpt": "Is the [keyword] plan ready?"}]

    # Named by another run only, or of another team: not applied, nothing recorded.
    as_it_was = {"run": str(unnamed.id), **data}
    assert outgoing_checked(team_id=team_a.id, team="alpha", run_id=str(unnamed.id), event="human_question",
                            data=as_it_was) is as_it_was
    other = Run.objects.create(team=team_b, agent="clerk", input="x", guardrails=["hold-plans"])
    assert outgoing_checked(team_id=team_b.id, team="beta", run_id=str(other.id), event="human_question",
                            data={"run": str(other.id), **data}) == {"run": str(other.id), **data}
    assert (triggered(unnamed), triggered(other)) == ([], [])


def test_data_too_deep_or_with_too_many_strings_for_the_guardrails_is_not_sent(team_a, caplog):
    guardrail(team_a, "Note cards", f"applies_to: [outgoing]\n{CARDS}action: warn\ndefault: true\n")
    run = Run.objects.create(team=team_a, agent="clerk", input="x")
    deep: object = "x"
    for _ in range(MAX_ARGUMENT_DEPTH):  # the data's dict is the first level
        deep = [deep]
    many = ["x"] * MAX_ARGUMENT_STRINGS
    with caplog.at_level(logging.WARNING, logger="agents_app.execution.guardrails"):
        assert outgoing_checked(team_id=team_a.id, team="alpha", run_id=str(run.id), event="approval_requested",
                                data={"arguments": deep}) is None
        assert outgoing_checked(team_id=team_a.id, team="alpha", run_id=str(run.id), event="approval_requested",
                                data={"arguments": many, "one_more": "x"}) is None
        # As many strings as are checked, and as deep: sent.
        assert outgoing_checked(team_id=team_a.id, team="alpha", run_id=str(run.id), event="approval_requested",
                                data={"arguments": many[1:], "nested": deep[0]}) == {
            "arguments": many[1:], "nested": deep[0]}
    assert [record.getMessage() for record in caplog.records] == [
        "webhook notification not sent: its data is too deep for its guardrails to check",
        "webhook notification not sent: its data holds too many strings for its guardrails to check"]
    assert triggered(run) == []


def test_a_guardrail_that_cannot_check_the_data_keeps_it_from_leaving(team_a, caplog, monkeypatch):
    """A detector that fails here (a remote one, asked only by sessions) never lets unchecked data out."""
    from mas_core.guardrails import Detector

    guardrail(team_a, "No cards out", f"applies_to: [outgoing]\n{CARDS}action: redact\ndefault: true\n")
    run = Run.objects.create(team=team_a, agent="clerk", input="x")

    def unable(self, text, context=None):
        raise TypeError(f"cannot judge {text}")

    monkeypatch.setattr(Detector, "find", unable)
    with caplog.at_level(logging.WARNING, logger="agents_app.execution.guardrails"):
        assert outgoing_checked(team_id=team_a.id, team="alpha", run_id=str(run.id), event="run_end",
                                data={"run": str(run.id), "result": ANSWER}) is None
    [record] = caplog.records
    assert (record.getMessage(), record.guardrail) == (
        "webhook notification not sent: its guardrail could not check it (TypeError)", "no-cards-out")
    assert CARD not in json.dumps(record.__dict__, default=str)
    assert triggered(run) == []


def test_a_session_reads_no_guardrail_that_only_checks_outgoing_notifications(team_a, team_b):
    from django.db import connection

    from agents_app.execution.guardrails import guardrails_sql

    guardrail(team_a, "Out only", f"applies_to: [outgoing]\n{CARDS}action: redact\ndefault: true\n")
    guardrail(team_a, "Out named", f"applies_to: [outgoing]\n{CARDS}action: redact\n")
    guardrail(team_a, "Both", f"applies_to: [outgoing, model_answer]\n{CARDS}action: redact\ndefault: true\n")
    guardrail(team_a, "Answers", f"applies_to: [model_answer]\n{CARDS}action: redact\n")
    guardrail(team_b, "Other team", f"applies_to: [model_answer]\n{CARDS}action: redact\ndefault: true\n")

    def read(team, slugs: list[str]) -> list[str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT " + guardrails_sql(team="team", slugs="slugs"), {"team": team.id, "slugs": slugs})
            return [row["slug"] for row in json.loads(cursor.fetchone()[0] or "[]")]

    assert read(team_a, ["out-named", "answers"]) == ["both", "answers"]
    assert read(team_a, []) == ["both"]
    assert read(team_b, ["answers"]) == ["other-team"]
