"""The repository's tracked defs/ is never written or deleted by the server, whatever a team's folder says.

These tests point BASE_DIR at a copy of the repository's defs/ (a stand-in
repository under tmp_path), so that the server without its guard would write
into the copy, never into the real tracked files.
"""

from __future__ import annotations

import html
import os
import shutil
from pathlib import Path

import pytest

from mas_core.definitions import storage
from agents_app.kinds import AGENT, SKILL
from workflows_app.kinds import WORKFLOW
from mas_core.definitions.services import definition_delete, definition_parse, definition_save
from mas_core.definitions.sync import markdown_sync
from agents_app.models import Agent, DefinitionVersion, Skill
from tests.agents_app.test_admin_definitions import admin_url, client_for
from workflows_app.models import Workflow

DEFS = Path(__file__).resolve().parents[2] / "defs"
REASON = (
    "defs/ is the repository's tracked folder of shipped examples, which the server never writes or deletes; "
    "give the team a definitions folder of its own (its defs_dir, or a blank defs_dir for MAS_DEFS_ROOT/<team "
    "slug>; `manage.py setup_demo` copies the examples into one)"
)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def repo(settings, tmp_path) -> Path:
    """A stand-in repository: its defs/ is a copy of the real one, and BASE_DIR points at it."""
    root = tmp_path / "repo"
    shutil.copytree(DEFS, root / "defs")
    settings.BASE_DIR = root
    return root


@pytest.fixture
def on_repo_defs(make_team, repo, settings):
    """A team whose folder is the repository's defs/ (as the demo team's used to be), its rows imported."""
    settings.MAS_TEAM_SECRETS = "OPENAI_API_KEY=onrepo,GITHUB_TOKEN=onrepo"  # what the shipped files name
    team = make_team("onrepo", defs_dir="defs")  # relative: BASE_DIR/defs
    report = markdown_sync(team=team, mode="import")
    assert (len(report.imported), report.errors) == (18, [])
    return team


def test_the_real_repository_defs_are_protected():
    assert storage.shipped_defs_dir() == DEFS.resolve()
    assert storage.read_only_reason(DEFS) == REASON
    assert storage.read_only_reason(DEFS / "agents" / "new.md") == REASON
    assert storage.read_only_reason(DEFS.parent / "var" / "defs" / "demo") is None
    assert storage.read_only_reason(DEFS.parent / "defs-other") is None


def test_storage_refuses_every_write_and_delete_there(repo, tmp_path):
    defs = repo / "defs"
    before = snapshot(defs)
    item = storage.ItemFiles(text="---\nname: x\n---\n\nX.\n")
    cases = [
        (lambda: storage.atomic_write(defs / "agents" / "x.md", "x"), "write defs/agents/x.md"),
        (lambda: storage.write_item(AGENT, defs, "researcher", item), "write defs/agents/researcher.md"),
        (lambda: storage.write_item(SKILL, defs, "citation-style", item), "write defs/skills/citation-style/SKILL.md"),
        (lambda: storage.delete_item(AGENT, defs, "writer"), "delete defs/agents/writer.md"),
        (lambda: storage.delete_item(SKILL, defs, "citation-style"), "delete defs/skills/citation-style/SKILL.md"),
        (lambda: storage.delete_item(WORKFLOW, defs, "chain"), "delete defs/workflows/chain.md"),
    ]
    for call, what in cases:
        with pytest.raises(storage.ReadOnlyFolderError) as raised:
            call()
        assert str(raised.value) == f"refusing to {what}: {REASON}"
    # A link into defs/ is the same folder.
    link = tmp_path / "link"
    os.symlink(defs, link)
    with pytest.raises(storage.ReadOnlyFolderError, match="^refusing to delete defs/agents/writer.md: "):
        storage.delete_item(AGENT, link, "writer")
    assert snapshot(defs) == before
    assert not list(defs.rglob(".*.tmp"))
    # Elsewhere the same calls work.
    elsewhere = tmp_path / "team"
    storage.write_item(AGENT, elsewhere, "x", item)
    storage.delete_item(AGENT, elsewhere, "x")
    assert snapshot(elsewhere) == {}


@pytest.mark.django_db
def test_saves_and_deletes_are_refused_and_roll_back(on_repo_defs, repo):
    team, before = on_repo_defs, snapshot(repo / "defs")
    researcher = Agent.objects.get(team=team, slug="researcher")
    versions = DefinitionVersion.objects.count()
    text = researcher.content.replace("description:", "description: Changed.", 1)
    parsed = definition_parse(kind=AGENT, team=team, text=text)
    with pytest.raises(storage.ReadOnlyFolderError, match="^refusing to write defs/agents/researcher.md: "):
        definition_save(kind=AGENT, team=team, parsed=parsed, slug="researcher")
    with pytest.raises(storage.ReadOnlyFolderError, match="^refusing to delete defs/workflows/chain.md: "):
        definition_delete(kind=WORKFLOW, team=team, slug="chain")
    # Nothing half done: the rows, versions and files are as they were.
    assert Agent.objects.get(team=team, slug="researcher").content == researcher.content
    assert Workflow.objects.filter(team=team, slug="chain").exists()
    assert DefinitionVersion.objects.count() == versions
    assert snapshot(repo / "defs") == before


@pytest.mark.django_db
def test_the_api_answers_403_naming_the_folder(on_repo_defs, repo, api_for):
    before = snapshot(repo / "defs")
    editor = api_for(on_repo_defs, "editor")
    expected = {"detail": f"refusing to delete defs/workflows/chain.md: {REASON}"}
    response = editor.delete("/api/workflows/chain")
    assert (response.status_code, response.json()) == (403, expected)
    response = editor.patch("/api/agents/writer", {"description": "Changed."})
    assert (response.status_code, response.json()["detail"]) == (
        403, f"refusing to write defs/agents/writer.md: {REASON}")
    response = editor.post("/api/agents", {"name": "Newcomer", "body": "You are new."})
    assert (response.status_code, response.json()["detail"]) == (
        403, f"refusing to write defs/agents/newcomer.md: {REASON}")
    assert not Agent.objects.filter(team=on_repo_defs, slug="newcomer").exists()
    assert Workflow.objects.filter(team=on_repo_defs, slug="chain").exists()
    assert Agent.objects.get(team=on_repo_defs, slug="writer").description != "Changed."
    assert snapshot(repo / "defs") == before


@pytest.mark.django_db
def test_sync_reports_the_refused_export_per_file(on_repo_defs, repo):
    team, before = on_repo_defs, snapshot(repo / "defs")
    writer = Agent.objects.get(team=team, slug="writer")
    changed = writer.content.replace("description:", "description: Changed.", 1)
    definition_save(kind=AGENT, team=team, parsed=definition_parse(kind=AGENT, team=team, text=changed),
                    slug="writer", write_file=False)  # a row changed in the database, to export

    report = markdown_sync(team=team, mode="both")

    assert [(item.path, item.detail) for item in report.errors] == [
        ("agents/writer.md", f"refusing to write defs/agents/writer.md: {REASON}")]
    assert (report.exported, report.imported, report.conflicts) == ([], [], [])
    assert len(report.unchanged) == 17
    assert snapshot(repo / "defs") == before


@pytest.mark.django_db
def test_the_admin_refuses_with_a_form_error_and_a_403(on_repo_defs, repo, make_member):
    before = snapshot(repo / "defs")
    client = client_for(make_member(on_repo_defs, "editor"))
    skill = Skill.objects.get(team=on_repo_defs, slug="citation-style")
    edited = skill.content.replace("\n\n", "\n\nNew.\n\n", 1)
    response = client.post(admin_url(SKILL, "change", skill.pk), {"markdown": edited})
    assert response.status_code == 200  # the form again, with the reason
    assert f"Team onrepo cannot save definitions: {REASON}." in html.unescape(response.content.decode())
    writer = Agent.objects.get(team=on_repo_defs, slug="writer")
    response = client.post(admin_url(AGENT, "delete", writer.pk), {"post": "yes"})
    assert response.status_code == 403
    assert Agent.objects.filter(pk=writer.pk).exists()
    assert Skill.objects.get(pk=skill.pk).content == skill.content
    assert snapshot(repo / "defs") == before


@pytest.mark.django_db
def test_a_team_cannot_be_pointed_at_the_repository_defs_in_the_admin(repo, make_team, django_user_model):
    from django.test import Client

    root = django_user_model.objects.create_superuser("root", password="pw-for-tests-1")
    client = Client()
    client.force_login(root)
    team = make_team("gamma")
    for folder in ("defs", str(repo / "defs"), str(repo / "defs" / "agents")):
        response = client.post(f"/admin/agents_app/team/{team.pk}/change/",
                               {"name": "Gamma", "defs_dir": folder})
        assert response.status_code == 200, folder
        assert f"Not this folder: {REASON}." in html.unescape(response.content.decode())
    team.refresh_from_db()
    assert team.defs_dir.endswith("/defs/gamma")
    response = client.post(f"/admin/agents_app/team/{team.pk}/change/",
                           {"name": "Gamma", "defs_dir": str(repo / "var" / "gamma")})
    assert response.status_code == 302
    team.refresh_from_db()
    assert team.defs_dir == str(repo / "var" / "gamma")
