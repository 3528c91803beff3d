"""Issue 23, point 8: a dataset naming an agent, workflow or judge provider the team does not have is refused
when saved — through the API, the admin and the markdown sync — not only when it runs.

Another team's names count as unknown, with the same message (nothing says they exist elsewhere).
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from agents_app.kinds import PROVIDER
from agents_app.models import DefinitionVersion
from evals_app.models import EvalDataset
from mas_core.definitions import storage
from mas_core.definitions.sync import markdown_sync
from tests.runs import agent, define

pytestmark = pytest.mark.django_db

CASES = [{"id": "one", "task": "Say hi", "checks": [{"type": "contains", "value": "hi"}]}]
PROVIDER_TEXT = "---\nname: {name}\ntype: scripted\nmodels:\n- name: judge-m\n---\n"


@pytest.fixture
def other_teams_names(team_b):
    """team_b has an agent, a workflow and a provider that team_a's datasets must not be able to name."""
    from workflows_app.kinds import WORKFLOW

    agent(team_b, "Secret agent")
    define(team_b, WORKFLOW, "---\nname: Secret flow\nsteps:\n- id: a\n  agent: secret-agent\n  prompt: Go.\n---\n")
    define(team_b, PROVIDER, PROVIDER_TEXT.format(name="Secret judges"))


def saved_nothing(team) -> bool:
    return (not EvalDataset.objects.filter(team=team).exists()
            and not DefinitionVersion.objects.filter(team=team, kind="eval").exists()
            and not (storage.team_defs_dir(team) / "evals").exists())


@pytest.mark.parametrize("fields,loc,message", [
    ({"agent": "secret-agent"}, ["body", "agent"],
     "no agent 'secret-agent' in this team (its agents: writer)"),
    ({"agent": "nobody"}, ["body", "agent"], "no agent 'nobody' in this team (its agents: writer)"),
    ({"workflow": "secret-flow"}, ["body", "workflow"],
     "no workflow 'secret-flow' in this team (its workflows: none)"),
    ({"agent": "writer", "judge": {"model": "secret-judges:judge-m"}}, ["body", "judge", "model"],
     "no model provider 'secret-judges' in this team (its providers: judges)"),
])
def test_the_api_refuses_names_the_team_does_not_have(team_a, other_teams_names, api_for, fields, loc, message):
    agent(team_a, "Writer")
    define(team_a, PROVIDER, PROVIDER_TEXT.format(name="Judges"))
    editor = api_for(team_a, "editor")
    refused = editor.post("/api/evals", {"name": "Probe", **fields, "cases": CASES})
    assert refused.status_code == 422, refused.content
    assert refused.json() == {"detail": [{"loc": loc, "msg": message, "type": "invalid_definition"}]}
    assert saved_nothing(team_a)


def test_edits_and_markdown_uploads_are_refused_too_and_change_nothing(team_a, other_teams_names, api_for):
    agent(team_a, "Writer")
    define(team_a, PROVIDER, PROVIDER_TEXT.format(name="Judges"))
    editor = api_for(team_a, "editor")
    created = editor.post("/api/evals", {"name": "Probe", "agent": "writer",
                                         "judge": {"model": "judges:judge-m"}, "cases": CASES})
    assert created.status_code == 201, created.content
    assert editor.patch("/api/evals/probe", {"agent": "secret-agent"}).status_code == 422
    text = editor.get("/api/evals/probe/markdown").content.decode()
    uploaded = editor.put("/api/evals/probe/markdown", text.replace("judges:judge-m", "secret-judges:judge-m"),
                          content_type="text/markdown")
    assert uploaded.status_code == 422
    assert uploaded.json()["detail"][0]["msg"] == (
        "no model provider 'secret-judges' in this team (its providers: judges)")
    row = EvalDataset.objects.get(team=team_a, slug="probe")
    assert (row.version, row.spec["agent"], row.spec["judge"]["model"]) == (1, "writer", "judges:judge-m")


def test_the_admin_shows_the_refusal_on_the_markdown(team_a, other_teams_names, make_member):
    agent(team_a, "Writer")
    client = Client()
    client.force_login(make_member(team_a, "editor"))
    text = "---\nname: Probe\nworkflow: secret-flow\ncases:\n- id: one\n  inputs: {}\n  checks:\n" \
           "  - type: status\n    equals: succeeded\n---\n"
    response = client.post(reverse("admin:evals_app_evaldataset_add"), {"team": team_a.pk, "markdown": text})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["markdown"] == [
        "Line 3, field workflow: no workflow 'secret-flow' in this team (its workflows: none)"]
    assert saved_nothing(team_a)


def test_the_sync_refuses_the_file_and_accepts_names_imported_in_the_same_run(team_a, other_teams_names):
    root = storage.team_defs_dir(team_a)
    (root / "evals").mkdir(parents=True)
    (root / "agents").mkdir()
    (root / "evals" / "probe.md").write_text(
        "---\nname: Probe\nagent: secret-agent\ncases:\n- id: one\n  task: t\n  checks:\n"
        "  - type: status\n    equals: succeeded\n---\n")
    (root / "evals" / "mine.md").write_text(
        "---\nname: Mine\nagent: writer\ncases:\n- id: one\n  task: t\n  checks:\n"
        "  - type: status\n    equals: succeeded\n---\n")
    (root / "agents" / "writer.md").write_text("---\nname: Writer\n---\n\nYou write.\n")
    for mode in ("check", "both"):
        report = markdown_sync(team=team_a, mode=mode)
        assert [str(item) for item in report.errors] == [
            "evals/probe.md:3: agent: no agent 'secret-agent' in this team (its agents: writer)"]
        assert [item.path for item in report.imported] == ["agents/writer.md", "evals/mine.md"]
    assert list(EvalDataset.objects.filter(team=team_a).values_list("slug", flat=True)) == ["mine"]
