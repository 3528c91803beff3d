"""The manual's examples, run as written: the websocket follower, the token that starts runs (on every page
that shows it: the README, the quickstart, the API reference), the own team's commands, and the workflow form's
cells as the manual names them. tests/test_docs.py checks every example of every page for what its syntax
promises; these run the ones that say more."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import call_command

from agents_app.kinds import AGENT
from mas_core.definitions.services import definition_parse, definition_save
from tests.conftest import ApiClient
from tests.manual import example, page, pages
from tests.web import WebServer

# The pages that show how to get a token and start a run with it (each is run; the list must not shrink to none).
TOKEN_PAGES = [name for name in pages() if "manage.py create_api_token demo" in page(name)]


def define(team, name: str) -> None:
    definition_save(kind=AGENT, team=team, parsed=definition_parse(
        kind=AGENT, team=team, text=f"---\nname: {name}\n---\n\nYou work.\n"))


@pytest.fixture
def web(transactional_db):
    server = WebServer(label="docs")
    server.start()
    yield server
    server.stop()


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_the_websocket_example_prints_a_live_runs_events(team_a, make_member, make_token, celery_worker_process,
                                                         web, tmp_path):
    from agents_app.models import Event, Run

    define(team_a, "Lead")
    token = make_token(team_a, make_member(team_a, role="operator"))
    script = {"lead": [
        {"latency_ms": 1500, "tool_calls": [{"name": "vfs_write", "arguments": {"path": "notes.md", "content": "tides"}}]},
        {"latency_ms": 300, "text": "The moon pulls the sea."}]}
    answer = web.request("POST", "/api/runs", json.dumps({"agent": "lead", "input": "Explain tides", "script": script}),
                         token=token, content_type="application/json")
    assert answer.status == 201, answer.body
    run_id = json.loads(answer.body)["id"]
    assert Run.objects.get(pk=run_id).status in {"queued", "running"}  # followed live, not read afterwards
    follow = tmp_path / "follow.py"
    follow.write_text(example("docs/concepts/monitor.md", language="python", containing="websockets.connect").text)
    done = subprocess.run([sys.executable, str(follow), run_id, token, f"ws://127.0.0.1:{web.port}"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    printed = [tuple(line.split(" ")) for line in done.stdout.splitlines()]
    expected = [(str(seq), type_) for seq, type_ in
                Event.objects.filter(run_id=run_id, seq__lte=int(printed[-1][0])).order_by("seq")
                .values_list("seq", "type")]
    assert printed == expected
    assert printed[0] == ("1", "run_start") and printed[-1][1] == "run_complete"
    assert {"session_start", "llm_request", "llm_response", "tool_call", "tool_result", "file_change",
            "session_end"} <= {type_ for _, type_ in printed}
    assert Run.objects.get(pk=run_id).status == "succeeded"


def test_the_pages_show_the_token_on_the_readme_the_quickstart_and_the_api_reference():
    assert TOKEN_PAGES == ["README.md", "docs/quickstart.md", "docs/reference/api.md"]


@pytest.mark.parametrize("name", TOKEN_PAGES)
def test_the_token_of_the_page_has_a_role_that_starts_runs(name, team_a, make_member):
    text = page(name)
    [line] = [line for line in text.splitlines() if "manage.py create_api_token" in line and "--role" in line]
    argv = shlex.split(line[line.index("manage.py") + len("manage.py"):].split("|")[0].strip(" )"))
    assert argv == ["create_api_token", "demo", "--team", "demo", "--role", "operator"]
    make_member(team_a, role="admin", username="demo")
    define(team_a, "Researcher")
    out = StringIO()
    call_command(*[team_a.slug if arg == "demo" and argv[i - 1] == "--team" else arg for i, arg in enumerate(argv)],
                 stdout=out)
    token = out.getvalue().splitlines()[-1]
    # The page's next lines: list the agents, start a run.
    assert ApiClient(token).get("/api/agents").status_code == 200
    payload = json.loads(re.search(r"-d '(\{\"agent\".*?\})'", text).group(1))
    assert payload == {"agent": "researcher", "input": "How do ocean tides work?"}
    started = ApiClient(token).post("/api/runs", payload)
    assert started.status_code == 201, started.content
    assert (started.json()["agent"], started.json()["input"], started.json()["created_by"]) == (
        "researcher", "How do ocean tides work?", "demo")
    # The role it showed before could not.
    editor = StringIO()
    call_command("create_api_token", "demo", "--team", team_a.slug, "--role", "editor", stdout=editor)
    refused = ApiClient(editor.getvalue().splitlines()[-1]).post("/api/runs", payload)
    assert refused.status_code == 403


def test_the_own_team_commands_create_a_team_its_admin_and_a_token(db):
    from django.contrib.auth import get_user_model
    from django.test import Client

    from agents_app.models import Membership, Team

    text = page("docs/your-team.md")
    block = example("docs/your-team.md", language="sh", containing="create_team").text
    [line] = [line for line in block.splitlines() if "manage.py" in line]
    argv = shlex.split(line[line.index("manage.py") + len("manage.py"):])
    assert argv == ["create_team", "research", "--admin", "alice", "--name", "Research"]
    out = StringIO()
    call_command(*argv, stdout=out)
    link = out.getvalue().splitlines()[-1]
    assert re.fullmatch(r"http://127\.0\.0\.1:8000/accounts/reset/[\w-]+/[\w-]+/", link), link
    assert "`http://127.0.0.1:8000/accounts/reset/…/`" in text
    team = Team.objects.get(slug="research")
    assert (team.name, list(Membership.objects.filter(team=team).values_list("user__username", "role"))) == (
        "Research", [("alice", "admin")])
    # The link, as alice follows it.
    client = Client()
    form_url = client.get(link.removeprefix("http://127.0.0.1:8000"))["Location"]
    client.post(form_url, {"new_password1": "tide-pools-at-dawn-42", "new_password2": "tide-pools-at-dawn-42"})
    assert get_user_model().objects.get(username="alice").check_password("tide-pools-at-dawn-42")
    # The token line of the page, through manage.py as it says.
    [token_line] = re.findall(r"`(create_api_token [^`]*)`", text)
    token_out = StringIO()
    call_command(*shlex.split(token_line), stdout=token_out)
    token = token_out.getvalue().splitlines()[-1]
    assert ApiClient(token).get("/api/agents").status_code == 200
    from mas_core.teams import api_token_authenticate

    row = api_token_authenticate(token)
    assert (row.team.slug, row.user.username, row.role) == ("research", "alice", "operator")


def test_the_manual_names_the_workflow_forms_cells():
    from workflows_app.admin_workflow_form import LOOP_COLUMNS, STEP_COLUMNS

    prose = " ".join(page("docs/concepts/definitions.md").split())
    found = re.search(r"each step as a row \(([^)]*)\) and each loop as a row \(([^)]*)\)", prose)
    assert found, "the manual's sentence on the workflow form"
    assert found.group(1).split(", ") == [column.label.lower() for column in STEP_COLUMNS]
    assert found.group(2).split(", ") == [column.label.lower() for column in LOOP_COLUMNS]
