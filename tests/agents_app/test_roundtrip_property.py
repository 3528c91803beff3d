"""Export → import → export is lossless, for any agent and workflow (hypothesis).

Two properties: the codec alone (render → parse → render is byte-identical
and gives back the same definition), and the real sync service against the
real database (rows exported to files, imported into a fresh team, exported
again: the same bytes).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents_app.kinds import AGENT

from workflows_app.kinds import WORKFLOW
from mas_core.definitions.markdown import (
    parse_definition,
    render_definition,
    render_parsed,
    validate_definition,
)
from mas_core.definitions.services import definition_save, definition_slug
from mas_core.definitions.sync import markdown_sync
from agents_app.models import Agent
from mas_core.specs import TIERS
from tools_app.catalog import BUILTIN_TOOLS
from workflows_app.models import Workflow

_teams = itertools.count(1)

# Any text a person might type, and the awkward characters YAML and the
# file layer care about: colons, quotes, '#', '---' lines, tabs, CR, BOM,
# NEL and other Unicode line breaks, emoji. Surrogates cannot be UTF-8 and
# NUL cannot be stored (both refused with an error, see test_markdown).
CHARS = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
AWKWARD = st.sampled_from(
    [
        ": ",
        "#",
        "'",
        '"',
        "---",
        "\n---\n",
        "\t",
        "\r",
        "\r\n",
        "\ufeff",
        "\x85",
        "\u2028",
        " ",
        "{",
        "}",
        "|",
        ">",
        "- ",
        "&a",
        "*a",
        "!x",
        "%",
        "@",
        "`",
        "🙂",
        "é",
        "\x1b",
        "\u2029",
    ]
)
TEXT = st.lists(st.one_of(st.text(CHARS, max_size=12), AWKWARD), max_size=6).map("".join)
SHORT_TEXT = st.text(CHARS, max_size=20)
NAME = (
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,24}", fullmatch=True)
    .map(str.strip)
    .filter(lambda name: any(c.isalnum() for c in name))
)
IDENT = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)
JSON_SCALAR = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.floats(allow_nan=False, allow_infinity=False), SHORT_TEXT
)
JSON = st.recursive(
    JSON_SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(SHORT_TEXT, inner, max_size=3)),
    max_leaves=6,
)
EXTRA = st.dictionaries(st.from_regex(r"x-[a-z]{1,8}", fullmatch=True), JSON, max_size=3)
# Output schemas: valid JSON Schemas of a few shapes, with any text where a schema holds text.
SCHEMA = st.recursive(
    st.one_of(
        st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "number", "boolean", "null"])},
                              optional={"description": TEXT}),
        st.fixed_dictionaries({"enum": st.lists(st.one_of(SHORT_TEXT, st.integers(-5, 5)), min_size=1, max_size=3,
                                                unique=True)}),
        st.fixed_dictionaries({"const": SHORT_TEXT}),
    ),
    lambda inner: st.one_of(
        st.fixed_dictionaries({"type": st.just("array"), "items": inner}, optional={"maxItems": st.integers(0, 9)}),
        st.builds(lambda props, required: {"type": "object", "properties": props,
                                           "required": [name for name in props if name in required]},
                  st.dictionaries(IDENT, inner, max_size=3), st.sets(IDENT, max_size=3)),
    ),
    max_leaves=5,
)


@st.composite
def custom_tools(draw):
    names = draw(st.lists(st.from_regex(r"[a-zA-Z0-9_-]{1,20}", fullmatch=True), unique=True, max_size=2))
    tools = []
    for name in names:
        params = draw(
            st.dictionaries(
                IDENT,
                st.fixed_dictionaries(
                    {},
                    optional={
                        "type": st.sampled_from(["string", "integer", "number", "boolean", "array", "object"]),
                        "description": SHORT_TEXT,
                        "required": st.booleans(),
                    },
                ),
                max_size=2,
            )
        )
        tools.append({"name": name, "prompt": draw(TEXT), "parameters": params, "description": draw(SHORT_TEXT)})
    return tools


def _climbing(rungs: list[str]) -> list[str]:
    """The rungs with the tiers among them put in climbing order (the models stay where they are)."""
    tiers = iter(sorted((rung for rung in rungs if rung in TIERS), key=TIERS.index))
    return [next(tiers) if rung in TIERS else rung for rung in rungs]


@st.composite
def agent_data(draw) -> dict:
    data = {"name": draw(NAME)}
    optional = {
        "description": TEXT,
        # SPEC: "provider:model" or a tier name (bare Claude aliases are a
        # foreign file's model field and are mapped on import, see test_markdown).
        "model": st.one_of(
            st.sampled_from(TIERS), st.from_regex(r"[a-z]{2,8}:[a-z0-9][a-z0-9.-]{0,15}", fullmatch=True)
        ),
        "tier": st.sampled_from(TIERS),
        # A ladder: tiers that climb, and provider:model rungs anywhere, each once.
        "escalation": st.lists(
            st.one_of(st.sampled_from(TIERS), st.from_regex(r"[a-z]{2,8}:[a-z0-9][a-z0-9.-]{0,15}", fullmatch=True)),
            unique=True, max_size=4,
        ).map(_climbing),
        "temperature": st.floats(0, 2, allow_nan=False),
        "max_tokens": st.integers(1, 1_000_000),
        "tools": st.lists(st.sampled_from(BUILTIN_TOOLS), unique=True, max_size=5),
        "custom_tools": custom_tools(),
        "mcp_servers": st.lists(
            st.one_of(IDENT, st.fixed_dictionaries({"name": IDENT, "url": SHORT_TEXT})), max_size=2
        ),
        "limits": st.fixed_dictionaries(
            {}, optional={"max_steps": st.integers(1, 1000), "timeout_s": st.integers(1, 86400)}
        ),
        "memory": st.fixed_dictionaries({}, optional={"enabled": st.booleans(), "k": st.integers(1, 100)}),
        "context": TEXT,
        "examples": st.lists(
            st.fixed_dictionaries({"task": TEXT}, optional={"approach": TEXT, "outcome": SHORT_TEXT}), max_size=2
        ),
        "skills": st.lists(IDENT, max_size=2),
        "output_schema": SCHEMA,
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            data[key] = draw(strategy)
    return data


@st.composite
def workflow_data(draw, agents: list[str] | None = None) -> dict:
    """A valid workflow: steps depend only on earlier ones, templates use declared outputs upstream."""
    inputs = draw(st.lists(IDENT, unique=True, max_size=2))
    ids = draw(st.lists(IDENT, unique=True, min_size=1, max_size=5))
    agent_names = agents or draw(st.lists(IDENT, min_size=1, max_size=3))
    steps = []
    for index, step_id in enumerate(ids):
        depends = draw(st.lists(st.sampled_from(ids[:index]), unique=True, max_size=2)) if index else []
        outputs = draw(st.lists(IDENT, unique=True, max_size=2))
        # Placeholders that refer to inputs and to outputs of direct dependencies.
        refs = [f"{{{name}}}" for name in inputs]
        refs += [f"{{{dep}.{out}}}" for dep in depends for out in next(s["outputs"] for s in steps if s["id"] == dep)]
        words = draw(
            st.lists(st.one_of(st.sampled_from(refs) if refs else st.nothing(), TEXT.map(_no_braces)), max_size=4)
        )
        step = {
            "id": step_id,
            "agent": draw(st.sampled_from(agent_names)),
            "prompt": " ".join(words),
            "outputs": outputs,
        }
        if depends:
            step["depends_on"] = depends
        if outputs and draw(st.booleans()):
            typed = draw(st.lists(st.sampled_from(outputs), unique=True, min_size=1))
            step["output_schemas"] = {name: draw(SCHEMA) for name in typed}
        if draw(st.booleans()):
            step["max_retries"] = draw(st.integers(0, 10))
        if draw(st.booleans()):
            step["on_failure"] = draw(st.sampled_from(["stop", "continue"]))
        steps.append(step)
    data = {"name": draw(NAME), "steps": steps}
    if draw(st.booleans()):
        # A run of consecutive steps is a valid loop: a step depends only on earlier ones, so no step
        # outside the run lies between two of its steps.
        first = draw(st.integers(0, len(ids) - 1))
        last = draw(st.integers(first, len(ids) - 1))
        loop = {"steps": ids[first:last + 1], "max_rounds": draw(st.integers(1, 20))}
        with_outputs = [s for s in steps[first:last + 1] if s["outputs"]]
        if with_outputs and draw(st.booleans()):
            step = draw(st.sampled_from(with_outputs))
            op = draw(st.sampled_from(["==", "!=", "contains"]))
            literal = draw(st.text(st.characters(exclude_categories=("Cs", "Cc"), exclude_characters="\"\x85\u2028\u2029"),
                                   max_size=12))
            loop["until"] = f'{step["id"]}.{draw(st.sampled_from(step["outputs"]))} {op} "{literal}"'
        data["loops"] = [loop]
    if inputs:
        data["inputs"] = inputs
    if draw(st.booleans()):
        data["description"] = draw(TEXT)
    trigger = draw(st.sampled_from(["manual", "schedule", "channel"]))
    if trigger == "schedule":
        data.update(trigger=trigger, schedule=draw(st.sampled_from(["0 6 * * 1", "*/5 * * * *"])))
    elif trigger == "channel":
        data.update(trigger=trigger, channel=draw(IDENT))
    if draw(st.booleans()):
        data["on_failure"] = "continue"
    return data


def _no_braces(text: str) -> str:
    return text.replace("{", "(").replace("}", ")")


def canonical(kind, data: dict, extra: dict, body: str, context=None) -> str:
    parsed = validate_definition(kind, data, body=body, context=context)
    return render_definition(spec=parsed.spec_data(), extra=extra, body=body)


# -- the codec -----------------------------------------------------------------------------

CODEC = settings(max_examples=100, deadline=None)


@CODEC
@given(data=agent_data(), extra=EXTRA, body=TEXT)
def test_agent_render_parse_render_is_identical(data, extra, body):
    text = canonical(AGENT, data, extra, body)
    parsed = parse_definition(AGENT, text, path="agents/a.md")
    assert render_parsed(parsed) == text
    assert parsed.spec == validate_definition(AGENT, data).spec
    assert parsed.extra == extra
    assert parsed.warnings == ([f"agents/a.md: unknown keys kept as they are: {', '.join(extra)}"] if extra else [])


@CODEC
@given(data=workflow_data(), body=TEXT)
def test_workflow_render_parse_render_is_identical(data, body):
    text = canonical(WORKFLOW, data, {}, body)
    parsed = parse_definition(WORKFLOW, text, path="workflows/w.md")
    assert render_parsed(parsed) == text
    assert parsed.spec == validate_definition(WORKFLOW, data).spec
    assert parsed.spec.levels()[0] == [
        data["steps"][0]["id"],
        *[step["id"] for step in data["steps"][1:] if not step.get("depends_on")],
    ]


# -- through the sync service and the database ---------------------------------------------------

SYNC = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def team_definitions(draw):
    agents = draw(st.lists(st.tuples(agent_data(), EXTRA, TEXT), min_size=1, max_size=3))
    by_slug = {definition_slug(data["name"]): (data, extra, body) for data, extra, body in agents}
    workflows = draw(st.lists(st.tuples(workflow_data(sorted(by_slug)), TEXT), max_size=2))
    return by_slug, {definition_slug(data["name"]): (data, body) for data, body in workflows}


@SYNC
@given(definitions=team_definitions())
def test_export_import_export_through_the_sync_is_identical(make_team, definitions):
    agents, workflows = definitions
    with tempfile.TemporaryDirectory() as tmp:
        number = next(_teams)
        source = make_team(f"prop-src-{number}", defs_dir=f"{tmp}/source")
        target = make_team(f"prop-dst-{number}", defs_dir=f"{tmp}/target")
        for slug, (data, extra, body) in agents.items():
            parsed = validate_definition(AGENT, {**data, **extra}, body=body)
            definition_save(kind=AGENT, team=source, parsed=parsed, slug=slug, write_file=False)
        for slug, (data, body) in workflows.items():
            parsed = validate_definition(WORKFLOW, data, body=body, context={"known_agents": set(agents)})
            definition_save(kind=WORKFLOW, team=source, parsed=parsed, slug=slug, write_file=False)

        first = markdown_sync(team=source, mode="export")
        assert len(first.exported) == len(agents) + len(workflows)
        exported = snapshot(Path(tmp, "source"))

        shutil.copytree(Path(tmp, "source"), Path(tmp, "target"))
        imported = markdown_sync(team=target, mode="import")
        assert (imported.errors, imported.conflicts, imported.rewritten) == ([], [], [])
        assert len(imported.imported) == len(exported)
        for slug in agents:
            assert (
                Agent.objects.get(team=target, slug=slug).content == Agent.objects.get(team=source, slug=slug).content
            )
        assert Workflow.objects.filter(team=target).count() == len(workflows)

        # Export the imported rows into an empty folder: the same bytes again.
        shutil.rmtree(Path(tmp, "target"))
        for model in (Agent, Workflow):
            model.objects.filter(team=target).update(synced_hash="")
        again = markdown_sync(team=target, mode="export")
        assert len(again.exported) == len(exported)
        assert snapshot(Path(tmp, "target")) == exported
        assert markdown_sync(team=target, mode="check").in_sync


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
