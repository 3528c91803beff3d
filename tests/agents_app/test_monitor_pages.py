"""The monitor's pages: sign-in, team scoping, starting and cancelling runs."""

import pytest
from django.test import Client

from agents_app.kinds import AGENT
from mas_core.definitions.services import definition_parse, definition_save
from agents_app.models import Run

pytestmark = pytest.mark.django_db


def agent(team, name):
    definition_save(kind=AGENT, team=team, parsed=definition_parse(kind=AGENT, team=team,
                                                                  text=f"---\nname: {name}\n---\n\nYou work.\n"))


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_pages_ask_for_a_sign_in_and_the_login_page_signs_in(team_a, make_member):
    assert Client().get("/runs/").headers["Location"] == "/accounts/login/?next=/runs/"
    user = make_member(team_a, role="viewer", username="vera")
    response = Client().post("/accounts/login/", {"username": "vera", "password": "pw-for-tests-1", "next": "/runs/"})
    assert (response.status_code, response.headers["Location"]) == (302, "/runs/")


def test_a_viewer_sees_only_their_teams_runs_and_no_start_form(team_a, team_b, make_member):
    ours = Run.objects.create(team=team_a, agent="lead", input="our task")
    theirs = Run.objects.create(team=team_b, agent="lead", input="their task")
    client = browser(make_member(team_a, role="viewer"))
    page = client.get("/runs/").content.decode()
    assert f'data-run="{ours.id}"' in page and "our task" in page
    assert str(theirs.id) not in page and "their task" not in page
    assert 'id="start-run"' not in page
    assert client.get(f"/runs/{ours.id}/").status_code == 200
    assert client.get(f"/runs/{theirs.id}/").status_code == 404
    assert client.get("/runs/not-a-run/").status_code == 404
    # Viewers cannot start or cancel, whatever they post; the list takes no post at all.
    assert client.get("/runs/start/").status_code == 404
    assert client.post("/runs/start/", {"target": "agent:lead", "input": "x"}).status_code == 404
    assert client.post("/runs/", {"agent": "lead", "input": "x"}).status_code == 405
    assert client.post(f"/runs/{ours.id}/cancel").status_code == 404
    assert Run.objects.count() == 2 and Run.objects.get(pk=ours.pk).status == "queued"


def test_an_operator_starts_a_run_from_the_page_and_cancels_it(team_a, make_member):
    agent(team_a, "Lead")
    client = browser(make_member(team_a, role="operator"))
    page = client.get("/runs/").content.decode()
    examples = ("vfs_read vfs_write vfs_edit vfs_list vfs_delete vfs_search spawn_agent signal_parent knowledge_query "
                "knowledge_contribute memory_store memory_recall publish subscribe blackboard_write blackboard_read "
                "set_output")  # the safe default tools' (no other agent to delegate to)
    assert 'id="start-run"' in page
    assert f'<option value="agent:lead" selected data-examples="{examples}">Lead (lead)</option>' in page
    assert f'action="/runs/start/?team={team_a.slug}"' in page
    response = client.post(f"/runs/start/?team={team_a.slug}", {"target": "agent:lead", "input": "Find three facts"})
    run = Run.objects.get()
    assert response.headers["Location"] == f"/runs/{run.id}/"
    assert (run.agent, run.workflow, run.input, run.team_id) == ("lead", "", "Find three facts", team_a.id)
    page = client.get(f"/runs/{run.id}/").content.decode()
    assert 'id="cancel-form"' in page and "Find three facts" in page
    assert f"Started run {run.id} of lead." in page
    assert client.post(f"/runs/{run.id}/cancel").headers["Location"] == f"/runs/{run.id}/"
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert 'id="cancel-form"' not in client.get(f"/runs/{run.id}/").content.decode()


def test_starting_what_the_team_has_not_says_so_and_starts_nothing(team_a, team_b, make_member):
    agent(team_b, "Theirs")
    client = browser(make_member(team_a, role="operator"))
    refusals = [
        ({"target": "agent:ghost", "input": "boo"}, "agent &#x27;ghost&#x27; does not exist in this team or run"),
        ({"target": "agent:theirs", "input": "boo"}, "agent &#x27;theirs&#x27; does not exist in this team or run"),
        ({"target": "workflow:ghost"}, "workflow &#x27;ghost&#x27; does not exist in this team"),
        ({"target": "", "input": ""}, "Choose an agent or a workflow to run."),
        ({"target": "agent:ghost", "input": "  "}, "Write the agent&#x27;s task."),
    ]
    for posted, message in refusals:
        response = client.post("/runs/start/", posted)
        page = response.content.decode()
        assert (response.status_code, f'<p class="error start-error" id="start-error" role="alert">{message}</p>'
                in page) == (400, True), page
    assert Run.objects.count() == 0


def test_a_start_past_the_teams_rate_limit_is_refused_with_its_reason(team_a, make_member, settings,
                                                                       whole_rate_window):
    agent(team_a, "Lead")
    settings.MAS_RUNS_PER_MIN = 1
    client = browser(make_member(team_a, role="operator"))
    assert client.post("/runs/start/", {"target": "agent:lead", "input": "one"}).status_code == 302
    response = client.post("/runs/start/", {"target": "agent:lead", "input": "two"})
    assert response.status_code == 429
    assert f"team {team_a.slug} may start 1 runs a minute; retry in" in response.content.decode()
    assert 'two</textarea>' in response.content.decode()  # what was typed is kept
    assert list(Run.objects.values_list("input", flat=True)) == ["one"]


def test_a_user_in_two_teams_picks_one_with_team(team_a, team_b, make_member):
    from mas_core.teams import membership_set

    user = make_member(team_a, role="viewer")
    membership_set(team=team_b, user=user, role="viewer")
    theirs = Run.objects.create(team=team_b, agent="lead", input="b task")
    client = browser(user)
    assert "b task" not in client.get("/runs/").content.decode()  # the first team by slug
    assert "b task" in client.get(f"/runs/?team={team_b.slug}").content.decode()
    assert client.get("/runs/?team=nobody").status_code == 404
    assert client.get(f"/runs/{theirs.id}/").status_code == 200


def json_script(page: str, element_id: str):
    import json
    import re

    match = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', page, re.S)
    assert match, f"no json_script {element_id}"
    return json.loads(match.group(1))


WORKFLOW_TEXT = """---
name: Research chain
inputs: [topic]
steps:
  - id: research
    agent: researcher
    prompt: "Research {topic}"
    outputs: [findings]
  - id: review
    agent: reviewer
    depends_on: [research]
    prompt: "Review {research.findings}"
  - id: summary
    agent: reviewer
    depends_on: [research, review]
    prompt: "Sum up"
---
"""


def test_a_workflow_runs_page_carries_its_own_teams_dag(team_a, team_b, make_member):
    from workflows_app.kinds import WORKFLOW

    for team in (team_a, team_b):
        agent(team, "Researcher")
        agent(team, "Reviewer")
    definition_save(kind=WORKFLOW, team=team_a, parsed=definition_parse(kind=WORKFLOW, team=team_a,
                                                                        text=WORKFLOW_TEXT))
    # Another team's workflow of the same slug, with other steps: never shown to team_a.
    definition_save(kind=WORKFLOW, team=team_b, parsed=definition_parse(
        kind=WORKFLOW, team=team_b,
        text="---\nname: Research chain\nsteps:\n  - id: theirs\n    agent: researcher\n---\n"))
    flow = Run.objects.create(team=team_a, workflow="research-chain", input="topic: tides")
    plain = Run.objects.create(team=team_a, agent="researcher", input="x")
    client = browser(make_member(team_a, role="viewer"))

    page = client.get(f"/runs/{flow.id}/").content.decode()
    assert json_script(page, "workflow") == {"name": "Research chain", "steps": [
        {"id": "research", "agent": "researcher", "depends_on": []},
        {"id": "review", "agent": "reviewer", "depends_on": ["research"]},
        {"id": "summary", "agent": "reviewer", "depends_on": ["research", "review"]},
    ], "loops": []}
    assert '<svg id="dag"' in page and json_script(page, "run-id") == str(flow.id)
    page = client.get(f"/runs/{plain.id}/").content.decode()
    assert json_script(page, "workflow") is None and '<svg id="dag"' not in page



def test_a_looping_workflows_page_carries_its_loops_as_the_run_froze_them(team_a, make_member):
    from workflows_app.kinds import WORKFLOW
    from workflows_app.services import workflow_run_start
    from workflows_app.templates import workflow_template

    agent(team_a, "Writer")
    agent(team_a, "Reviewer")
    definition_save(kind=WORKFLOW, team=team_a, parsed=definition_parse(
        kind=WORKFLOW, team=team_a, text=workflow_template("review-loop").markdown))
    run = workflow_run_start(team=team_a, workflow="review-loop", inputs={"brief": "b", "audience": "a"})
    page = browser(make_member(team_a, role="viewer")).get(f"/runs/{run.id}/").content.decode()
    graph = json_script(page, "workflow")
    assert [s["id"] for s in graph["steps"]] == ["draft", "review", "final"]
    assert graph["loops"] == [{"steps": ["draft", "review"], "until": 'review.verdict == "approve"', "max_rounds": 3}]

def test_cancel_needs_the_csrf_token_and_a_refused_post_changes_nothing(team_a, make_member):
    from agents_app.models import Event

    run = Run.objects.create(team=team_a, agent="lead", input="x")
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_member(team_a, role="operator"))
    assert client.post(f"/runs/{run.id}/cancel").status_code == 403
    assert client.get(f"/runs/{run.id}/cancel").status_code == 405
    run.refresh_from_db()
    assert (run.status, run.finished_at, run.error) == ("queued", None, "")
    assert not Event.objects.filter(run=run).exists()


def test_the_runs_page_tells_its_socket_when_it_was_drawn(team_a, make_member):
    import time

    before = time.time()
    page = browser(make_member(team_a, role="viewer")).get("/runs/").content.decode()
    assert before <= json_script(page, "since") <= time.time()
    assert json_script(page, "team-slug") == team_a.slug


def test_save_as_eval_case_is_offered_to_editors_on_a_finished_run(team_a, make_member):
    """The form (monitor/evalcase.js posts it to POST /api/runs/<id>/eval-case) is there for those who may edit
    datasets; hidden while the run works, shown once it has finished."""
    from django.templatetags.static import static

    done = Run.objects.create(team=team_a, agent="writer", input="a task", status="failed")
    working = Run.objects.create(team=team_a, agent="writer", input="a task", status="running")
    for role in ("editor", "admin"):
        client = browser(make_member(team_a, role=role))
        page = client.get(f"/runs/{done.id}/").content.decode()
        assert f'<section id="eval-case" class="card" data-run="{done.id}" data-team="alpha"' in page, role
        assert 'name="dataset" list="eval-datasets" required maxlength="100" value="writer-cases"' in page
        assert f'placeholder="run-{str(done.id)[:8]}"' in page
        # Loaded before run.js, whose events it listens to.
        assert page.index(static("monitor/evalcase.js")) < page.index(static("monitor/run.js"))
        page = client.get(f"/runs/{working.id}/").content.decode()
        assert f'<section id="eval-case" class="card" hidden data-run="{working.id}"' in page, role
    for role in ("viewer", "operator"):
        page = browser(make_member(team_a, role=role)).get(f"/runs/{done.id}/").content.decode()
        assert 'id="eval-case"' not in page and 'id="eval-case-form"' not in page, role


def test_the_runs_list_leaves_out_the_cases_of_evals(team_a, make_member):
    ordinary = Run.objects.create(team=team_a, agent="writer", input="an ordinary task")
    case = Run.objects.create(team=team_a, agent="writer", input="the task of an eval case", is_eval=True)
    client = browser(make_member(team_a, role="viewer"))
    page = client.get("/runs/").content.decode()
    assert f'data-run="{ordinary.id}"' in page and f'data-run="{case.id}"' not in page
    assert "the task of an eval case" not in page
    assert client.get(f"/runs/{case.id}/").status_code == 200  # its own page stays reachable (the eval links it)
