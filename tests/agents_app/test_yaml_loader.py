"""The one YAML loader: each limit refused with an exact message at its line, before the expansion is built.

No database: the loader and the codec are plain Python (the limits come from settings).
"""

from __future__ import annotations

import pytest
import yaml

from agents_app.kinds import AGENT

from mas_core.definitions.kinds import KINDS

from workflows_app.kinds import WORKFLOW
from mas_core.definitions.markdown import DefinitionError, parse_definition, render_definition, validate_definition
from mas_core.definitions.yaml_loader import YamlLimitError, YamlLimits, data_limit_problem, yaml_load

SMALL = YamlLimits(max_chars=1000, max_depth=3, max_nodes=20, max_key_chars=5, max_scalar_chars=10)


def refusal(text: str, limits: YamlLimits = SMALL) -> tuple[int | None, str]:
    with pytest.raises(YamlLimitError) as info:
        yaml_load(text, limits=limits)
    mark = info.value.problem_mark
    return (mark.line + 1 if mark is not None else None), info.value.problem


def laughs(levels: int, width: int = 9) -> str:
    """The "billion laughs": each line an anchor of ``width`` aliases of the line before."""
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


# -- the loader, each limit ------------------------------------------------------------


def test_within_every_limit_loads_data_and_nodes():
    data, node = yaml_load("a: [1, 2]\nb: {c: x}\n", limits=SMALL)
    assert data == {"a": [1, 2], "b": {"c": "x"}}
    assert isinstance(node, yaml.MappingNode) and node.start_mark.line == 0


def test_empty_text_is_none():
    assert yaml_load("", limits=SMALL) == (None, None)


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("a: [[[1]]]\n", 1, "lists and mappings are nested more than 3 deep (limit MAS_YAML_MAX_DEPTH)"),
        ("a:\n  b:\n    c:\n      d: 1\n", 4,
         "lists and mappings are nested more than 3 deep (limit MAS_YAML_MAX_DEPTH)"),
        ("a: [" + ", ".join("1" * 20) + "]\n", 1, "more than 20 keys and values (limit MAS_YAML_MAX_NODES)"),
        ("ok: 1\nlong_key: 1\n", 2, "a key of 8 characters; keys are limited to 5 (limit MAS_YAML_MAX_KEY_CHARS)"),
        ("k: 1\n? abcdefghij\n: 1\n", 2,
         "a key of 10 characters; keys are limited to 5 (limit MAS_YAML_MAX_KEY_CHARS)"),
        ("a: x\nb: |\n  0123456789\n", 2,
         "a value of 11 characters; values are limited to 10 (limit MAS_YAML_MAX_SCALAR_CHARS)"),
        ("a: [1, '01234567890']\n", 1,
         "a value of 11 characters; values are limited to 10 (limit MAS_YAML_MAX_SCALAR_CHARS)"),
        ("a: &x [1, 2, 3]\nb: [*x, *x, *x, *x]\n", 2,
         "the alias *x repeats 4 keys and values, making in all more than 20 keys and values "
         "(limit MAS_YAML_MAX_NODES)"),
        ("a: &x [1, *x]\n", 1, "the alias *x is inside the value it refers to"),
        ("a: " + "x" * 1000 + "\n", None,
         "the YAML is 1004 characters; YAML is limited to 1000 (limit MAS_MAX_DEFINITION_BYTES)"),
    ],
    ids=["depth-flow", "depth-block", "nodes", "key", "explicit-key", "scalar-block", "scalar-flow", "alias-expansion",
         "recursive-alias", "text-size"],
)
def test_each_limit_is_refused_at_its_line(text, line, message):
    assert refusal(text) == (line, message)


def test_exactly_at_the_limits_loads():
    # Depth 3 (mapping, list, list), 20 nodes, a 5-character key, a 10-character value.
    text = "abcde: [[0123456789, 2], 3]\nb: [1, 2]\nc: [1, 2, 3, 4, 5, 6, 7]\n"
    data, _ = yaml_load(text, limits=SMALL)
    assert data == {"abcde": [["0123456789", 2], 3], "b": [1, 2], "c": [1, 2, 3, 4, 5, 6, 7]}
    assert refusal(text + "d: 1\n") == (4, "more than 20 keys and values (limit MAS_YAML_MAX_NODES)")


def test_aliases_within_the_limit_load_as_their_expansion():
    data, _ = yaml_load("base: &b {k: 1}\nother: *b\nmerged: {<<: *b, j: 2}\n", limits=YamlLimits())
    assert data == {"base": {"k": 1}, "other": {"k": 1}, "merged": {"k": 1, "j": 2}}


def test_billion_laughs_stops_at_the_first_alias_past_the_limit():
    # 9 levels of 9 would be 9**9 "lol"s; the default limit is reached on line 5, the first alias of a4.
    assert refusal(laughs(9), YamlLimits()) == (
        5, "the alias *a3 repeats 7381 keys and values, making in all more than 10000 keys and values "
           "(limit MAS_YAML_MAX_NODES)",
    )


def test_merge_bomb_is_counted_like_aliases():
    text = "a0: &a0 {x: 1, y: 2}\n" + "".join(
        f"a{i}: &a{i} {{<<: [{', '.join([f'*a{i - 1}'] * 9)}]}}\n" for i in range(1, 9))
    line, message = refusal(text, YamlLimits())
    assert line == 5 and message.startswith("the alias *a3 repeats ") and message.endswith("(limit MAS_YAML_MAX_NODES)")


def test_deep_nesting_is_refused_before_python_recursion():
    assert refusal("k: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n", YamlLimits()) == (
        1, "lists and mappings are nested more than 32 deep (limit MAS_YAML_MAX_DEPTH)")
    assert refusal("k: " + "[" * 5000 + "\n", YamlLimits()) == (
        1, "lists and mappings are nested more than 32 deep (limit MAS_YAML_MAX_DEPTH)")


@pytest.mark.parametrize(
    "text, message",
    [
        ("k: 1" + "0" * 5000 + "\n", "cannot read this int: Exceeds the limit (4300 digits) for integer string "
                                     "conversion: value has 5001 digits"),
        ("k: 2001-13-45\n", "cannot read this timestamp: month must be in 1..12"),
        ("k: !!int 0x\n", "cannot read this int: invalid literal for int() with base 16: ''"),
    ],
)
def test_scalars_python_cannot_read_are_yaml_errors(text, message):
    with pytest.raises(yaml.YAMLError) as info:
        yaml_load(text, limits=YamlLimits())
    assert (info.value.problem, info.value.problem_mark.line) == (message, 0)


def test_limits_come_from_settings(settings):
    settings.MAS_YAML_MAX_DEPTH, settings.MAS_YAML_MAX_NODES = 2, 7
    settings.MAS_YAML_MAX_KEY_CHARS, settings.MAS_YAML_MAX_SCALAR_CHARS = 3, 4
    settings.MAS_MAX_DEFINITION_BYTES = 50
    assert YamlLimits.from_settings() == YamlLimits(max_chars=50, max_depth=2, max_nodes=7, max_key_chars=3,
                                                    max_scalar_chars=4)
    with pytest.raises(YamlLimitError, match="nested more than 2 deep"):
        yaml_load("a: [[1]]\n")


# -- through the markdown codec: file, line and limit --------------------------------------


def definition_error(kind, text: str) -> tuple:
    with pytest.raises(DefinitionError) as info:
        parse_definition(kind, text, path=f"{kind.folder}/x.md", context={"known_agents": set()})
    return info.value.path, info.value.line, info.value.field, info.value.message


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_every_kind_refuses_the_billion_laughs_naming_file_line_and_limit(kind):
    text = "---\nname: x\n" + laughs(9) + "---\nbody\n"
    assert definition_error(kind, text) == (
        f"{kind.folder}/x.md", 7, "",
        "the alias *a3 repeats 7381 keys and values, making in all more than 10000 keys and values "
        "(limit MAS_YAML_MAX_NODES)",
    )


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
@pytest.mark.parametrize(
    "yaml_text, line, message",
    [
        ("k: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n", 3,
         "lists and mappings are nested more than 32 deep (limit MAS_YAML_MAX_DEPTH)"),
        ("k: " + "[" * 5000 + "\n", 3, "lists and mappings are nested more than 32 deep (limit MAS_YAML_MAX_DEPTH)"),
        ("description: ok\n? " + "k" * 100_000 + "\n: v\n", 4,
         "a key of 100000 characters; keys are limited to 256 (limit MAS_YAML_MAX_KEY_CHARS)"),
        ("description: >\n  " + "v" * 140_000 + "\n", 3,
         "a value of 140001 characters; values are limited to 131072 (limit MAS_YAML_MAX_SCALAR_CHARS)"),
        ("k: 2001-13-45\n", 3, "invalid YAML: cannot read this timestamp: month must be in 1..12"),
    ],
    ids=["flow-maps", "brackets", "key", "value", "bad-date"],
)
def test_every_kind_refuses_each_limit_naming_file_and_line(kind, yaml_text, line, message):
    assert definition_error(kind, f"---\nname: x\n{yaml_text}---\n") == (f"{kind.folder}/x.md", line, "", message)


def test_a_relaxed_reading_does_not_retry_a_refusal():
    # "description: a: b" makes the strict reading fail; the limit still has the last word.
    text = "---\nname: x\ndescription: a: b\nk: " + "[" * 40 + "\n---\n"
    assert definition_error(AGENT, text) == (
        "agents/x.md", 4, "", "lists and mappings are nested more than 32 deep (limit MAS_YAML_MAX_DEPTH)")


# -- data that came as JSON meets the same limits ---------------------------------------------


def nested(depth: int, leaf: object = 1):
    value = leaf
    for _ in range(depth):
        value = {"n": value}
    return value


@pytest.mark.parametrize(
    "data, field, message",
    [
        ({"name": "x", "x-deep": nested(32)}, "x-deep" + ".n" * 31,
         "lists and mappings are nested more than 32 deep (limit MAS_YAML_MAX_DEPTH)"),
        ({"name": "x", "x-key": {"k" * 257: 1}}, "x-key",
         "a key of 257 characters; keys are limited to 256 (limit MAS_YAML_MAX_KEY_CHARS)"),
        ({"name": "x", "context": "c" * 131_073}, "context",
         "a value of 131073 characters; values are limited to 131072 (limit MAS_YAML_MAX_SCALAR_CHARS)"),
        ({"name": "x", "x-many": list(range(1_000_000))}, "x-many",
         "more than 10000 keys and values (limit MAS_YAML_MAX_NODES)"),
    ],
    ids=["depth", "key", "value", "nodes"],
)
def test_json_data_meets_the_yaml_limits(data, field, message):
    with pytest.raises(DefinitionError) as info:
        validate_definition(AGENT, data)
    assert (info.value.field, info.value.message) == (field, message)


def test_json_data_within_the_limits_is_stored_and_loads_again():
    data = {"name": "x", "x-deep": nested(31), "x-list": list(range(5000))}
    parsed = validate_definition(AGENT, data)
    text = render_definition(spec=parsed.spec_data(), extra=parsed.extra, body="b")
    assert parse_definition(AGENT, text).extra == {"x-deep": nested(31), "x-list": list(range(5000))}
    assert data_limit_problem(data) is None


def test_shared_values_are_rendered_without_anchors():
    shared = {"k": [1, 2]}
    parsed = validate_definition(WORKFLOW, {"name": "w", "steps": [{"id": "a", "agent": "r", "prompt": "p"}]},
                                 context={"known_agents": {"r"}})
    text = render_definition(spec=parsed.spec_data(), extra={"x-a": shared, "x-b": shared}, body="")
    assert "&" not in text and "*" not in text
    assert text.endswith("x-a:\n  k:\n  - 1\n  - 2\nx-b:\n  k:\n  - 1\n  - 2\n---\n")


def test_json_data_whose_canonical_yaml_is_past_the_size_limit_is_refused():
    # 45 KB of JSON: 9,000 short items 29 levels down, each indented by some 60 spaces in block style.
    data = {"name": "x", "x-deep": nested(28, leaf=["a"] * 9000)}
    with pytest.raises(DefinitionError) as info:
        validate_definition(AGENT, data, path="agents/x.md")
    assert str(info.value) == ("agents/x.md: the YAML frontmatter is 540912 characters in canonical form; YAML is "
                               "limited to 262144 (limit MAS_MAX_DEFINITION_BYTES)")
