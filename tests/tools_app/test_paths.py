"""Workspace paths: normalisation, and every way out of the workspace refused."""

from __future__ import annotations

import pytest

from tools_app.paths import (
    MAX_PATH_LENGTH,
    is_agent_file,
    missing_file_message,
    normalise_path,
    normalise_prefix,
    top_level_prefixes,
)
from tools_app.plugin import ToolError


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("notes/plan.md", "notes/plan.md"),
        ("./notes/plan.md", "notes/plan.md"),
        ("/notes/plan.md", "notes/plan.md"),
        # Absolute paths are mapped inside: "/" is the workspace root.
        ("/etc/passwd", "etc/passwd"),
        ("//etc///passwd", "etc/passwd"),
        ("a/./b/./c.txt", "a/b/c.txt"),
        ("././a.md", "a.md"),
        ("  spaced.md \n", "spaced.md"),
        ("...md", "...md"),
        ("a/..b/c..", "a/..b/c.."),
        ("~/x.md", "~/x.md"),
        # NFD "e" + combining acute becomes NFC "é": one file however typed.
        ("cafe\u0301.md", "caf\u00e9.md"),
        ("caf\u00e9.md", "caf\u00e9.md"),
    ],
)
def test_normalise_path_accepts(raw, expected):
    assert normalise_path(raw) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("../x", "path '../x' leaves the workspace: '..' segments are not allowed"),
        ("a/../../x", "path 'a/../../x' leaves the workspace: '..' segments are not allowed"),
        ("a/../b", "path 'a/../b' leaves the workspace: '..' segments are not allowed"),
        ("/../etc/passwd", "path '/../etc/passwd' leaves the workspace: '..' segments are not allowed"),
        ("..", "path '..' leaves the workspace: '..' segments are not allowed"),
        ("a/..", "path 'a/..' leaves the workspace: '..' segments are not allowed"),
        ("..\\x", "path '..\\\\x' contains a backslash; use '/' to separate folders"),
        ("a\\..\\..\\x", "path 'a\\\\..\\\\..\\\\x' contains a backslash; use '/' to separate folders"),
        ("C:/Windows/x", "path 'C:/Windows/x' is a drive path; workspace paths are relative, like 'notes/plan.md'"),
        ("a\x00.md", "path 'a\\x00.md' contains a NUL character"),
        ("a\nb.md", "path 'a\\nb.md' contains a control character"),
        ("a\x1b.md", "path 'a\\x1b.md' contains a control character"),
        ("", "path is empty; give a file path like 'notes/plan.md'"),
        ("   ", "path is empty; give a file path like 'notes/plan.md'"),
        ("/", "path '/' names the workspace root, not a file"),
        ("./.", "path './.' names the workspace root, not a file"),
        ("notes/", "path 'notes/' ends with '/': give a file name, like 'notes/plan.md'"),
        # Compatibility forms that read as ".." or "/" (fullwidth dots, division slash).
        ("\uff0e\uff0e/x", "path '．．/x' has a segment '．．' that reads as '.', '..' or a separator"),
        ("a\u2215..\u2215x", "path 'a\u2215..\u2215x' has a segment 'a\u2215..\u2215x' that reads as '.', '..' or a separator"),
        ("a\u2044b", "path 'a\u2044b' has a segment 'a\u2044b' that reads as '.', '..' or a separator"),
        ("a\uff0fb", "path 'a／b' has a segment 'a／b' that reads as '.', '..' or a separator"),
        ("\u2024\u2024/x", "path '\u2024\u2024/x' has a segment '\u2024\u2024' that reads as '.', '..' or a separator"),
    ],
)
def test_normalise_path_refuses(raw, message):
    with pytest.raises(ToolError) as info:
        normalise_path(raw)
    assert str(info.value) == message


def test_length_limit():
    assert normalise_path("a" * MAX_PATH_LENGTH) == "a" * MAX_PATH_LENGTH
    with pytest.raises(ToolError) as info:
        normalise_path("a" * (MAX_PATH_LENGTH + 1))
    assert str(info.value) == "path is too long (501 characters, max 500)"
    # Counted after normalisation: slashes that collapse do not count.
    assert normalise_path("/./" + "a" * MAX_PATH_LENGTH) == "a" * MAX_PATH_LENGTH


def test_not_a_string():
    with pytest.raises(ToolError) as info:
        normalise_path(None)
    assert str(info.value) == "path must be a string, got NoneType"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("", ""), ("/", ""), ("./", ""), ("notes", "notes"), ("notes/", "notes/"), ("/notes//a/", "notes/a/")],
)
def test_normalise_prefix(raw, expected):
    assert normalise_prefix(raw) == expected


def test_prefix_cannot_climb():
    with pytest.raises(ToolError) as info:
        normalise_prefix("../")
    assert str(info.value) == "path '../' leaves the workspace: '..' segments are not allowed"


def test_agent_files_and_prefixes():
    assert is_agent_file("agents/researcher.md")
    assert is_agent_file("agents/team/researcher.md")
    assert not is_agent_file("agents/notes.txt")
    assert not is_agent_file("my-agents/x.md")
    assert top_level_prefixes(["b.md", "notes/a.md", "notes/b/c.md", "agents/x.md"]) == ["agents/", "b.md", "notes/"]


def test_missing_file_message():
    assert missing_file_message("x.md", []) == "File not found: x.md. The workspace is empty."
    assert missing_file_message("notes/plan.md", ["notes/plans.md", "out/plan.md", "readme.md"]) == (
        "File not found: notes/plan.md. Did you mean: notes/plans.md, out/plan.md? "
        "Files in the workspace (3): notes/plans.md, out/plan.md, readme.md"
    )
    many = [f"f{i:03}.txt" for i in range(60)]
    assert missing_file_message("zzz", many).endswith("f049.txt, … and 10 more")
