"""A run uses the definition versions current when it started, in every session, retry and resume — on a real worker.

The definitions are edited while the run's first model turn is on its way; the scripted turns after
it ``expect`` the first versions' text in what the model is sent (the system prompt on a session's
first turn), so a run only succeeds when its later sessions read the versions it pinned.
"""

from __future__ import annotations

import pytest

from agents_app.kinds import SKILL

from tools_app.kinds import MCP, TOOL
from mas_core.definitions.services import definition_parse, definition_save
from agents_app.execution.runs import run_start
from agents_app.execution.versions import VersionMissing, definitions_pinned, mcp_pinned
from agents_app.models import Agent, DefinitionVersion, Event, Run, Session
from tests.runs import agent, call, define, events, finish, wait_until
from tools_app.mcp.bridge import rows_for

pytestmark = [pytest.mark.django_db(transaction=True)]

# Four server errors use up a session's model-call retries: the session fails and is retried.
FAIL_SESSION = [{"error": "server"}] * 4


def delegate(agent_slug: str, task: str) -> dict:
    return {"name": "delegate", "arguments": {"agent": agent_slug, "task": task}}


def slow_first_turn_started(run, agent_slug: str) -> None:
    wait_until(lambda: Event.objects.filter(run=run, type="llm_request", agent=agent_slug).exists(), 30,
               f"{agent_slug}'s first model call")


@pytest.mark.worker
def test_agents_edited_mid_run_keep_the_versions_the_run_pinned_and_a_new_run_uses_the_new_ones(
        team_a, celery_worker_process):
    agent(team_a, "Lead", body="You are the lead, version one.")
    agent(team_a, "Helper", body="You help, version one.")
    script = {
        "lead": [
            {"latency_ms": 1500, "expect": "You are the lead, version one.",
             "tool_calls": [delegate("helper", "Help")]},
            # The session resumes with the helper's answer, then fails: its retry is a new session.
            {"expect": '"result": "Helped."', "error": "server"}, *FAIL_SESSION[1:],
            {"expect": "You are the lead, version one.", "text": "Done, as version one."},
        ],
        "helper": [{"expect": "You help, version one.", "text": "Helped."}],
    }
    run = run_start(team=team_a, agent="lead", input="Work", script=script)
    slow_first_turn_started(run, "lead")
    # Both edited after the run started; the helper before the run first reaches it.
    agent(team_a, "Lead", "tier: large\n", body="You are the lead, version two.")
    agent(team_a, "Helper", "tier: large\n", body="You help, version two.")
    assert dict(Agent.objects.filter(team=team_a).values_list("slug", "version")) == {"lead": 2, "helper": 2}

    run = finish(run)
    assert (run.status, run.result, run.error) == ("succeeded", "Done, as version one.", "")
    assert run.versions == {"agent:lead": 1, "agent:helper": 1}
    sessions = [(s.agent, s.attempt, s.tier, s.status) for s in Session.objects.filter(run=run).order_by("started_at")]
    assert sessions == [("lead", 1, "medium", "failed"), ("helper", 1, "medium", "ok"), ("lead", 2, "medium", "ok")]
    assert [e.data["resumed"] for e in events(run, "session_start") if e.agent == "lead"] == [False, True, False]
    assert len(events(run, "escalation")) == 0

    later = finish(run_start(team=team_a, agent="lead", input="Work", script={
        "lead": [{"expect": "You are the lead, version two.", "text": "Done, as version two."}]}))
    assert (later.status, later.result, later.versions) == ("succeeded", "Done, as version two.", {"agent:lead": 2})
    assert Session.objects.get(run=later).tier == "large"


SHOUT = ("---\nname: shout\ndescription: Shout a word.\nparameters:\n  word: {{}}\n"
         "prompt: 'Shout {{{{word}}}}, {version}'\n---\n")
STYLE = "---\nname: style\n---\n\nWrite in the {version} style.\n"


def skill(team, text, references):
    definition_save(kind=SKILL, team=team, parsed=definition_parse(kind=SKILL, team=team, text=text),
                    references=references)


@pytest.mark.worker
def test_custom_tools_and_skills_edited_mid_run_keep_their_pinned_versions_on_retry(team_a, api_for,
                                                                                     celery_worker_process):
    define(team_a, TOOL, SHOUT.format(version="first version"))
    skill(team_a, STYLE.format(version="first-version"), {"notes.md": "Notes of the first version."})
    agent(team_a, "Lead", "tools:\n- shout\n- skill_load\nskills:\n- style\n")
    script = {
        "lead": [
            {"latency_ms": 1500, "error": "server"}, *FAIL_SESSION[1:],
            # The retry builds its prompt and its tools again, from the run's versions.
            {"expect": "Write in the first-version style.",
             "tool_calls": [{"name": "shout", "arguments": {"word": "hey"}},
                            {"name": "skill_load", "arguments": {"name": "style", "query": "notes"}}]},
            {"expect": ["HEY (first version)", "Notes of the first version."], "text": "Shouted."},
        ],
        "shout": [{"expect": "Shout hey, first version", "text": "HEY (first version)"}],
    }
    run = run_start(team=team_a, agent="lead", input="Shout", script=script)
    slow_first_turn_started(run, "lead")
    define(team_a, TOOL, SHOUT.format(version="second version"))
    skill(team_a, STYLE.format(version="second-version"), {"notes.md": "Notes of the second version."})

    run = finish(run)
    assert (run.status, run.result, run.error) == ("succeeded", "Shouted.", "")
    assert run.versions == {"agent:lead": 1, "tool:shout": 1, "skill:style": 1}
    assert [(s.agent, s.attempt, s.status) for s in Session.objects.filter(run=run).order_by("started_at")] == [
        ("lead", 1, "failed"), ("lead", 2, "ok"), ("shout", 1, "ok")]
    # The API shows every definition the run pinned.
    shown = api_for(team_a, "viewer").get(f"/api/runs/{run.id}").json()
    assert shown["versions"] == {"agent:lead": 1, "tool:shout": 1, "skill:style": 1}

    later = finish(run_start(team=team_a, agent="lead", input="Shout", script={
        "lead": [{"expect": "Write in the second-version style.", **call("shout", word="ho")},
                 {"expect": "HO (second version)", "text": "Shouted again."}],
        "shout": [{"expect": "Shout ho, second version", "text": "HO (second version)"}]}))
    assert (later.status, later.result) == ("succeeded", "Shouted again.")
    assert later.versions == {"agent:lead": 1, "tool:shout": 2, "skill:style": 2}


MCP_SERVER = ("---\nname: files\ntransport: streamable-http\nurl: http://127.0.0.1:9/mcp\ntools:\n- {tool}\n"
              "enabled: {enabled}\n---\n")


def test_an_mcp_server_edited_mid_run_is_connected_as_the_run_pinned_it(team_a):
    define(team_a, MCP, MCP_SERVER.format(tool="read", enabled="true"))
    run = Run.objects.create(team=team_a, agent="lead")
    define(team_a, MCP, MCP_SERVER.format(tool="write", enabled="false"))

    [server] = rows_for(team_a.id, ["files"], mcp_pinned(run=run, slugs=["files"]))
    assert server["config"] is not None and server["config"].spec.tools == ["read"]
    assert Run.objects.get(pk=run.pk).versions == {"mcp:files": 1}
    # Without the run's versions the current row (disabled, version 2) is what a new run gets.
    [current] = rows_for(team_a.id, ["files"])
    assert current["config"] is None
    newer = Run.objects.create(team=team_a, agent="lead")
    [server] = rows_for(team_a.id, ["files"], mcp_pinned(run=newer, slugs=["files"]))
    assert server["config"] is None and Run.objects.get(pk=newer.pk).versions == {"mcp:files": 2}


def test_a_pin_already_written_is_never_replaced_and_a_missing_version_is_named(team_a):
    from agents_app.kinds import AGENT

    run = Run.objects.create(team=team_a, agent="lead")
    agent(team_a, "Lead", body="one")  # created after the run started: pinned as the run first finds it
    [pinned] = definitions_pinned(run=run, kind=AGENT, slugs=["lead"]).values()
    assert (pinned.number, pinned.body, Run.objects.get(pk=run.pk).versions) == (1, "one", {"agent:lead": 1})
    agent(team_a, "Lead", body="two")
    # A session holding a copy of the run from before that pin finds version 2; the pin written first wins.
    stale = Run.objects.get(pk=run.pk)
    stale.versions = {}
    [pinned] = definitions_pinned(run=stale, kind=AGENT, slugs=["lead"]).values()
    assert (pinned.number, pinned.body, stale.versions) == (1, "one", {"agent:lead": 1})
    assert Run.objects.get(pk=run.pk).versions == {"agent:lead": 1}

    DefinitionVersion.objects.filter(team=team_a, kind="agent", slug="lead", number=1).delete()
    with pytest.raises(VersionMissing, match=r"^agent 'lead': version 1, which this run uses, is not kept$"):
        definitions_pinned(run=run, kind=AGENT, slugs=["lead"])
    assert Run.objects.get(pk=run.pk).versions == {"agent:lead": 1}
