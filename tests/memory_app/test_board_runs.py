"""Pub/sub between two concurrent sessions and the blackboard, on a real worker; visible through the API."""


import pytest

from agents_app.kinds import AGENT
from mas_core.definitions.services import definition_parse, definition_save
from agents_app.execution.runs import run_start
from agents_app.models import Event
from memory_app.models import BlackboardEntry, ChannelMessage, Subscription
from tests.runs import finish

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

KID = "---\nname: Kid\n---\n\nYou help.\n"


def call(name, latency_ms=0, **arguments):
    turn = {"tool_calls": [{"name": name, "arguments": arguments}]}
    return {**turn, "latency_ms": latency_ms} if latency_ms else turn


def results(run, agent):
    return [e.data["content"] for e in Event.objects.filter(run=run, type="tool_result", agent=agent).order_by("seq")]


def test_two_concurrent_sessions_talk_over_a_channel_and_share_a_blackboard(team_a, api_for, celery_worker_process):
    definition_save(kind=AGENT, team=team_a, parsed=definition_parse(
        kind=AGENT, team=team_a, text="---\nname: Lead\n---\n\nYou lead.\n"))
    script = {
        "lead": [{"tool_calls": [
            {"name": "spawn_agent", "arguments": {"filename": "writer.md", "content": KID, "task": "write"}},
            {"name": "spawn_agent", "arguments": {"filename": "reader.md", "content": KID, "task": "read"}}]},
            {"text": "Both started."}],
        "writer": [call("subscribe", channel="news"),
                   call("publish", channel="news", message="first draft ready"),
                   call("blackboard_write", key="draft", value="v1 text"),
                   call("publish", channel="news", message="second draft ready"),
                   call("blackboard_write", key="draft", value="v2 text " + "x" * 200),
                   {"text": "written"}],
        # Reads after the writer is done (its turns take no time; these wait 1.5 s).
        "reader": [call("subscribe", latency_ms=1500, channel="news"),
                   call("subscribe", channel="news"),
                   call("blackboard_read"),
                   call("blackboard_read", key="draft"),
                   {"text": "read"}],
    }
    run = finish(run_start(team=team_a, agent="lead", input="go", script=script))
    assert run.status == "succeeded", run.error
    reader = results(run, "reader")
    assert reader[0] == "#1 from writer: first draft ready\n#2 from writer: second draft ready"
    assert reader[1] == "No new messages on news."  # acked: nothing is delivered twice
    assert reader[2] == "- draft (v2, writer): v2 text " + "x" * 92 + "…"
    assert reader[3] == "draft (version 2, by writer):\nv2 text " + "x" * 200
    assert results(run, "writer")[0] == "No new messages on news."
    assert list(ChannelMessage.objects.values_list("seq", "sender", "content")) == [
        (1, "writer", "first draft ready"), (2, "writer", "second draft ready")]
    assert dict(Subscription.objects.values_list("agent", "last_acked")) == {"writer": 0, "reader": 2}
    assert list(BlackboardEntry.objects.values_list("key", "version", "author")) == [("draft", 2, "writer")]
    types = [e.type for e in Event.objects.filter(run=run).order_by("seq")]
    assert types.count("channel_publish") == 2 and types.count("channel_subscribe") == 3
    assert types.count("blackboard_write") == 2 and types.count("blackboard_read") == 2

    client = api_for(team_a, "viewer")
    [channel] = client.get(f"/api/runs/{run.id}/channels").json()
    assert (channel["name"], [m["seq"] for m in channel["messages"]], channel["subscribers"]) == (
        "news", [1, 2], {"reader": 2, "writer": 0})
    [entry] = client.get(f"/api/runs/{run.id}/blackboard").json()
    assert (entry["key"], entry["version"], entry["author"]) == ("draft", 2, "writer")
    other = api_for(make_other_team(team_a), "viewer")
    assert other.get(f"/api/runs/{run.id}/blackboard").status_code == 404
    assert other.get(f"/api/runs/{run.id}/channels").status_code == 404


def make_other_team(team_a):
    from mas_core.teams import team_create

    return team_create(slug="other-board", name="Other", defs_dir=team_a.defs_dir + "-other")
