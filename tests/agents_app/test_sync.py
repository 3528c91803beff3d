"""The markdown mirror: import, export, conflicts, invalid files, check mode and the command."""

from __future__ import annotations

import shutil
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from mas_core.definitions import storage
from agents_app.kinds import AGENT, SKILL
from mas_core.definitions.kinds import KINDS
from tools_app.kinds import MCP, TOOL
from workflows_app.kinds import WORKFLOW
from mas_core.definitions.markdown import content_hash
from mas_core.definitions.services import definition_parse, definition_save
from mas_core.definitions.sync import markdown_sync, sync_action
from agents_app.models import Agent, DefinitionVersion, Skill
from tools_app.models import CustomTool, MCPServer
from workflows_app.models import Workflow

DEFS = Path(__file__).resolve().parents[2] / "defs"

RESEARCHER = "---\nname: researcher\ndescription: Finds facts\ntools:\n- vfs_read\n- web_fetch\n---\n\nYou research.\n"
WRITER = "---\nname: writer\ndescription: Writes\n---\n\nYou write.\n"
CHAIN = (
    "---\nname: chain\ninputs:\n- topic\nsteps:\n- id: research\n  agent: researcher\n  prompt: Research {topic}\n"
    "  outputs:\n  - findings\n- id: write\n  agent: writer\n  prompt: 'Write up: {research.findings}'\n"
    "  depends_on:\n  - research\n---\n"
)
TOOL_MD = "---\nname: summarize\ndescription: Summarize\nparameters:\n  text: {}\nprompt: Summarize {{text}}\n---\n"


def root(team) -> Path:
    return storage.team_defs_dir(team)


def write(team, relative: str, text: str | bytes) -> Path:
    path = root(team) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def files(team) -> dict[str, bytes]:
    base = root(team)
    return {p.relative_to(base).as_posix(): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def paths(items) -> list[str]:
    return [item.path for item in items]


def versions(team, kind: str, slug: str) -> list[tuple[int, str]]:
    rows = DefinitionVersion.objects.filter(team=team, kind=kind, slug=slug).order_by("number")
    return list(rows.values_list("number", "source"))


def save_row(kind, team, text: str, *, slug: str | None = None, write_file: bool = False, **kwargs):
    """An admin/API style save that (by default) leaves the file as it was, like an edit not yet exported."""
    parsed = definition_parse(kind=kind, team=team, text=text)
    return definition_save(kind=kind, team=team, parsed=parsed, slug=slug, write_file=write_file, **kwargs).row


def sync_command(team, *flags: str) -> str:
    out = StringIO()
    call_command("sync_markdown", *flags, "--team", team.slug, stdout=out)
    return out.getvalue()


def sync_command_fails(team, *flags: str) -> tuple[str, str]:
    out = StringIO()
    with pytest.raises(CommandError) as info:
        call_command("sync_markdown", *flags, "--team", team.slug, stdout=out)
    return out.getvalue(), str(info.value)


# -- the decision table ----------------------------------------------------------------


@pytest.mark.parametrize(
    "file_hash, row_hash, synced_hash, action",
    [
        (None, None, "", "none"),
        ("f", None, "", "import"),
        (None, "c", "", "export"),
        (None, "c", "c", "deleted"),
        (None, "c2", "c", "deleted"),
        ("x", "x", "", "unchanged"),
        ("x", "x", "old", "unchanged"),
        ("s", "c", "s", "export"),
        ("f", "s", "s", "import"),
        ("f", "c", "s", "conflict"),
        ("f", "c", "", "conflict"),
    ],
)
def test_sync_action_table(file_hash, row_hash, synced_hash, action):
    assert sync_action(file_hash=file_hash, row_hash=row_hash, synced_hash=synced_hash) == action


# -- import ----------------------------------------------------------------------------


def test_import_creates_rows_and_versions_in_kind_order(team_a, make_member):
    user = make_member(team_a, "admin")
    write(team_a, "workflows/chain.md", CHAIN)
    write(team_a, "agents/writer.md", WRITER)
    write(team_a, "agents/researcher.md", RESEARCHER)
    write(team_a, "tools/summarize.md", TOOL_MD)
    before = files(team_a)

    report = markdown_sync(team=team_a, mode="both", author=user)

    assert paths(report.imported) == [
        "tools/summarize.md",
        "agents/researcher.md",
        "agents/writer.md",
        "workflows/chain.md",
    ]
    assert [item.detail for item in report.imported] == ["created (version 1)"] * 4
    assert (report.exported, report.conflicts, report.errors, report.rewritten, report.warnings) == ([], [], [], [], [])
    assert report.in_sync is False  # it had work to do
    assert files(team_a) == before  # canonical files are not rewritten
    agent = Agent.objects.get(team=team_a, slug="researcher")
    assert (agent.name, agent.description, agent.body) == ("researcher", "Finds facts", "You research.")
    assert agent.content == RESEARCHER
    assert agent.content_hash == agent.synced_hash == content_hash(RESEARCHER)
    assert Workflow.objects.get(team=team_a, slug="chain").spec["steps"][1]["depends_on"] == ["research"]
    version = DefinitionVersion.objects.get(team=team_a, kind="workflow", slug="chain")
    assert (version.number, version.source, version.author, version.content) == (1, "import", user, CHAIN)

    again = markdown_sync(team=team_a, mode="both")
    assert again.in_sync is True
    assert paths(again.unchanged) == paths(report.imported)
    assert DefinitionVersion.objects.filter(team=team_a).count() == 4


def test_file_changed_on_disk_is_imported_as_a_new_version(team_a):
    write(team_a, "agents/researcher.md", RESEARCHER)
    markdown_sync(team=team_a, mode="both")
    changed = RESEARCHER.replace("Finds facts", "Finds and checks facts")
    write(team_a, "agents/researcher.md", changed)

    report = markdown_sync(team=team_a, mode="both")

    assert [(item.path, item.detail) for item in report.imported] == [("agents/researcher.md", "updated (version 2)")]
    row = Agent.objects.get(team=team_a, slug="researcher")
    assert (row.description, row.version, row.synced_hash) == ("Finds and checks facts", 2, content_hash(changed))
    assert versions(team_a, "agent", "researcher") == [(1, "import"), (2, "import")]


def test_reformatted_file_keeps_the_version_and_is_rewritten_canonically(team_a):
    write(team_a, "agents/researcher.md", RESEARCHER)
    markdown_sync(team=team_a, mode="both")
    write(
        team_a,
        "agents/researcher.md",
        "---\ntools: [vfs_read, web_fetch]\ndescription: Finds facts\nname: researcher\n---\nYou research.",
    )

    report = markdown_sync(team=team_a, mode="both")

    assert [(item.path, item.detail) for item in report.imported] == [
        ("agents/researcher.md", "same content, reformatted (version 1)")
    ]
    assert paths(report.rewritten) == ["agents/researcher.md"]
    assert files(team_a) == {"agents/researcher.md": RESEARCHER.encode()}
    assert versions(team_a, "agent", "researcher") == [(1, "import")]
    assert markdown_sync(team=team_a, mode="check").in_sync


def test_claude_code_agent_is_imported_and_rewritten_in_mas_form(team_a):
    write(
        team_a,
        "agents/code-reviewer.md",
        "---\nname: code-reviewer\ndescription: Reviews code. Use this: after edits\ntools: Read, Grep, Glob\n"
        "model: haiku\ncolor: blue\n---\nYou review code.\n",
    )

    report = markdown_sync(team=team_a, mode="both")

    assert paths(report.imported) == paths(report.rewritten) == ["agents/code-reviewer.md"]
    assert report.errors == []
    assert report.warnings == [
        "agents/code-reviewer.md:3: value contains ': ' and was read as plain text to the end of the line",
        "agents/code-reviewer.md: model alias 'haiku' read as tier small",
        "agents/code-reviewer.md: unknown keys kept as they are: color",
    ]
    canonical = (
        "---\nname: code-reviewer\ndescription: 'Reviews code. Use this: after edits'\ntier: small\ntools:\n"
        "- vfs_read\n- vfs_search\n- vfs_list\ncolor: blue\n---\n\nYou review code.\n"
    )
    assert files(team_a) == {"agents/code-reviewer.md": canonical.encode()}
    row = Agent.objects.get(team=team_a, slug="code-reviewer")
    assert (row.tier, row.extra, row.synced_hash) == ("small", {"color": "blue"}, content_hash(canonical))
    assert markdown_sync(team=team_a, mode="check").in_sync


def test_mcp_literal_secret_is_stored_and_removed_from_disk(team_a):
    write(
        team_a,
        "mcp/search.md",
        "---\nname: search\ntransport: streamable-http\nurl: https://mcp.example.com/mcp\nheaders:\n"
        "  Authorization: Bearer sk-live-123\n  X-Org: ${SEARCH_ORG}\n---\n",
    )

    report = markdown_sync(team=team_a, mode="both")

    assert paths(report.rewritten) == ["mcp/search.md"]
    assert report.warnings == ["mcp/search.md: headers: literal values of Authorization are stored as secrets"]
    text = (root(team_a) / "mcp/search.md").read_text()
    assert "sk-live-123" not in text
    assert text == (
        "---\nname: search\ntransport: streamable-http\nurl: https://mcp.example.com/mcp\nheaders:\n"
        "  X-Org: ${SEARCH_ORG}\n---\n"
    )
    row = MCPServer.objects.get(team=team_a, slug="search")
    assert row.secret_headers == {"Authorization": "Bearer sk-live-123"}
    assert "sk-live-123" not in DefinitionVersion.objects.get(team=team_a, kind="mcp").content


def test_skill_with_reference_files(team_a):
    write(team_a, "skills/cite/SKILL.md", "---\nname: cite\ndescription: How to cite\n---\n\nSee examples/apa.md.\n")
    write(team_a, "skills/cite/examples/apa.md", "# APA\n\nAuthor (year).\n")
    write(team_a, "skills/cite/logo.png", b"\x89PNG\r\n\x1a\n\x00\xff")
    write(team_a, "skills/cite/.swp", "editor junk")

    report = markdown_sync(team=team_a, mode="both")

    assert paths(report.imported) == ["skills/cite/SKILL.md"]
    assert report.warnings == [
        "skills/cite/SKILL.md: logo.png beside SKILL.md is not UTF-8 text: left as it is, not part of the skill"
    ]
    skill = Skill.objects.get(team=team_a, slug="cite")
    assert skill.references == {"examples/apa.md": "# APA\n\nAuthor (year).\n"}

    # A reference changed on disk is an import of the skill.
    write(team_a, "skills/cite/examples/apa.md", "# APA 7\n")
    report = markdown_sync(team=team_a, mode="both")
    assert [(item.path, item.detail) for item in report.imported] == [("skills/cite/SKILL.md", "updated (version 2)")]
    skill.refresh_from_db()
    assert skill.references == {"examples/apa.md": "# APA 7\n"}

    # A reference dropped in the database is removed on export; other files stay.
    save_row(SKILL, team_a, skill.content, slug="cite", references={"mla.md": "# MLA\n"})
    report = markdown_sync(team=team_a, mode="both")
    assert paths(report.exported) == ["skills/cite/SKILL.md"]
    assert sorted(files(team_a)) == [
        "skills/cite/.swp",
        "skills/cite/SKILL.md",
        "skills/cite/logo.png",
        "skills/cite/mla.md",
    ]
    assert (root(team_a) / "skills/cite/logo.png").read_bytes() == b"\x89PNG\r\n\x1a\n\x00\xff"
    assert markdown_sync(team=team_a, mode="check").in_sync


def test_shipped_defs_import_cleanly_and_check_passes(make_team, settings):
    # The variables the shipped provider and MCP server name, declared for this team (as `make demo` does).
    settings.MAS_TEAM_SECRETS = "OPENAI_API_KEY=shipped,GITHUB_TOKEN=shipped"
    # Read where they are: a team on the repository's defs/ imports them, and writes nothing there
    # (a write would be refused and reported as an error).
    shipped = {p.relative_to(DEFS).as_posix(): p.read_bytes() for p in sorted(DEFS.rglob("*")) if p.is_file()}
    team = make_team("shipped", defs_dir=str(DEFS))

    report = markdown_sync(team=team, mode="import")

    assert len(report.imported) == 18
    assert (report.errors, report.conflicts, report.warnings, report.rewritten) == ([], [], [], [])
    assert files(team) == shipped
    assert Skill.objects.get(team=team, slug="citation-style").references.keys() == {"reference.md"}
    out = sync_command(team, "--check")
    assert out.endswith(
        "0 to import, 0 to export, 0 conflicts, 0 deleted on disk, 0 invalid, 0 skipped, 18 unchanged.\nIn sync.\n"
    )


# -- export ----------------------------------------------------------------------------


def test_row_changed_in_the_database_is_exported(team_a):
    write(team_a, "agents/researcher.md", RESEARCHER)
    markdown_sync(team=team_a, mode="both")
    changed = RESEARCHER.replace("You research.", "You research carefully.")
    save_row(AGENT, team_a, changed)  # the file still holds the old text

    report = markdown_sync(team=team_a, mode="both")

    assert [(item.path, item.detail) for item in report.exported] == [
        ("agents/researcher.md", "changed in the database")
    ]
    assert report.imported == []
    assert files(team_a) == {"agents/researcher.md": changed.encode()}
    row = Agent.objects.get(team=team_a, slug="researcher")
    assert row.synced_hash == row.content_hash == content_hash(changed)
    assert versions(team_a, "agent", "researcher") == [(1, "import"), (2, "api")]


def test_row_never_mirrored_is_exported(team_a):
    save_row(AGENT, team_a, WRITER)
    assert files(team_a) == {}

    report = markdown_sync(team=team_a, mode="both")

    assert [(item.path, item.detail) for item in report.exported] == [("agents/writer.md", "new")]
    assert files(team_a) == {"agents/writer.md": WRITER.encode()}


def test_export_then_import_into_another_team_round_trips(make_team):
    source = make_team("source")
    save_row(TOOL, source, TOOL_MD)
    save_row(AGENT, source, RESEARCHER)
    save_row(AGENT, source, WRITER)
    save_row(WORKFLOW, source, CHAIN)
    assert len(markdown_sync(team=source, mode="export").exported) == 4
    exported = files(source)

    target = make_team("target", defs_dir=str(root(source).parent / "target"))
    shutil.copytree(root(source), root(target))
    imported = markdown_sync(team=target, mode="import")
    assert (len(imported.imported), imported.rewritten, imported.errors) == (4, [], [])

    # And back out again: delete the files, export from the imported rows.
    shutil.rmtree(root(target))
    for kind in KINDS:
        kind.model.objects.filter(team=target).update(synced_hash="")
    assert len(markdown_sync(team=target, mode="export").exported) == 4
    assert files(target) == exported


# -- conflicts, deletions, modes ---------------------------------------------------------------


def test_conflict_both_changed_overwrites_nothing(team_a):
    write(team_a, "agents/researcher.md", RESEARCHER)
    markdown_sync(team=team_a, mode="both")
    on_disk = RESEARCHER.replace("You research.", "Edited on disk.")
    in_db = RESEARCHER.replace("You research.", "Edited in the admin.")
    write(team_a, "agents/researcher.md", on_disk)
    save_row(AGENT, team_a, in_db)
    row_before = Agent.objects.values("content", "content_hash", "synced_hash", "version").get(team=team_a)

    for mode in ("both", "import", "export", "check"):
        report = markdown_sync(team=team_a, mode=mode)
        assert [(item.path, item.detail) for item in report.conflicts] == [
            ("agents/researcher.md", "changed in the database and on disk since the last sync; nothing overwritten")
        ], mode
        assert (report.imported, report.exported, report.in_sync) == ([], [], False)
        assert files(team_a) == {"agents/researcher.md": on_disk.encode()}
        assert Agent.objects.values("content", "content_hash", "synced_hash", "version").get(team=team_a) == row_before
    assert versions(team_a, "agent", "researcher") == [(1, "import"), (2, "api")]

    out, error = sync_command_fails(team_a)
    assert "  CONFLICT       agents/researcher.md: changed in the database and on disk" in out
    assert error == "1 conflict(s), 0 invalid file(s), 0 file(s) deleted on disk: see the report above"


def test_same_change_on_both_sides_is_not_a_conflict(team_a):
    write(team_a, "agents/researcher.md", RESEARCHER)
    markdown_sync(team=team_a, mode="both")
    changed = RESEARCHER.replace("Finds facts", "Finds facts fast")
    write(team_a, "agents/researcher.md", changed)
    save_row(AGENT, team_a, changed)

    report = markdown_sync(team=team_a, mode="both")

    assert (report.conflicts, paths(report.unchanged), report.in_sync) == ([], ["agents/researcher.md"], True)
    assert Agent.objects.get(team=team_a).synced_hash == content_hash(changed)


def test_file_deleted_on_disk_keeps_the_row_until_export(team_a):
    write(team_a, "agents/researcher.md", RESEARCHER)
    write(team_a, "agents/writer.md", WRITER)
    markdown_sync(team=team_a, mode="both")
    (root(team_a) / "agents/researcher.md").unlink()

    for mode in ("both", "import", "check"):
        report = markdown_sync(team=team_a, mode=mode)
        assert paths(report.deleted_on_disk) == ["agents/researcher.md"], mode
        assert report.exported == []
        assert files(team_a) == {"agents/writer.md": WRITER.encode()}
        assert Agent.objects.filter(team=team_a, slug="researcher").exists()
    out, error = sync_command_fails(team_a, "--check")
    assert "DELETED        agents/researcher.md: the file was deleted on disk; the row is kept" in out
    assert error == "0 conflict(s), 0 invalid file(s), 1 file(s) deleted on disk: see the report above"

    report = markdown_sync(team=team_a, mode="export")
    assert [(item.path, item.detail) for item in report.exported] == [
        ("agents/researcher.md", "file deleted on disk, written again")
    ]
    assert files(team_a)["agents/researcher.md"] == RESEARCHER.encode()
    assert sync_command(team_a, "--check").endswith("In sync.\n")


def test_import_mode_skips_database_changes_and_export_mode_skips_disk_changes(team_a):
    write(team_a, "agents/researcher.md", RESEARCHER)
    write(team_a, "agents/writer.md", WRITER)
    markdown_sync(team=team_a, mode="both")
    new_researcher = RESEARCHER.replace("Finds facts", "Finds more facts")
    new_writer = WRITER.replace("You write.", "You write well.")
    save_row(AGENT, team_a, new_researcher)  # database side
    write(team_a, "agents/writer.md", new_writer)  # disk side
    write(team_a, "agents/reviewer.md", "---\nname: reviewer\n---\n")  # new on disk

    report = markdown_sync(team=team_a, mode="export")
    assert paths(report.exported) == ["agents/researcher.md"]
    assert [(item.path, item.detail) for item in report.skipped] == [
        ("agents/reviewer.md", "changed on disk: not imported in export mode"),
        ("agents/writer.md", "changed on disk: not imported in export mode"),
    ]
    assert not Agent.objects.filter(team=team_a, slug="reviewer").exists()
    assert Agent.objects.get(team=team_a, slug="writer").body == "You write."

    save_row(AGENT, team_a, new_researcher.replace("more", "even more"))
    report = markdown_sync(team=team_a, mode="import")
    assert paths(report.imported) == ["agents/reviewer.md", "agents/writer.md"]
    assert [(item.path, item.detail) for item in report.skipped] == [
        ("agents/researcher.md", "changed in the database: not exported in import mode")
    ]
    assert files(team_a)["agents/researcher.md"] == new_researcher.encode()
    assert sync_command(team_a).count("exported") == 2  # the line and the summary
    assert markdown_sync(team=team_a, mode="check").in_sync


# -- invalid files ------------------------------------------------------------------------


def test_invalid_file_saves_nothing_and_valid_files_still_import(team_a):
    write(team_a, "agents/broken.md", "---\nname: broken\ntools:\n- vfs_read\n- teleport\n---\n")
    write(team_a, "agents/researcher.md", RESEARCHER)
    write(team_a, "agents/writer.md", "---\nname: writer\ntemperature: hot\n---\n")
    write(team_a, "workflows/chain.md", CHAIN)  # uses writer, which is invalid
    write(team_a, "workflows/solo.md", "---\nname: solo\nsteps:\n- id: one\n  agent: researcher\n---\n")
    before = files(team_a)

    report = markdown_sync(team=team_a, mode="both")

    assert [(e.path, e.line, e.field) for e in report.errors] == [
        ("agents/broken.md", 3, "tools"),
        ("agents/writer.md", 3, "temperature"),
        ("workflows/chain.md", 12, "steps[1].agent"),
    ]
    assert report.errors[0].detail.startswith("unknown tool(s) teleport; known tools are: vfs_read,")
    assert str(report.errors[2]) == "workflows/chain.md:12: steps[1].agent: agent 'writer' does not exist in this team"
    assert paths(report.imported) == ["agents/researcher.md", "workflows/solo.md"]
    assert set(Agent.objects.filter(team=team_a).values_list("slug", flat=True)) == {"researcher"}
    assert set(Workflow.objects.filter(team=team_a).values_list("slug", flat=True)) == {"solo"}
    assert set(DefinitionVersion.objects.filter(team=team_a).values_list("slug", flat=True)) == {"researcher", "solo"}
    assert files(team_a) == before

    out, error = sync_command_fails(team_a)
    assert "  ERROR          agents/writer.md:3: temperature: Input should be a valid number" in out
    assert error == "0 conflict(s), 3 invalid file(s), 0 file(s) deleted on disk: see the report above"


def test_invalid_change_to_an_existing_definition_leaves_the_row_as_it_was(team_a):
    write(team_a, "agents/researcher.md", RESEARCHER)
    markdown_sync(team=team_a, mode="both")
    row_before = Agent.objects.values().get(team=team_a)
    write(team_a, "agents/researcher.md", "---\nname: researcher\nlimits:\n  max_steps: 0\n---\n")

    report = markdown_sync(team=team_a, mode="both")

    assert [str(error) for error in report.errors] == [
        "agents/researcher.md:4: limits.max_steps: Input should be greater than or equal to 1"
    ]
    assert Agent.objects.values().get(team=team_a) == row_before
    assert versions(team_a, "agent", "researcher") == [(1, "import")]


@pytest.mark.parametrize(
    "relative, content, message",
    [
        (
            "agents/!!.md",
            "---\nname: bad\n---\n",
            "the file name has no letter or digit to make a slug of: rename it to <slug>.md "
            "(letters, digits, '-' and '_')",
        ),
        ("agents/latin1.md", "---\nname: caf\xe9\n---\n".encode("latin-1"), "not UTF-8 text"),
        ("agents/empty.md", "", "must start with a '---' line opening the YAML frontmatter"),
        (
            "agents/escape.md",
            '---\nname: a\ndescription: "\\ud800"\n---\n',
            "contains a NUL character or a lone surrogate, which cannot be stored",
        ),
    ],
    ids=["slug", "encoding", "empty", "surrogate"],
)
def test_unreadable_files_are_errors(team_a, relative, content, message):
    write(team_a, relative, content)
    report = markdown_sync(team=team_a, mode="both")
    assert [(error.path, error.detail) for error in report.errors] == [(relative, message)]
    assert not Agent.objects.filter(team=team_a).exists()


def test_files_past_the_yaml_limits_are_error_lines_naming_file_line_and_limit(team_a):
    laughs = "---\nname: lol\na0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
        f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 9)) + "---\n"
    write(team_a, "agents/lol.md", laughs)
    write(team_a, "tools/deep.md", "---\nname: deep\nprompt: p\nparameters: " + "[" * 5000 + "\n---\n")
    write(team_a, "agents/researcher.md", RESEARCHER)

    out, error = sync_command_fails(team_a)

    assert "  ERROR          tools/deep.md:4: lists and mappings are nested more than 32 deep " \
           "(limit MAS_YAML_MAX_DEPTH)\n" in out
    assert "  ERROR          agents/lol.md:7: the alias *a3 repeats 7381 keys and values, making in all more than " \
           "10000 keys and values (limit MAS_YAML_MAX_NODES)\n" in out
    assert error == "0 conflict(s), 2 invalid file(s), 0 file(s) deleted on disk: see the report above"
    assert list(Agent.objects.filter(team=team_a).values_list("slug", flat=True)) == ["researcher"]
    assert not CustomTool.objects.filter(team=team_a).exists()


# -- files whose names are not slugs -------------------------------------------------------

POWERSHELL = (
    "---\nname: powershell-5.1-expert\ndescription: Windows PowerShell 5.1 scripting\ntools: Read, Bash\n"
    "model: sonnet\n---\nYou write PowerShell.\n"
)
POWERSHELL_CANONICAL = (
    "---\nname: powershell-5.1-expert\ndescription: Windows PowerShell 5.1 scripting\ntier: medium\ntools:\n"
    "- vfs_read\n- code_exec\n---\n\nYou write PowerShell.\n"
)


def test_an_agent_file_named_with_a_dot_imports_under_a_slug_and_is_renamed(team_a):
    write(team_a, "agents/powershell-5.1-expert.md", POWERSHELL)

    check = markdown_sync(team=team_a, mode="check")
    assert [(i.slug, i.path, i.detail) for i in check.imported] == [
        ("powershell-51-expert", "agents/powershell-5.1-expert.md", "new")]
    assert check.warnings[-1] == ("agents/powershell-5.1-expert.md: the file name is not a slug: imported as agent "
                                  "'powershell-51-expert', the file would be renamed to agents/powershell-51-expert.md")
    assert files(team_a) == {"agents/powershell-5.1-expert.md": POWERSHELL.encode()}
    assert not Agent.objects.filter(team=team_a).exists()

    report = markdown_sync(team=team_a, mode="both")

    assert report.errors == []
    assert [(i.slug, i.path, i.detail) for i in report.imported] == [
        ("powershell-51-expert", "agents/powershell-5.1-expert.md", "created (version 1)")]
    assert [(i.path, i.detail) for i in report.rewritten] == [
        ("agents/powershell-51-expert.md",
         "renamed from agents/powershell-5.1-expert.md, rewritten in canonical MAS form")]
    assert report.warnings == [
        "agents/powershell-5.1-expert.md: model alias 'sonnet' read as tier medium",
        "agents/powershell-5.1-expert.md: the file name is not a slug: imported as agent 'powershell-51-expert', "
        "the file renamed to agents/powershell-51-expert.md",
    ]
    assert files(team_a) == {"agents/powershell-51-expert.md": POWERSHELL_CANONICAL.encode()}
    row = Agent.objects.get(team=team_a)
    assert (row.slug, row.name, row.tier, row.spec["tools"]) == (
        "powershell-51-expert", "powershell-5.1-expert", "medium", ["vfs_read", "code_exec"])
    assert versions(team_a, "agent", "powershell-51-expert") == [(1, "import")]
    assert markdown_sync(team=team_a, mode="check").in_sync


NON_SLUG_FILES = {
    "tool": ("tools/Summarize v1.2.md", TOOL_MD, "summarize-v12", "tools/summarize-v12.md"),
    "mcp": ("mcp/search.v2.md",
            "---\nname: search\ntransport: streamable-http\nurl: https://mcp.example.com/mcp\n---\n",
            "searchv2", "mcp/searchv2.md"),
    "workflow": ("workflows/Chain (draft).md", CHAIN, "chain-draft", "workflows/chain-draft.md"),
    "skill": ("skills/Cite Well/SKILL.md", "---\nname: cite\ndescription: How to cite\n---\n\nSee apa.md.\n",
              "cite-well", "skills/cite-well/SKILL.md"),
    "provider": ("providers/local.llm.md", "---\nname: local\ntype: openai\nbase_url: http://127.0.0.1:11434/v1\n---\n",
                 "localllm", "providers/localllm.md"),
}


@pytest.mark.parametrize("kind_name", sorted(NON_SLUG_FILES))
def test_other_kinds_with_non_slug_file_names_import_under_a_slug_too(team_a, kind_name):
    relative, text, slug, renamed = NON_SLUG_FILES[kind_name]
    kind = next(k for k in KINDS if k.name == kind_name)
    write(team_a, "agents/researcher.md", RESEARCHER)
    write(team_a, "agents/writer.md", WRITER)
    write(team_a, relative, text)
    if kind is SKILL:
        write(team_a, "skills/Cite Well/apa.md", "# APA\n")
        write(team_a, "skills/Cite Well/logo.png", b"\x89PNG\x00\xff")

    report = markdown_sync(team=team_a, mode="both")

    assert report.errors == []
    assert (f"{relative}: the file name is not a slug: imported as {kind.label.lower()} {slug!r}, the file renamed "
            f"to {renamed}") in report.warnings
    assert [(i.slug, i.path) for i in report.imported if i.kind == kind_name] == [(slug, relative)]
    assert kind.model.objects.filter(team=team_a).values_list("slug", flat=True).get() == slug
    on_disk = files(team_a)
    assert renamed in on_disk and relative not in on_disk
    if kind is SKILL:
        assert Skill.objects.get(team=team_a).references == {"apa.md": "# APA\n"}
        assert on_disk["skills/cite-well/logo.png"] == b"\x89PNG\x00\xff"
        assert not (root(team_a) / "skills/Cite Well").exists()
    assert markdown_sync(team=team_a, mode="check").in_sync


def test_a_non_slug_name_whose_slug_is_taken_is_an_error_and_nothing_moves(team_a):
    write(team_a, "agents/ab.md", "---\nname: ab\n---\n\nThe first.\n")
    write(team_a, "agents/a.b.md", "---\nname: a.b\n---\n\nThe second.\n")
    write(team_a, "agents/A.C.md", "---\nname: A.C\n---\n\nThe third.\n")
    write(team_a, "agents/a.c.md", "---\nname: a.c\n---\n\nThe fourth.\n")
    before = files(team_a)

    report = markdown_sync(team=team_a, mode="both")

    assert [(e.path, e.detail) for e in report.errors] == [
        ("agents/a.b.md", "the file name is not a slug and would import as agent 'ab', which agents/ab.md already "
                          "is: rename one of them"),
        ("agents/a.c.md", "the file name is not a slug and would import as agent 'ac', which agents/ac.md already "
                          "is: rename one of them"),
    ]
    assert sorted(Agent.objects.filter(team=team_a).values_list("slug", "name")) == [("ab", "ab"), ("ac", "A.C")]
    assert sorted(files(team_a)) == ["agents/a.b.md", "agents/a.c.md", "agents/ab.md", "agents/ac.md"]
    assert files(team_a)["agents/a.b.md"] == before["agents/a.b.md"]
    assert files(team_a)["agents/a.c.md"] == before["agents/a.c.md"]


def test_a_non_slug_file_that_is_invalid_is_not_renamed(team_a):
    write(team_a, "agents/v1.0.md", "---\nname: v1\ntemperature: hot\n---\n")
    report = markdown_sync(team=team_a, mode="both")
    assert [(e.path, e.line, e.field) for e in report.errors] == [("agents/v1.0.md", 3, "temperature")]
    assert list(files(team_a)) == ["agents/v1.0.md"]
    assert not Agent.objects.filter(team=team_a).exists()


def test_files_in_the_wrong_place_are_ignored_with_a_warning(team_a):
    write(team_a, "README.md", "# Our definitions\n")
    write(team_a, "agent/typo.md", RESEARCHER)
    write(team_a, "agents/drafts/old.md", RESEARCHER)
    write(team_a, "agents/notes.txt", "not markdown")
    write(team_a, "agents/.hidden.md", RESEARCHER)
    write(team_a, "skills/loose.md", "---\nname: loose\n---\n")
    write(team_a, "skills/no-skill-md/notes.md", "# notes\n")

    report = markdown_sync(team=team_a, mode="both")

    assert report.warnings == [
        "agent/typo.md: not in a definition folder (providers, tools, mcp, skills, guardrails, agents, remote_agents, "
        "workflows, evals): ignored",
        "agents/drafts/old.md: not a definition file (expected agents/<slug>.md): ignored",
        "skills/loose.md: not a definition file (expected skills/<slug>/SKILL.md): ignored",
        "skills/no-skill-md/notes.md: not a definition file (expected skills/<slug>/SKILL.md): ignored",
    ]
    assert (report.imported, report.errors, report.in_sync) == ([], [], True)
    assert not Agent.objects.filter(team=team_a).exists()
    assert not Skill.objects.filter(team=team_a).exists()


# -- check mode -----------------------------------------------------------------------


def test_check_writes_nothing_and_reports_what_would_change(team_a):
    write(team_a, "tools/summarize.md", TOOL_MD)
    write(team_a, "agents/researcher.md", RESEARCHER.replace("- web_fetch", "- summarize"))
    write(team_a, "agents/writer.md", WRITER)
    write(team_a, "workflows/chain.md", CHAIN)
    save_row(AGENT, team_a, "---\nname: reviewer\n---\n")
    before = files(team_a)

    report = markdown_sync(team=team_a, mode="check")

    # Workflows see the agents, and agents the tools, that the same run would import.
    assert report.errors == []
    assert [(item.path, item.detail) for item in report.imported] == [
        ("tools/summarize.md", "new"),
        ("agents/researcher.md", "new"),
        ("agents/writer.md", "new"),
        ("workflows/chain.md", "new"),
    ]
    assert [(item.path, item.detail) for item in report.exported] == [("agents/reviewer.md", "new")]
    assert files(team_a) == before
    assert not CustomTool.objects.filter(team=team_a).exists()
    assert list(Agent.objects.filter(team=team_a).values_list("slug", "synced_hash")) == [("reviewer", "")]
    assert not DefinitionVersion.objects.filter(team=team_a).exclude(slug="reviewer").exists()

    out, error = sync_command_fails(team_a, "--check")
    assert "  would import   workflows/chain.md: new" in out
    assert error == "out of sync: run `manage.py sync_markdown` to import and export the changes above"
    assert files(team_a) == before

    sync_command(team_a)
    assert sync_command(team_a, "--check").endswith("In sync.\n")


def test_check_reports_invalid_files_like_a_real_run(team_a):
    write(team_a, "workflows/solo.md", "---\nname: solo\nsteps:\n- id: one\n  agent: nobody\n---\n")
    report = markdown_sync(team=team_a, mode="check")
    assert [str(error) for error in report.errors] == [
        "workflows/solo.md:5: steps[0].agent: agent 'nobody' does not exist in this team"
    ]
    assert report.imported == []


# -- the command and teams ------------------------------------------------------------------


def test_team_is_required_when_there_are_several(team_a, team_b):
    with pytest.raises(CommandError, match=r"^--team is required: there are 2 teams \(alpha, beta\)$"):
        call_command("sync_markdown", "--check", stdout=StringIO())
    with pytest.raises(CommandError, match="^no team with slug 'gamma'$"):
        call_command("sync_markdown", "--team", "gamma", stdout=StringIO())


def test_the_only_team_is_the_default(team_a):
    write(team_a, "agents/writer.md", WRITER)
    out = StringIO()
    call_command("sync_markdown", stdout=out)
    assert out.getvalue().splitlines()[1:] == [
        "  imported       agents/writer.md: created (version 1)",
        "1 imported, 0 exported, 0 conflicts, 0 deleted on disk, 0 invalid, 0 skipped, 0 unchanged.",
    ]


def test_modes_are_exclusive(team_a):
    with pytest.raises(CommandError, match="not allowed with argument"):
        call_command("sync_markdown", "--import", "--export")


def test_sync_of_one_team_leaves_the_other_alone(team_a, team_b):
    write(team_a, "agents/researcher.md", RESEARCHER)
    other = WRITER.replace("writer", "researcher")
    save_row(AGENT, team_b, other, write_file=True)
    before_b = files(team_b)

    markdown_sync(team=team_a, mode="both")

    assert Agent.objects.get(team=team_b, slug="researcher").content == other
    assert Agent.objects.get(team=team_a, slug="researcher").content == RESEARCHER
    assert files(team_b) == before_b
    assert not (root(team_a) / MCP.folder).exists()


def test_real_world_extra_values_are_stored_as_json(team_a):
    write(team_a, "agents/a.md", "---\nname: a\ncreated: 2024-01-01\nmeta:\n  1: one\n---\n")

    report = markdown_sync(team=team_a, mode="both")

    assert (report.errors, paths(report.imported), paths(report.rewritten)) == ([], ["agents/a.md"], ["agents/a.md"])
    assert Agent.objects.get(team=team_a).extra == {"created": "2024-01-01", "meta": {"1": "one"}}
    assert files(team_a) == {"agents/a.md": b"---\nname: a\ncreated: '2024-01-01'\nmeta:\n  '1': one\n---\n"}
    assert markdown_sync(team=team_a, mode="check").in_sync


def test_row_without_stored_markdown_is_never_exported_as_an_empty_file(team_a):
    row = save_row(AGENT, team_a, WRITER)
    Agent.objects.filter(pk=row.pk).update(content="")  # as rows saved before the content column

    report = markdown_sync(team=team_a, mode="export")

    assert [str(error) for error in report.errors] == [
        "agents/writer.md: the row has no stored markdown: save it once in the admin or the API"
    ]
    assert files(team_a) == {}
    assert Agent.objects.get(pk=row.pk).synced_hash == ""


def test_missing_folder_is_said(team_a):
    report = markdown_sync(team=team_a, mode="check")
    assert report.warnings == [f"{root(team_a)}: the definitions folder does not exist yet"]
    assert report.in_sync
