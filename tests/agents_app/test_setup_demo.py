"""`manage.py setup_demo` (what `make demo` runs first): the demo team works on a copy of defs/, never on defs/."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from mas_core.definitions import storage
from agents_app.models import Agent, Membership, Team
from evals_app.models import EvalDataset
from workflows_app.models import Workflow

DEFS = Path(__file__).resolve().parents[2] / "defs"

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("demo_secrets")]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def setup_demo(*args: str) -> str:
    out = StringIO()
    call_command("setup_demo", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def shipped():
    """The repository's defs/ as it was before the test; the test ends by checking nothing changed there."""
    before = snapshot(DEFS)
    yield before
    assert snapshot(DEFS) == before


def test_the_demo_team_gets_a_copy_under_the_defs_root(shipped, _defs_root):
    out = setup_demo()

    team = Team.objects.get(slug="demo")
    copy = _defs_root / "demo"
    assert (team.defs_dir, storage.team_defs_dir(team)) == ("", copy)
    assert snapshot(copy) == shipped
    assert f"The demo team's definitions: {copy} (copied from defs/)." in out
    assert "18 imported, 0 exported, 0 conflicts, 0 deleted on disk, 0 invalid, 0 skipped, 0 unchanged." in out
    assert Agent.objects.filter(team=team).count() == 7
    assert Workflow.objects.filter(team=team).count() == 5
    assert list(EvalDataset.objects.filter(team=team).values_list("slug", flat=True)) == ["research-and-review-evals"]
    assert Membership.objects.get(team=team).user.username == "demo"
    assert "Created admin user demo with password: " in out


def test_edits_through_the_api_land_in_the_copy_and_a_second_run_keeps_them(shipped, _defs_root, api_for):
    setup_demo()
    team = Team.objects.get(slug="demo")
    copy = _defs_root / "demo"
    editor = api_for(team, "editor")
    response = editor.patch("/api/agents/writer", {"description": "The demo's own writer."})
    assert response.status_code == 200, response.content
    assert editor.delete("/api/workflows/chain").status_code == 200
    assert not (copy / "workflows" / "chain.md").exists()
    assert "description: The demo's own writer." in (copy / "agents" / "writer.md").read_text()
    edited = snapshot(copy)

    out = setup_demo()

    assert f"The demo team's definitions: {copy} (kept as the team left them)." in out
    assert "0 imported, 0 exported, 0 conflicts, 0 deleted on disk, 0 invalid, 0 skipped, 17 unchanged." in out
    assert "Admin user demo exists" in out
    assert snapshot(copy) == edited
    assert Agent.objects.get(team=team, slug="writer").description == "The demo's own writer."
    assert not Workflow.objects.filter(team=team, slug="chain").exists()
    assert Team.objects.get(slug="demo").defs_dir == ""


def test_a_demo_team_on_the_repository_defs_moves_to_a_copy(shipped, _defs_root):
    Team.objects.create(slug="demo", name="Demo", defs_dir="defs")  # as setup_demo made it before

    setup_demo()

    team = Team.objects.get(slug="demo")
    assert (team.defs_dir, storage.team_defs_dir(team)) == ("", _defs_root / "demo")
    assert snapshot(_defs_root / "demo") == shipped
    assert Agent.objects.filter(team=team).count() == 7


def test_an_empty_folder_is_seeded_and_an_explicit_one_is_used(shipped, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    out = setup_demo("--defs-dir", str(folder))
    assert Team.objects.get(slug="demo").defs_dir == str(folder)
    assert snapshot(folder) == shipped
    assert f"The demo team's definitions: {folder} (copied from defs/)." in out
    assert not list(tmp_path.glob(".*seeding"))


def test_the_repository_defs_are_refused_as_the_demo_folder(shipped):
    for folder in ("defs", str(DEFS), str(DEFS / "agents")):
        with pytest.raises(CommandError, match=r"^the demo team's folder would be .*: defs/ is the repository's "
                                               r"tracked folder of shipped examples"):
            setup_demo("--defs-dir", folder)
    assert not Team.objects.filter(slug="demo").exists()
