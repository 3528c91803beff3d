"""The markdown codec: every kind of bad file is named by file, line and field; foreign files import.

No database here: the codec is plain Python, the team's names come in as context.
"""

from __future__ import annotations

import pytest

from agents_app.kinds import AGENT, PROVIDER, SKILL

from tools_app.kinds import MCP, TOOL

from workflows_app.kinds import WORKFLOW
from mas_core.definitions.markdown import (
    DefinitionError,
    parse_definition,
    render_definition,
    render_parsed,
)
from tools_app.catalog import BUILTIN_TOOLS


def error_of(kind, text: str, context=None) -> tuple:
    with pytest.raises(DefinitionError) as info:
        parse_definition(kind, text, path="defs/x.md", context=context)
    error = info.value
    return error.path, error.line, error.field, error.message


# -- bad files ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, line, message",
    [
        (
            "---\nname: a\ntools: [vfs_read, web_fetch\n---\n",
            3,
            "invalid YAML: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence on line 3)",
        ),
        (
            "---\nname: a\ndescription: ok\n  nested: wrong\n---\n",
            4,
            "invalid YAML: mapping values are not allowed here",
        ),
        (
            "---\nname: a\n\tdescription: tab\n---\n",
            3,
            "invalid YAML: found character '\\t' that cannot start any token",
        ),
        (
            '---\nname: "a\ndescription: x\n---\n',
            2,
            "invalid YAML: found unexpected end of stream (while scanning a quoted scalar on line 2)",
        ),
    ],
    ids=["unclosed-bracket", "bad-indent", "tab", "unclosed-quote"],
)
def test_yaml_error_names_the_line(text, line, message):
    assert error_of(AGENT, text) == ("defs/x.md", line, "", message)


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("name: a\n---\n", 1, "must start with a '---' line opening the YAML frontmatter"),
        ("---\nname: a\n", 1, "frontmatter opened with '---' is never closed"),
        ("---\n- a\n- b\n---\n", 2, "frontmatter must be a mapping of keys to values"),
    ],
)
def test_frontmatter_shape_errors(text, line, message):
    assert error_of(AGENT, text) == ("defs/x.md", line, "", message)


@pytest.mark.parametrize("kind", [AGENT, TOOL, MCP, WORKFLOW, SKILL, PROVIDER], ids=lambda kind: kind.name)
def test_missing_name_is_named(kind):
    assert error_of(kind, "---\ndescription: no name\n---\n")[2:] == ("name", "required field is missing")


@pytest.mark.parametrize(
    "kind, text, line, field, message",
    [
        (
            AGENT,
            "---\nname: a\ntemperature: hot\n---\n",
            3,
            "temperature",
            "Input should be a valid number, unable to parse string as a number",
        ),
        (AGENT, "---\nname: a\ntemperature: 3\n---\n", 3, "temperature", "Input should be less than or equal to 2"),
        (
            AGENT,
            "---\nname: a\nlimits:\n  max_steps: many\n---\n",
            4,
            "limits.max_steps",
            "Input should be a valid integer, unable to parse string as an integer",
        ),
        (AGENT, "---\nname: a\ntools: 7\n---\n", 3, "tools", "Input should be a valid list"),
        (AGENT, "---\nname: a\ntier: huge\n---\n", 3, "tier", "Input should be 'small', 'medium' or 'large'"),
        (SKILL, "---\nname: [a, b]\n---\n", 2, "name", "Input should be a valid string"),
        (
            WORKFLOW,
            "---\nname: w\nsteps:\n- id: a\n  agent: r\n  max_retries: lots\n---\n",
            6,
            "steps.0.max_retries",
            "Input should be a valid integer, unable to parse string as an integer",
        ),
        (
            PROVIDER,
            "---\nname: p\ntype: openai\nmodels:\n- name: m\n  input_price: free\n---\n",
            6,
            "models.0.input_price",
            "Input should be a valid decimal",
        ),
        (MCP, "---\nname: m\ntransport: sse\n---\n", None, "url", "required for the sse transport"),
        (
            MCP,
            "---\nname: m\ntransport: stdio\ncommand: npx\nurl: http://x\n---\n",
            5,
            "url/headers",
            "only for the streamable-http and sse transports",
        ),
    ],
    ids=["float", "range", "nested-int", "list", "literal", "skill-name", "step-int", "decimal", "mcp-url", "mcp-mix"],
)
def test_wrong_types_name_field_and_line(kind, text, line, field, message):
    assert error_of(kind, text) == ("defs/x.md", line, field, message)


def test_unknown_tool_in_mas_format_file_is_rejected():
    path, line, field, message = error_of(AGENT, "---\nname: a\ntools:\n- vfs_read\n- teleport\n---\n")
    assert (path, line, field) == ("defs/x.md", 3, "tools")
    assert message == f"unknown tool(s) teleport; known tools are: {', '.join(BUILTIN_TOOLS)}"


def test_team_custom_tools_are_known_tools():
    text = "---\nname: a\ntools:\n- vfs_read\n- summarize\n---\n"
    assert parse_definition(AGENT, text, context={"known_tools": {"summarize"}}).spec.tools == ["vfs_read", "summarize"]
    assert error_of(AGENT, text, context={"known_tools": {"translate"}})[2] == "tools"


@pytest.mark.parametrize(
    "kind, text, line, key",
    [
        (WORKFLOW, "---\nname: w\ncolor: red\nsteps:\n- id: a\n  agent: r\n---\n", 3, "color"),
        (TOOL, "---\nname: t\nprompt: p\nretries: 3\n---\n", 4, "retries"),
        (MCP, "---\nname: m\ntransport: stdio\ncommand: npx\nport: 3\n---\n", 5, "port"),
        (PROVIDER, "---\nname: p\ntype: openai\nregion: eu\n---\n", 4, "region"),
    ],
    ids=lambda value: getattr(value, "name", None),
)
def test_unknown_field_of_strict_kinds_is_rejected(kind, text, line, key):
    path, got_line, field, message = error_of(kind, text)
    assert (path, got_line, field) == ("defs/x.md", line, key)
    assert message == f"unknown field (allowed: {', '.join(kind.spec.model_fields)})"


def test_unknown_nested_field_is_rejected_even_for_agents():
    assert error_of(AGENT, "---\nname: a\nlimits:\n  max_step: 3\n---\n")[1:3] == (4, "limits.max_step")


def test_cyclic_workflow_names_the_cycle():
    text = (
        "---\nname: w\nsteps:\n- id: a\n  agent: r\n  depends_on: [c]\n- id: b\n  agent: r\n  depends_on: [a]\n"
        "- id: c\n  agent: r\n  depends_on: [b]\n---\n"
    )
    assert error_of(WORKFLOW, text) == ("defs/x.md", 3, "steps", "cycle: a → c → b → a")


def test_unknown_agent_in_workflow_names_the_step():
    text = "---\nname: w\nsteps:\n- id: a\n  agent: r\n- id: b\n  agent: ghost\n  depends_on: [a]\n---\n"
    assert error_of(WORKFLOW, text, context={"known_agents": {"r"}}) == (
        "defs/x.md",
        7,
        "steps[1].agent",
        "agent 'ghost' does not exist in this team",
    )
    # Without a team to check against, the agent names are not judged.
    assert parse_definition(WORKFLOW, text).spec.steps[1].agent == "ghost"


def test_workflow_output_reference_must_be_declared_upstream():
    text = (
        "---\nname: w\nsteps:\n- id: a\n  agent: r\n- id: b\n  agent: r\n  depends_on: [a]\n"
        "  prompt: 'Use {a.notes}'\n---\n"
    )
    assert error_of(WORKFLOW, text) == (
        "defs/x.md",
        9,
        "steps[1].prompt",
        "{a.notes}: step 'a' declares no output 'notes'",
    )


# -- files written for other tools -------------------------------------------------------

CLAUDE_AGENT = """---
name: code-reviewer
description: Expert code review specialist. Use this: after writing code
tools: Read, Write, Edit, Grep, Glob, Bash, WebFetch, WebSearch
model: sonnet
color: blue
---

You are a senior code reviewer.
"""


def test_claude_code_subagent_becomes_a_mas_agent():
    parsed = parse_definition(AGENT, CLAUDE_AGENT, path="agents/code-reviewer.md")
    spec = parsed.spec
    assert spec.name == "code-reviewer"
    assert spec.description == "Expert code review specialist. Use this: after writing code"
    assert spec.tools == [
        "vfs_read",
        "vfs_write",
        "vfs_edit",
        "vfs_search",
        "vfs_list",
        "code_exec",
        "web_fetch",
        "web_search",
    ]
    assert (spec.model, spec.tier) == (None, "medium")
    assert parsed.extra == {"color": "blue"}
    assert parsed.body == "You are a senior code reviewer."
    assert parsed.warnings == [
        "agents/code-reviewer.md:3: value contains ': ' and was read as plain text to the end of the line",
        "agents/code-reviewer.md: model alias 'sonnet' read as tier medium",
        "agents/code-reviewer.md: unknown keys kept as they are: color",
    ]
    assert render_parsed(parsed) == (
        "---\nname: code-reviewer\ndescription: 'Expert code review specialist. Use this: after writing code'\n"
        "tier: medium\ntools:\n- vfs_read\n- vfs_write\n- vfs_edit\n- vfs_search\n- vfs_list\n- code_exec\n"
        "- web_fetch\n- web_search\ncolor: blue\n---\n\nYou are a senior code reviewer.\n"
    )


@pytest.mark.parametrize(
    "alias, tier",
    [("haiku", "small"), ("sonnet", "medium"), ("opus", "large"), ("inherit", None)],
)
def test_claude_model_aliases_map_to_tiers(alias, tier):
    parsed = parse_definition(AGENT, f"---\nname: a\nmodel: {alias}\n---\n", path="a.md")
    assert (parsed.spec.model, parsed.spec.tier) == (None, tier)
    assert parsed.warnings == [f"a.md: model alias {alias!r} read as tier {tier or 'default'}"]


def test_explicit_tier_wins_over_model_alias():
    parsed = parse_definition(AGENT, "---\nname: a\nmodel: opus\ntier: small\n---\n")
    assert parsed.spec.tier == "small"


def test_unknown_claude_tools_are_kept_and_warned_not_rejected():
    parsed = parse_definition(AGENT, "---\nname: a\ntools: Read, NotebookEdit, Grep, Read\n---\n", path="a.md")
    assert parsed.spec.tools == ["vfs_read", "vfs_search"]
    assert parsed.extra == {"unmapped_tools": ["NotebookEdit"]}
    assert parsed.warnings[0] == "a.md: tools NotebookEdit have no MAS equivalent; kept in unmapped_tools"


def test_colon_in_plain_value_is_read_leniently_with_a_warning():
    parsed = parse_definition(AGENT, "---\nname: a\ndescription: Use this: when x happens\n---\n", path="agents/a.md")
    assert parsed.spec.description == "Use this: when x happens"
    assert parsed.warnings == ["agents/a.md:3: value contains ': ' and was read as plain text to the end of the line"]


def test_leniency_does_not_hide_real_yaml_errors():
    # The relaxed reading only quotes plain `key: a: b` lines; a broken list stays an error.
    text = "---\nname: a\ndescription: Use this: when x\ntools: [vfs_read\n---\n"
    assert error_of(AGENT, text)[1] == 4


def test_extra_keys_are_kept_after_the_known_ones():
    text = "---\nname: a\nx-owner: data-team\nlabels:\n- red\ndescription: d\n---\n"
    parsed = parse_definition(AGENT, text, path="a.md")
    assert parsed.extra == {"x-owner": "data-team", "labels": ["red"]}
    assert parsed.warnings == ["a.md: unknown keys kept as they are: x-owner, labels"]
    assert render_parsed(parsed) == "---\nname: a\ndescription: d\nx-owner: data-team\nlabels:\n- red\n---\n"


def test_extra_values_become_json():
    parsed = parse_definition(AGENT, "---\nname: a\ncreated: 2024-01-01\n---\n", path="a.md")
    assert parsed.extra == {"created": "2024-01-01"}
    assert parsed.warnings == [
        "a.md: created: kept as JSON text: '2024-01-01'",
        "a.md: unknown keys kept as they are: created",
    ]
    assert error_of(AGENT, "---\nname: a\nscore: .inf\n---\n") == (
        "defs/x.md",
        3,
        "score",
        "inf cannot be kept: only finite numbers fit in JSON",
    )
    assert error_of(AGENT, "---\nname: a\nblob: !!binary aGVsbG8=\n---\n")[1:] == (
        3,
        "blob",
        "a value of YAML type bytes cannot be kept: use text, numbers, lists or mappings",
    )


def test_skill_keeps_keys_of_other_tools():
    parsed = parse_definition(
        SKILL, "---\nname: pdf\ndescription: PDFs\nlicense: MIT\nallowed-tools: Read\n---\nUse it.\n"
    )
    assert parsed.extra == {"license": "MIT", "allowed-tools": "Read"}


# -- rendering -----------------------------------------------------------------------


def test_multiline_text_is_rendered_as_a_literal_block():
    text = render_definition(
        spec={"name": "a", "context": "## Sources\n\n- primary\n- secondary\n"}, extra={}, body="Body.\n\n"
    )
    assert text == "---\nname: a\ncontext: |\n  ## Sources\n\n  - primary\n  - secondary\n---\n\nBody.\n"
    assert parse_definition(AGENT, text).spec.context == "## Sources\n\n- primary\n- secondary\n"


def test_horizontal_rule_inside_a_literal_block_does_not_close_the_frontmatter():
    # Found by the round-trip property: an indented '---' used to end the frontmatter.
    text = render_definition(spec={"name": "a", "context": "above\n---\nbelow"}, extra={}, body="b")
    assert text == "---\nname: a\ncontext: |-\n  above\n  ---\n  below\n---\n\nb\n"
    parsed = parse_definition(AGENT, text)
    assert (parsed.spec.context, parsed.body) == ("above\n---\nbelow", "b")


@pytest.mark.parametrize("value", ["\x85", "a\u2028b\nc", "x\u2029", "tab\there\r\nand CR"])
def test_unicode_line_breaks_survive_the_round_trip(value):
    # Found by the round-trip property: YAML folds NEL/LS/PS in unquoted and
    # single-quoted scalars, so such text is written double-quoted.
    text = render_definition(spec={"name": "a", "context": value}, extra={}, body="")
    assert parse_definition(AGENT, text).spec.context == value
    assert render_parsed(parse_definition(AGENT, text)) == text


def test_nul_characters_are_refused_with_their_place():
    assert error_of(AGENT, "---\nname: a\n---\n\nbody\x00\n") == (
        "defs/x.md",
        5,
        "",
        "contains a NUL character: this is not a text file MAS can store",
    )
    assert error_of(AGENT, '---\nname: a\nexamples:\n- task: "x\\0"\n---\n') == (
        "defs/x.md",
        4,
        "examples.0.task",
        "contains a NUL character or a lone surrogate, which cannot be stored",
    )
    assert error_of(AGENT, '---\nname: a\nx-note:\n  deep: "\\ud800"\n---\n')[1:3] == (4, "x-note.deep")


def test_body_may_contain_a_fence_line():
    text = "---\nname: a\n---\n\nPart one\n---\nPart two\n"
    parsed = parse_definition(AGENT, text)
    assert parsed.body == "Part one\n---\nPart two"
    assert render_parsed(parsed) == text


def test_no_body_renders_no_blank_line_and_crlf_is_read():
    assert render_definition(spec={"name": "a"}, extra={}, body="  \n") == "---\nname: a\n---\n"
    parsed = parse_definition(AGENT, "---\r\nname: a\r\n---\r\n\r\nLine one\r\nLine two\r\n")
    assert parsed.body == "Line one\nLine two"
