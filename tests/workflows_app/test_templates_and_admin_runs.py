"""Templates from the API and the admin; starting a workflow from its admin page."""

import tomllib
from fnmatch import fnmatch
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

import workflows_app
from mas_core.definitions import storage
from workflows_app.kinds import WORKFLOW
from agents_app.models import Run, Team
from tests.agents_app.test_admin_definitions import admin_url, client_for
from tests.listing import markdown_files
from tests.runs import agent, define
from workflows_app.models import Workflow, WorkflowRun
from workflows_app.templates import templates_folder

TEMPLATES = ["chain", "debate", "fan-out", "review-loop"]
ROOT = Path(__file__).resolve().parents[2]


def test_templates_ship_with_the_code_outside_every_team_folder():
    folder = Path(templates_folder())
    assert folder == Path(workflows_app.__file__).parent / "builtin_templates"
    assert not folder.resolve().is_relative_to(storage.shipped_defs_dir())
    assert [path.stem for path in markdown_files(folder)] == TEMPLATES
    # Installed with the package (a wheel or `pip install .` carries exactly what package-data names).
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for path in markdown_files(folder):
        assert any(fnmatch(f"builtin_templates/{path.name}", glob) for glob in package_data["workflows_app"])


@pytest.mark.django_db
def test_the_demo_team_deleting_or_editing_its_chain_changes_no_template(team_b, api_for, demo_secrets):
    """The probe's case: the demo team's `chain` is the team's own copy, not the template."""
    call_command("setup_demo", stdout=StringIO())
    demo = api_for(Team.objects.get(slug="demo"), "editor")
    other = api_for(team_b, "editor")
    listed = other.get("/api/workflow-templates")
    assert listed.status_code == 200
    before = listed.json()
    chain = next(t for t in before if t["slug"] == "chain")
    assert chain["markdown"] == (Path(templates_folder()) / "chain.md").read_text(encoding="utf-8")

    edited = demo.patch("/api/workflows/chain", {"description": "The demo team's own chain now."})
    assert edited.status_code == 200, edited.content
    assert other.get("/api/workflow-templates").json() == before
    assert demo.delete("/api/workflows/chain").status_code == 200
    assert not Workflow.objects.filter(team__slug="demo", slug="chain").exists()

    assert other.get("/api/workflow-templates").json() == before
    for name in ("Researcher", "Writer", "Reviewer"):
        agent(team_b, name)
    created = other.post("/api/workflow-templates/chain/workflows", {})
    assert created.status_code == 201, created.content
    assert other.get("/api/workflows/chain/markdown").content.decode() == chain["markdown"]
    # The demo team gets the template back, as shipped.
    assert demo.post("/api/workflow-templates/chain/workflows", {}).status_code == 201
    assert demo.get("/api/workflows/chain").json()["description"] == chain["description"]


@pytest.mark.django_db
def test_the_api_lists_the_templates_and_creates_a_workflow_from_one(team_a, api_for):
    viewer, editor = api_for(team_a, "viewer"), api_for(team_a, "editor")
    listed = viewer.get("/api/workflow-templates").json()
    assert [t["slug"] for t in listed] == TEMPLATES
    assert [t["name"] for t in listed] == ["Chain", "Debate", "Fan-out", "Review loop"]
    assert all(t["markdown"].startswith("---\nname: ") and t["description"] for t in listed)

    # Its agents must exist in the team: a clear 422 naming the first missing one, nothing saved.
    response = editor.post("/api/workflow-templates/review-loop/workflows", {})
    assert response.status_code == 422
    assert "agent 'writer' does not exist in this team" in response.json()["detail"][0]["msg"]
    assert not Workflow.objects.exists()

    agent(team_a, "Writer")
    agent(team_a, "Reviewer")
    response = editor.post("/api/workflow-templates/review-loop/workflows", {"name": "Essay: review"})
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["slug"], body["name"], [s["id"] for s in body["steps"]]) == (
        "essay-review", "Essay: review", ["draft", "review", "final"])
    assert editor.post("/api/workflow-templates/review-loop/workflows", {"name": "Essay: review"}).status_code == 409
    assert editor.post("/api/workflow-templates/nope/workflows", {}).status_code == 404
    assert editor.post("/api/workflow-templates/chain/workflows", {"x": 1}).status_code == 422
    assert viewer.post("/api/workflow-templates/chain/workflows", {}).status_code == 403
    assert Workflow.objects.count() == 1


@pytest.mark.django_db
def test_the_admin_add_page_offers_the_templates_and_fills_one_in(team_a, make_member):
    client = client_for(make_member(team_a, "editor"))
    page = client.get(admin_url(WORKFLOW, "add")).content.decode()
    for slug in TEMPLATES:
        assert f'href="?template={slug}"' in page
    page = client.get(admin_url(WORKFLOW, "add") + "?template=fan-out")
    initial = page.context["adminform"].form.fields["markdown"].initial
    assert initial.startswith("---\nname: Fan-out\n") and "research_c" in initial
    # Other definition kinds are not touched by the workflow form.
    from agents_app.kinds import AGENT

    assert "Start from a template" not in client.get(admin_url(AGENT, "add")).content.decode()


FLOW = "---\nname: Solo\ninputs: [topic, audience]\nsteps:\n- id: only\n  agent: lead\n  prompt: 'Do {topic}'\n---\n"


@pytest.mark.django_db(transaction=True)
def test_an_operator_runs_a_workflow_from_its_admin_page(team_a, team_b, make_member, unserved):
    """The workflow's Run… (its page, its list, the old address of the admin's run page) leads to the monitor's
    start form with it chosen; the form asks for its inputs and starts it as the API does."""
    agent(team_a, "Lead")
    define(team_a, WORKFLOW, FLOW)
    workflow = Workflow.objects.get(team=team_a)
    start = f"/runs/start/?team={team_a.slug}&workflow=solo"
    member = make_member(team_a, "operator")
    operator = client_for(member)
    assert f'<a href="{start.replace("&", "&amp;")}" class="mas-run-button" id="mas-run-button">Run…</a>' in \
        operator.get(admin_url(WORKFLOW, "change", workflow.pk)).content.decode()
    assert f'<a class="mas-run-link" href="{start.replace("&", "&amp;")}">Run…</a>' in \
        operator.get(admin_url(WORKFLOW, "changelist")).content.decode()
    old = operator.get(f"/admin/workflows_app/workflow/{workflow.pk}/run/")
    assert (old.status_code, old.headers["Location"]) == (302, start)
    page = operator.get(start).content.decode()
    assert '<option value="workflow:solo" selected>Solo (solo)</option>' in page
    assert 'name="wf:solo:topic"' in page and 'name="wf:solo:audience"' in page
    # Every declared input is needed: the form again, saying which, and no run.
    response = operator.post("/runs/start/", {"target": "workflow:solo", "wf:solo:topic": "tides",
                                              "wf:solo:audience": " "})
    assert response.status_code == 400 and "missing input(s): audience" in response.content.decode()
    assert Run.objects.count() == 0
    response = operator.post("/runs/start/", {"target": "workflow:solo", "wf:solo:topic": "tides",
                                              "wf:solo:audience": "children", "input": "ignored"})
    run = Run.objects.get()
    assert response.status_code == 302 and response.headers["Location"] == f"/runs/{run.id}/"
    assert (run.workflow, run.agent, run.input, run.created_by) == ("solo", "", "topic: tides\naudience: children",
                                                                     member)
    assert WorkflowRun.objects.get(run=run).trigger == "manual"
    assert list(run.activations.values_list("status", "queue")) == [("ready", unserved)]  # for a worker
    # A viewer has no button and may not run it; another team's member does not see it.
    viewer = client_for(make_member(team_a, "viewer"))
    assert "mas-run-button" not in viewer.get(admin_url(WORKFLOW, "change", workflow.pk)).content.decode()
    assert "mas-run-link" not in viewer.get(admin_url(WORKFLOW, "changelist")).content.decode()
    assert viewer.get(f"/admin/workflows_app/workflow/{workflow.pk}/run/").status_code == 403
    assert viewer.post("/runs/start/", {"target": "workflow:solo", "wf:solo:topic": "x",
                                        "wf:solo:audience": "y"}).status_code == 404
    stranger = client_for(make_member(team_b, "operator"))
    assert stranger.get(f"/admin/workflows_app/workflow/{workflow.pk}/run/").status_code in (302, 404)
    response = stranger.post("/runs/start/", {"target": "workflow:solo", "wf:solo:topic": "x",
                                              "wf:solo:audience": "y"})
    assert response.status_code == 400 and "workflow &#x27;solo&#x27; does not exist in this team" in \
        response.content.decode()
    assert Run.objects.count() == 1
