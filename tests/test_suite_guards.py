"""The suite cannot go green having tested nothing: empty parametrizations fail loudly."""

from __future__ import annotations

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
