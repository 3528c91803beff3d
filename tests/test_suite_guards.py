"""The suite cannot go green having tested nothing: empty parametrizations fail loudly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.listing import listed, markdown_files

ROOT = Path(__file__).resolve().parents[1]


def test_an_empty_parametrization_is_a_collection_error(tmp_path):
    (tmp_path / "test_empty.py").write_text(
        "import pytest\n\n\n@pytest.mark.parametrize('path', [])\ndef test_each(path):\n    assert path\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:django",
         "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), str(tmp_path / "test_empty.py")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 2, out  # interrupted: errors during collection
    assert "Empty parameter set in 'test_each'" in out
    assert "skipped" not in out and "passed" not in out


def test_listed_refuses_an_empty_folder(tmp_path):
    with pytest.raises(LookupError, match=rf"^no \*\.md files in {tmp_path}: the tests parametrized over them "
                                          "would test nothing$"):
        markdown_files(tmp_path)
    with pytest.raises(LookupError, match="^no agents: "):
        listed(iter(()), "agents")
    (tmp_path / "b.md").write_text("b")
    (tmp_path / "a.md").write_text("a")
    (tmp_path / "c.txt").write_text("c")
    assert markdown_files(tmp_path) == [tmp_path / "a.md", tmp_path / "b.md"]


def _test_settings(**env) -> dict:
    script = ("import json; from django.conf import settings as s; print(json.dumps([s.CELERY_TASK_DEFAULT_QUEUE, "
              "s.CHANNEL_LAYERS['default']['CONFIG']['prefix'], s.CELERY_BROKER_URL, s.DATABASES['default']['TEST']]))")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MAS_TEST_", "MAS_CELERY_QUEUE", "PYTEST_XDIST"))}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT,
                            env={**clean, "DJANGO_SETTINGS_MODULE": "mas_project.settings_test", **env})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_each_pytest_xdist_process_has_its_own_queue_channels_redis_database_and_test_database():
    """`make test`'s processes are started by a pytest process that read the test settings first: what it set
    is not shared; a worker a process starts (same marker) keeps its process's names."""
    controller = {"MAS_CELERY_QUEUE": "mas-test-1", "MAS_TEST_CHANNELS_PREFIX": "mas-test-1",
                  "MAS_TEST_REDIS_URL": "redis://127.0.0.1:6379/9", "MAS_TEST_DB_NAME": "test_mas_1"}
    queue, prefix, broker, test_db = _test_settings(**controller, PYTEST_XDIST_WORKER="gw2")
    assert queue == prefix and queue.startswith("mas-test-") and queue != "mas-test-1"
    assert (broker, test_db) == ("redis://127.0.0.1:6379/12", {"NAME": f"test_mas_{queue.removeprefix('mas-test-')}"})
    started_by_gw2 = {**controller, "PYTEST_XDIST_WORKER": "gw2", "MAS_TEST_XDIST_WORKER": "gw2"}
    assert _test_settings(**started_by_gw2) == ["mas-test-1", "mas-test-1", "redis://127.0.0.1:6379/9",
                                                {"NAME": "test_mas_1"}]
    assert _test_settings(**controller) == ["mas-test-1", "mas-test-1", "redis://127.0.0.1:6379/9",
                                            {"NAME": "test_mas_1"}]
    assert _test_settings()[2] == "redis://127.0.0.1:6379/9"  # plain pytest: database 9


def test_seven_pytest_xdist_processes_are_refused_for_want_of_redis_databases():
    result = subprocess.run([sys.executable, "-c", "import django; django.setup()"], capture_output=True, text=True,
                            timeout=60, cwd=ROOT, env={**os.environ, "DJANGO_SETTINGS_MODULE": "mas_project.settings_test",
                                                       "PYTEST_XDIST_WORKER": "gw6", "MAS_TEST_XDIST_WORKER": ""})
    assert result.returncode == 1
    assert result.stderr.strip().endswith(
        "RuntimeError: gw6: the suite runs in six processes at most (Redis databases 10-15)")


def test_make_test_runs_three_processes_then_the_alone_tests_as_the_manual_says():
    makefile = (ROOT / "Makefile").read_text()
    assert "\nTEST_PROCESSES ?= 3\n" in makefile
    recipe = makefile.split("\ntest: setup browser sandbox\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert recipe[-2:] == [
        '\t$(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadfile -m "not alone" $(PYTEST_ARGS) || test $$? = 5',
        "\t$(BIN)/python -m pytest -m alone $(PYTEST_ARGS) || test $$? = 5"]
    for page in ("README.md", "docs/quickstart.md"):
        assert "it runs the suite in three at once" in " ".join((ROOT / page).read_text().split()), page
    assert "The suite runs in three pytest processes at once" in " ".join(
        (ROOT / "docs/development.md").read_text().split())


def test_make_keeps_compiled_modules_even_where_the_environment_says_write_none():
    probe = "probe: ; @python3 -c 'import sys; print(sys.flags.dont_write_bytecode, sys.pycache_prefix)'"
    result = subprocess.run(["make", "-s", "--no-print-directory", "--eval", probe, "probe"], cwd=ROOT, timeout=60,
                            capture_output=True, text=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert (result.returncode, result.stdout) == (0, "0 None\n"), result.stderr
    assert "__pycache__/" in (ROOT / ".gitignore").read_text().splitlines()


@pytest.mark.django_db(transaction=True)
def test_flush_first_a_test_leaves_rows_behind(team_a, make_member):
    from agents_app.models import Team

    make_member(team_a, "editor")
    assert Team.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_flush_then_the_next_finds_the_tables_empty_and_the_role_groups_as_migrate_made_them():
    """After the previous test (the same file runs in one process, in order): tests/conftest.py's fast flush."""
    from django.contrib.auth.models import Group, Permission, User
    from django.contrib.contenttypes.models import ContentType

    from agents_app.models import Team
    from mas_core.teams import role_groups_sync

    assert (Team.objects.count(), User.objects.count()) == (0, 0)
    team_type = ContentType.objects.get(app_label=Team._meta.app_label, model="team")
    assert Permission.objects.filter(content_type=team_type).count() == 4  # add, change, delete, view: kept

    def groups():
        return {group.name: sorted(group.permissions.values_list("codename", flat=True))
                for group in Group.objects.all()}

    before = groups()
    role_groups_sync()
    assert len(before) == 4 and before == groups()


@pytest.mark.django_db
def test_the_test_database_is_a_copy_of_a_template_with_every_migration_applied():
    """tests/template_db.py: the template is named by these migrations, and a copy of it lacks none of them."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    from tests.template_db import PREFIX, migrations_digest

    executor = MigrationExecutor(connection)
    assert executor.migration_plan(executor.loader.graph.leaf_nodes()) == []
    assert connection.settings_dict["TEST"]["TEMPLATE"] == PREFIX + migrations_digest()
    assert connection.settings_dict["TEST"]["MIGRATE"] is False
