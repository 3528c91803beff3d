"""The layers of pyproject.toml hold, and lint-imports would catch one import that goes back up.

Each case copies the packages and pyproject.toml to a temporary folder, adds
one import to a module there and runs ``lint-imports`` on the copy: it must
exit non-zero, name the broken contract and the offending import.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("mas_core", "tools_app", "memory_app", "agents_app", "workflows_app", "evals_app", "mas_project")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def tree_copy(target: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, target / package,
                        ignore=shutil.ignore_patterns("__pycache__", "static", "templates", "*.json", "*.md"))
    shutil.copy(ROOT / "pyproject.toml", target / "pyproject.toml")
    return target


def lint(folder: Path) -> subprocess.CompletedProcess:
    # -I: the copy is analysed, not the installed packages; lint-imports puts its working folder on the path.
    return subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, '.'); "
                           "from importlinter.cli import lint_imports_command; lint_imports_command()", "--no-cache"],
                          cwd=folder, capture_output=True, text=True, timeout=300)


def test_the_tree_keeps_its_contracts(tmp_path):
    result = lint(tree_copy(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 3 kept, 0 broken." in result.stdout


@pytest.mark.parametrize(("module", "line", "contract", "named"), [
    # memory used to start channel-triggered workflows by importing them (now mas_core.hooks).
    ("memory_app/board.py", "import workflows_app.triggers  # noqa", "Layers go one way down",
     "memory_app.board -> workflows_app.triggers"),
    # the foundation reaching into the kernel.
    ("mas_core/eventlog.py", "from agents_app.execution import runs  # noqa", "Layers go one way down",
     "mas_core.eventlog -> agents_app.execution.runs"),
    # tools and memory know nothing of each other (the tools catch mas_core.errors.Refused).
    ("tools_app/builtin/memory_store.py", "from memory_app.services import MemoryError  # noqa",
     "tools_app and memory_app know nothing of each other",
     "tools_app.builtin.memory_store -> memory_app.services"),
    # what resumes a session goes through the scheduler's API, not its internals.
    ("agents_app/approvals/services.py", "from agents_app.scheduler.claim import claim  # noqa",
     "The scheduler's internals are private to it",
     "agents_app.approvals.services -> agents_app.scheduler.claim"),
])
def test_one_import_back_up_breaks_a_contract(tmp_path, module, line, contract, named):
    folder = tree_copy(tmp_path)
    path = folder / module
    path.write_text(path.read_text(encoding="utf-8") + "\n" + line + "\n", encoding="utf-8")

    result = lint(folder)

    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{contract} BROKEN" in result.stdout
    broken = result.stdout.split("Broken contracts", 1)[1]
    assert f"- {named} (l." in broken


def test_make_test_lints_imports_before_pytest():
    """docs/concepts/architecture.md, "Layers": ``make test`` runs lint-imports before pytest."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert recipe.index("$(BIN)/lint-imports") < recipe.index("$(BIN)/python -m pytest")


def test_the_higher_layers_fill_the_hooks_at_start_up():
    """docs/concepts/architecture.md: kinds registered by their apps; workflows_app fills the run hooks and channel
    listeners."""
    from agents_app.execution.hooks import RUN_HOOKS
    from mas_core.definitions.kinds import KINDS
    from mas_core.hooks import CHANNEL_PUBLISHED
    from workflows_app import services, triggers

    assert [kind.name for kind in KINDS] == ["provider", "tool", "mcp", "skill", "guardrail", "agent", "remote_agent",
                                             "workflow", "eval"]
    assert [kind.model_label.split(".")[0] for kind in KINDS] == [
        "agents_app", "tools_app", "tools_app", "agents_app", "agents_app", "agents_app", "agents_app",
        "workflows_app", "evals_app"]
    assert (RUN_HOOKS.run_finish, RUN_HOOKS.run_cancelled, RUN_HOOKS.activation_settled, RUN_HOOKS.run_steps,
            RUN_HOOKS.run_graph) == (services.workflow_finish, services.workflow_cancelled,
                                     services.workflow_activation_settled, services.workflow_steps,
                                     services.workflow_graph)
    assert CHANNEL_PUBLISHED == [triggers.channel_message_published]
