"""The start form's "Try without a model": the example that shows one of an agent's tools, written by the server
for the chosen agent, and a start that carries the script typed (as ``POST /api/runs`` takes one)."""

import json

import pytest
from django.test import Client

from agents_app.kinds import AGENT, SKILL
from agents_app.models import Run
from agents_app.script_examples import script_example
from agents_app.starts import MAX_SCRIPT_CHARS
from tests.runs import define

pytestmark = pytest.mark.django_db

GREETER = "---\nname: Greeter\ntools: [vfs_write, vfs_read, delegate, skill_load]\nskills: [citation-style]\n---\n\nHi.\n"
EXAMPLE = "/runs/start/example/"


@pytest.fixture
def operator(team_a, make_member):
    define(team_a, SKILL, "---\nname: Citation style\ndescription: How to cite.\n---\n\nCite the source.\n")
    define(team_a, AGENT, GREETER)
    define(team_a, AGENT, "---\nname: Writer\n---\n\nYou write.\n")
    client = Client()
    client.force_login(make_member(team_a, role="operator"))
    return client


def test_the_form_offers_each_agent_the_examples_its_tools_can_show(operator, team_a):
    page = operator.get(f"/runs/start/?team={team_a.slug}&agent=greeter").content.decode()
    assert ('<option value="agent:greeter" selected data-examples="vfs_read vfs_write delegate skill_load">'
            'Greeter (greeter)</option>') in page
    # The writer names no tools: the safe defaults, with the greeter to delegate to.
    assert ('<option value="agent:writer" data-examples="vfs_read vfs_write vfs_edit vfs_list vfs_delete vfs_search '
            'spawn_agent signal_parent delegate knowledge_query knowledge_contribute memory_store memory_recall '
            'publish subscribe blackboard_write blackboard_read set_output">Writer (writer)</option>') in page
    assert '<details class="start-try" id="start-try">' in page  # closed: the script is not sent
    assert f'data-url="/runs/start/example/?team={team_a.slug}"' in page


def test_an_example_is_the_script_of_the_chosen_agent_and_tool(operator, team_a):
    for tool, extra in (("vfs_read", {}), ("delegate", {"other": "writer"}), ("skill_load", {"skill": "citation-style"})):
        answer = operator.get(EXAMPLE, {"team": team_a.slug, "agent": "greeter", "tool": tool})
        assert (answer.status_code, answer.json()) == (200, {
            "script": script_example(tool=tool, agent="greeter", **extra), "task": f"Show how {tool} works."}), tool


def test_an_example_the_agent_cannot_show_is_refused_with_the_reason(operator, team_a, team_b, make_member):
    define(team_b, AGENT, "---\nname: Theirs\n---\n\nNot yours.\n")
    refusals = [
        ({"agent": "greeter", "tool": "code_exec"}, 400, "Agent greeter cannot show code_exec: it lacks the tools "
                                                         "code_exec."),
        ({"agent": "greeter", "tool": "vfs_edit"}, 400, "Agent greeter cannot show vfs_edit: it lacks the tools "
                                                        "vfs_edit."),
        ({"agent": "writer", "tool": "skill_load"}, 400, "Agent writer cannot show skill_load: it lacks the tools "
                                                         "skill_load."),
        ({"agent": "greeter", "tool": "rm_rf"}, 400, "'rm_rf' is not a built-in tool."),
        ({"agent": "theirs", "tool": "vfs_read"}, 404, "No agent 'theirs' in team alpha."),
        ({"agent": "", "tool": ""}, 404, "No agent '' in team alpha."),
    ]
    for query, status, detail in refusals:
        answer = operator.get(EXAMPLE, {"team": team_a.slug, **query})
        assert (answer.status_code, answer.json()) == (status, {"detail": detail}), query
    assert operator.get(EXAMPLE, {"team": team_b.slug, "agent": "theirs", "tool": "vfs_read"}).status_code == 404
    assert operator.post(f"{EXAMPLE}?team={team_a.slug}", {"agent": "greeter", "tool": "vfs_read"}).status_code == 405
    viewer = Client()
    viewer.force_login(make_member(team_a, role="viewer"))
    assert viewer.get(EXAMPLE, {"agent": "greeter", "tool": "vfs_read"}).status_code == 404
    assert Client().get(EXAMPLE).headers["Location"] == "/accounts/login/?next=/runs/start/example/"


def test_a_start_with_a_script_gives_the_run_its_turns(operator, team_a):
    script = script_example(tool="vfs_write", agent="greeter")
    response = operator.post(f"/runs/start/?team={team_a.slug}", {
        "target": "agent:greeter", "input": "Show how vfs_write works.", "script": json.dumps(script, indent=2)})
    run = Run.objects.get()
    assert response.headers["Location"] == f"/runs/{run.id}/"
    assert (run.agent, run.input, run.script) == ("greeter", "Show how vfs_write works.", script)
    # Left empty (or only spaces), the run calls the agent's model.
    operator.post(f"/runs/start/?team={team_a.slug}", {"target": "agent:greeter", "input": "Go", "script": " \n"})
    assert Run.objects.get(input="Go").script is None


def test_a_bad_script_is_refused_with_its_reason_and_kept_in_the_form(operator, team_a):
    refusals = [
        ('{"greeter": [', "The script is not valid JSON: Expecting value (line 1, column 14)."),
        ('["greeter"]', "The script is a JSON object: each agent&#x27;s slug and its list of turns."),
        ('{"greeter": [{"text": NaN}]}', "The script is refused: NaN is not a JSON number."),
        ('{"greeter": ' + "[" * 100 + "]" * 100 + "}",
         "The script is refused: it is nested more than 64 levels deep (limit MAS_MAX_JSON_DEPTH)."),
        ('{"greeter": [{"tool_calls": "vfs_write"}]}',  # the script checker's own message, as the API's
         "script for agent greeter, turn 0: tool_calls must be a list of at most 128 calls"),
        ("{" + " " * MAX_SCRIPT_CHARS + "}", f"The script is {MAX_SCRIPT_CHARS + 2} characters long; the limit is "
                                            f"{MAX_SCRIPT_CHARS}."),
    ]
    for script, message in refusals:
        response = operator.post(f"/runs/start/?team={team_a.slug}", {"target": "agent:greeter", "input": "Go",
                                                                       "script": script})
        page = response.content.decode()
        assert response.status_code == 400, (script[:40], page)
        error = page.split('<p class="error start-error" id="start-error" role="alert">', 1)[1].split("</p>", 1)[0]
        assert error == message, script[:40]
        assert '<details class="start-try" id="start-try" open>' in page  # the script is shown again, as typed
        if len(script) < 1000:
            assert f'id="start-script" rows="10" spellcheck="false" maxlength="100000">{script.replace(chr(34), "&quot;")}' \
                   f'</textarea>' in page
    assert Run.objects.count() == 0
