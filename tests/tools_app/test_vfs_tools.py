"""The vfs_* tools through the registry, on an in-memory workspace: exact results and errors."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tools_app.plugin import ToolContext, ToolError
from tools_app.registry import ToolOutcome, registry_for_agent
from tools_app.workspace_memory import InMemoryWorkspace

VFS = ["vfs_read", "vfs_write", "vfs_edit", "vfs_list", "vfs_delete", "vfs_search"]


class Recorder:
    """A fake kernel service: records its calls, returns or raises what it is told."""

    def __init__(self, result: Any = None, error: Exception | None = None) -> None:
        self.calls: list[tuple[tuple, dict]] = []
        self.result, self.error = result, error

    async def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        if self.error:
            raise self.error
        return self.result


def run(tool: str, files: dict[str, str] | None = None, services: dict | None = None, **arguments) -> tuple[ToolOutcome, InMemoryWorkspace]:
    workspace = InMemoryWorkspace(files)
    ctx = ToolContext(run_id="run-1", agent="root", session_id="s-1", workspace=workspace, services=services or {})
    outcome = asyncio.run(registry_for_agent(VFS).call(tool, arguments, ctx))
    return outcome, workspace


def error(outcome: ToolOutcome) -> str:
    assert outcome.ok is False and outcome.error_kind == "tool_error", outcome
    return outcome.content


# --- workspace ----------------------------------------------------------------


def test_in_memory_workspace_versions_survive_delete():
    async def scenario():
        ws = InMemoryWorkspace({"seed.md": "s"})
        assert await ws.write("a.md", "1") == 1
        assert await ws.write("a.md", "2") == 2
        assert await ws.delete("a.md") is True
        assert await ws.delete("a.md") is False
        assert await ws.read("a.md") is None
        assert await ws.write("a.md", "3") == 3
        assert await ws.paths() == ["a.md", "seed.md"]
        assert await ws.write("seed.md", "t") == 2

    asyncio.run(scenario())


# --- vfs_read -----------------------------------------------------------------


def test_read_returns_the_content():
    outcome, _ = run("vfs_read", {"notes/a.md": "hello\nworld"}, path="./notes//a.md")
    assert outcome == ToolOutcome(True, "hello\nworld", data="hello\nworld")


def test_read_empty_file_says_so():
    outcome, _ = run("vfs_read", {"e.md": ""}, path="e.md")
    assert outcome.content == "e.md is empty."


def test_read_missing_lists_similar_paths_and_files():
    files = {"notes/plans.md": "", "out/plan.md": "", "readme.md": ""}
    outcome, _ = run("vfs_read", files, path="notes/plan.md")
    assert error(outcome) == (
        "File not found: notes/plan.md. Did you mean: notes/plans.md, out/plan.md? "
        "Files in the workspace (3): notes/plans.md, out/plan.md, readme.md"
    )


def test_read_missing_in_empty_workspace():
    outcome, _ = run("vfs_read", path="x.md")
    assert error(outcome) == "File not found: x.md. The workspace is empty."


@pytest.mark.parametrize("path", ["../secret", "a/../../etc/passwd", "..\\x", "a\x00b"])
def test_read_refuses_escapes(path):
    outcome, _ = run("vfs_read", {"secret": "no"}, path=path)
    assert outcome.ok is False
    assert "leaves the workspace" in outcome.content or "backslash" in outcome.content or "NUL" in outcome.content


def test_read_absolute_path_is_mapped_inside():
    outcome, _ = run("vfs_read", {"etc/passwd": "workspace file"}, path="/etc/passwd")
    assert outcome.content == "workspace file"


# --- vfs_write ----------------------------------------------------------------


def test_write_returns_the_version():
    outcome, ws = run("vfs_write", {"a.md": "old"}, path="/a.md", content="new text")
    assert outcome == ToolOutcome(
        True, "Wrote a.md (version 2, 8 characters).", data={"path": "a.md", "version": 2, "agent_registered": False}
    )
    assert ws.files == {"a.md": "new text"}


def test_write_under_agents_registers_the_agent():
    register = Recorder(result="researcher")
    outcome, ws = run("vfs_write", services={"register_agent": register}, path="agents/researcher.md", content="---\nname: researcher\n---\nDo.")
    assert outcome.content == "Wrote agents/researcher.md (version 1, 28 characters). Agent registered for this run: researcher."
    assert outcome.data == {"path": "agents/researcher.md", "version": 1, "agent_registered": True}
    assert register.calls == [(("agents/researcher.md", "---\nname: researcher\n---\nDo."), {})]
    assert ws.files == {"agents/researcher.md": "---\nname: researcher\n---\nDo."}


def test_write_outside_agents_or_not_markdown_does_not_register():
    register = Recorder()
    run("vfs_write", services={"register_agent": register}, path="notes/agents/x.md", content="x")
    run("vfs_write", services={"register_agent": register}, path="agents/notes.txt", content="x")
    assert register.calls == []


def test_write_agent_without_the_service_just_writes():
    outcome, ws = run("vfs_write", path="agents/x.md", content="x")
    assert outcome.content == "Wrote agents/x.md (version 1, 1 characters)."
    assert ws.files == {"agents/x.md": "x"}


def test_write_agent_that_fails_to_register_keeps_the_file_and_says_why():
    register = Recorder(error=ToolError("frontmatter: name: Field required"))
    outcome, ws = run("vfs_write", services={"register_agent": register}, path="agents/x.md", content="no frontmatter")
    assert error(outcome) == (
        "Wrote agents/x.md (version 1, 14 characters), but the agent was not registered: frontmatter: name: Field required"
    )
    assert ws.files == {"agents/x.md": "no frontmatter"}


def test_write_refused_path_writes_nothing():
    outcome, ws = run("vfs_write", path="../../x", content="x")
    assert error(outcome) == "path '../../x' leaves the workspace: '..' segments are not allowed"
    assert ws.files == {}


# --- vfs_edit -----------------------------------------------------------------


def test_edit_replaces_exactly_one_match():
    outcome, ws = run("vfs_edit", {"a.md": "one two three"}, path="a.md", old="two", new="2")
    assert outcome == ToolOutcome(True, "Edited a.md (version 2): replaced 1 occurrence.", data={"path": "a.md", "version": 2})
    assert ws.files == {"a.md": "one 2 three"}


def test_edit_zero_matches():
    outcome, ws = run("vfs_edit", {"a.md": "one two"}, path="a.md", old="four", new="4")
    assert error(outcome) == "old text not found in a.md (0 matches); nothing was changed. Read the file and copy the exact text."
    assert ws.files == {"a.md": "one two"} and ws.versions == {"a.md": 1}


def test_edit_zero_matches_whitespace_hint():
    outcome, _ = run("vfs_edit", {"a.md": "one two"}, path="a.md", old="two\n", new="2")
    assert error(outcome) == (
        "old text not found in a.md (0 matches); nothing was changed. It does occur once leading/trailing "
        "whitespace is removed: copy the whitespace exactly. Read the file and copy the exact text."
    )


def test_edit_several_matches():
    outcome, ws = run("vfs_edit", {"a.md": "x x x"}, path="a.md", old="x", new="y")
    assert error(outcome) == (
        "old text matches 3 times in a.md; nothing was changed. Include more surrounding text so that it matches exactly once."
    )
    assert ws.files == {"a.md": "x x x"}


def test_edit_empty_old_and_missing_file():
    outcome, _ = run("vfs_edit", {"a.md": "x"}, path="a.md", old="", new="y")
    assert error(outcome) == "old must not be empty: give the exact text to replace"
    outcome, _ = run("vfs_edit", {"a.md": "x"}, path="b.md", old="x", new="y")
    assert error(outcome) == "File not found: b.md. Did you mean: a.md? Files in the workspace (1): a.md"


def test_edit_of_an_agent_file_registers_the_new_text():
    register = Recorder()
    outcome, _ = run("vfs_edit", {"agents/a.md": "tier: small"}, services={"register_agent": register},
                     path="agents/a.md", old="small", new="large")
    assert outcome.content == "Edited agents/a.md (version 2): replaced 1 occurrence. Agent registered for this run."
    assert register.calls == [(("agents/a.md", "tier: large"), {})]


# --- vfs_list -----------------------------------------------------------------

FILES = {"notes/a.md": "", "notes/b.md": "", "agents/x.md": "", "readme.md": ""}


def test_list_everything():
    outcome, _ = run("vfs_list", FILES)
    assert outcome.content == "4 files:\nagents/x.md\nnotes/a.md\nnotes/b.md\nreadme.md"


def test_list_prefix():
    outcome, _ = run("vfs_list", FILES, prefix="/notes/")
    assert outcome.content == "2 files under 'notes/':\nnotes/a.md\nnotes/b.md"
    outcome, _ = run("vfs_list", FILES, prefix="read")
    assert outcome.content == "1 file under 'read':\nreadme.md"


def test_list_nothing_under_prefix_gives_existing_prefixes():
    outcome, _ = run("vfs_list", FILES, prefix="output/")
    assert outcome == ToolOutcome(
        True, "No files under 'output/'. Existing top-level prefixes: agents/, notes/, readme.md",
        data="No files under 'output/'. Existing top-level prefixes: agents/, notes/, readme.md",
    )


def test_list_empty_workspace_and_escape():
    assert run("vfs_list")[0].content == "The workspace is empty."
    assert error(run("vfs_list", FILES, prefix="../")[0]) == "path '../' leaves the workspace: '..' segments are not allowed"


def test_list_is_capped(monkeypatch):
    monkeypatch.setattr("tools_app.builtin.vfs_list.MAX_LISTED", 2)
    outcome, _ = run("vfs_list", FILES)
    assert outcome.content == "4 files:\nagents/x.md\nnotes/a.md\n[truncated: showing 2 of 4]"


# --- vfs_delete ---------------------------------------------------------------


def test_delete_a_file():
    unregister = Recorder()
    outcome, ws = run("vfs_delete", {"a.md": "x", "b.md": "y"}, services={"unregister_agent": unregister}, path="a.md")
    assert outcome == ToolOutcome(True, "Deleted a.md.", data={"path": "a.md", "agent_unregistered": False})
    assert ws.files == {"b.md": "y"}
    assert unregister.calls == []


def test_delete_an_agent_unregisters_it():
    unregister = Recorder()
    outcome, ws = run("vfs_delete", {"agents/r.md": "x"}, services={"unregister_agent": unregister}, path="agents/r.md")
    assert outcome.content == "Deleted agents/r.md. Agent unregistered for this run."
    assert unregister.calls == [(("agents/r.md",), {})]
    assert ws.files == {}


def test_delete_missing_file():
    unregister = Recorder()
    outcome, ws = run("vfs_delete", {"agents/r.md": "x"}, services={"unregister_agent": unregister}, path="agents/q.md")
    assert error(outcome) == "File not found: agents/q.md. Did you mean: agents/r.md? Files in the workspace (1): agents/r.md"
    assert unregister.calls == [] and ws.files == {"agents/r.md": "x"}


# --- vfs_search ---------------------------------------------------------------

SEARCH_FILES = {
    "notes/a.md": "alpha\nTODO: write intro\nbeta",
    "notes/b.txt": "todo later\nTODO: fix",
    "src/main.py": "# TODO: tests\nprint(1)",
}


def test_search_all_files():
    outcome, _ = run("vfs_search", SEARCH_FILES, pattern="TODO")
    assert outcome.content == "notes/a.md:2: TODO: write intro\nnotes/b.txt:2: TODO: fix\nsrc/main.py:1: # TODO: tests"


def test_search_with_glob_and_flags():
    outcome, _ = run("vfs_search", SEARCH_FILES, pattern="(?i)^todo", glob="*.txt")
    assert outcome.content == "notes/b.txt:1: todo later\nnotes/b.txt:2: TODO: fix"
    outcome, _ = run("vfs_search", SEARCH_FILES, pattern="TODO", glob="notes/*")
    assert outcome.content == "notes/a.md:2: TODO: write intro\nnotes/b.txt:2: TODO: fix"


def test_search_no_match():
    outcome, _ = run("vfs_search", SEARCH_FILES, pattern="FIXME", glob="*.md")
    assert outcome.content == "No matches for 'FIXME' in files matching '*.md' (1 files searched)."
    outcome, _ = run("vfs_search", SEARCH_FILES, pattern="FIXME")
    assert outcome.content == "No matches for 'FIXME' (3 files searched)."


class CountedWorkspace(InMemoryWorkspace):
    """The in-memory workspace, counting its reads; a file may go between the listing and its read."""

    def __init__(self, files: dict[str, str], *, gone: str | None = None) -> None:
        super().__init__(files)
        self.gone, self.reads = gone, []

    async def paths(self) -> list[str]:
        listed = await super().paths()
        if self.gone is not None:
            await self.delete(self.gone)  # deleted by another session once listed
        return listed

    async def read(self, path: str) -> str | None:
        self.reads.append([path])
        return await super().read(path)

    async def read_many(self, paths: list[str]) -> dict[str, str]:
        self.reads.append(list(paths))
        return await super().read_many(paths)


def test_search_reads_the_files_in_batches_not_one_by_one():
    from tools_app.builtin.vfs_search import READ_BATCH

    files = {f"notes/{i:03}.md": f"line\nneedle {i}" for i in range(2 * READ_BATCH + 2)}
    workspace = CountedWorkspace(files, gone="notes/001.md")
    ctx = ToolContext(run_id="run-1", agent="root", session_id="s-1", workspace=workspace)
    outcome = asyncio.run(registry_for_agent(VFS).call("vfs_search", {"pattern": "needle"}, ctx))
    names = sorted(files)
    assert workspace.reads == [names[:READ_BATCH], names[READ_BATCH:2 * READ_BATCH], names[2 * READ_BATCH:]]
    assert outcome.content == "\n".join(f"notes/{i:03}.md:2: needle {i}" for i in range(2 * READ_BATCH + 2) if i != 1)


def test_search_invalid_regex():
    outcome, _ = run("vfs_search", SEARCH_FILES, pattern="(unclosed")
    assert error(outcome) == ("Invalid regular expression '(unclosed': missing ): (unclosed "
                              "(patterns use RE2 syntax: no look-around or backreferences)")
    outcome, _ = run("vfs_search", SEARCH_FILES, pattern=r"(?<=TODO): \w+")
    assert error(outcome) == ("Invalid regular expression '(?<=TODO): \\\\w+': invalid perl operator: (?<= "
                              "(patterns use RE2 syntax: no look-around or backreferences)")


def test_search_catastrophic_pattern_answers_at_once():
    """Python's re would backtrack for hours on this (2**40 ways to split the a's); RE2 is linear."""
    started = time.perf_counter()
    outcome, _ = run("vfs_search", {"bomb.txt": "a" * 40 + "!\n" + "a" * 40}, pattern="^(a+)+$")
    assert time.perf_counter() - started < 1.0
    assert outcome.content == "bomb.txt:2: " + "a" * 40


def test_search_stops_at_its_deadline(monkeypatch):
    monkeypatch.setattr("tools_app.builtin.vfs_search.SEARCH_TIMEOUT_S", 0.0)
    outcome, _ = run("vfs_search", {"a.txt": "x\n" * 1000, "b.txt": "x"}, pattern="x")
    # 255 lines before the first deadline check; b.txt never read
    assert outcome.content.splitlines()[-2:] == ["[truncated: showing 200 of 255 matching lines]",
                                                 "[stopped after 0 s: the results are partial]"]
    assert "b.txt" not in outcome.content


def test_search_empty_pattern_lists_files_matching_the_glob():
    assert run("vfs_search", SEARCH_FILES, pattern="", glob="*.md")[0].content == "notes/a.md"
    assert run("vfs_search", SEARCH_FILES, pattern="", glob="*.rs")[0].content == "No files match '*.rs'."
    assert error(run("vfs_search", SEARCH_FILES, pattern="")[0]) == "Give a pattern, a glob, or both"


def test_search_is_capped_and_long_lines_cut(monkeypatch):
    monkeypatch.setattr("tools_app.builtin.vfs_search.MAX_RESULT_LINES", 2)
    outcome, _ = run("vfs_search", SEARCH_FILES, pattern="TODO")
    assert outcome.content == (
        "notes/a.md:2: TODO: write intro\nnotes/b.txt:2: TODO: fix\n[truncated: showing 2 of 3 matching lines]"
    )
    outcome, _ = run("vfs_search", {"long.txt": "x" * 300}, pattern="x")
    assert outcome.content == "long.txt:1: " + "x" * 200 + "…"


def test_search_pattern_limits():
    from tools_app.builtin import vfs_search

    assert vfs_search.SEARCH_TIMEOUT_S == 10.0
    outcome, _ = run("vfs_search", SEARCH_FILES, pattern="a" * 1001)
    assert error(outcome) == f"Invalid regular expression {'a' * 1001!r}: the pattern is 1001 characters long; " \
                             "at most 1000 are allowed"
    outcome, _ = run("vfs_search", SEARCH_FILES, pattern="(x{1000}){20}")
    assert error(outcome).startswith("Invalid regular expression '(x{1000}){20}': ")
    outcome, _ = run("vfs_search", SEARCH_FILES, pattern=r"[^\n]{1000}" * 3)
    assert error(outcome).endswith(": the pattern compiles to 24004 instructions; at most 20000 are allowed "
                                   "(large counted repetitions such as {1000} multiply it)")
    assert run("vfs_search", SEARCH_FILES, pattern="a" * 1000)[0].ok is True
