"""The example definitions shipped in defs/ are valid, canonical and coherent.

A new team sees these files first, and `make demo` imports them: each must
parse without a warning, already be in the canonical form the markdown
mirror writes (so `sync_markdown --check` has nothing to do), and refer only
to agents, skills and MCP servers that are shipped too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agents_app.definitions import storage
from agents_app.definitions.kinds import AGENT, KINDS, MCP, PROVIDER, SKILL, TOOL, WORKFLOW, Kind
from agents_app.definitions.markdown import ParsedDefinition, parse_definition, render_parsed
from agents_app.definitions.services import definition_parse, definition_save, definition_slug
from tools_app.catalog import BUILTIN_TOOLS

DEFS = Path(__file__).resolve().parents[1] / "defs"


def kind_of(relative: Path) -> Kind | None:
    return next((kind for kind in KINDS if kind.slug_from_path(relative)), None)


def definition_files() -> list[Path]:
    return sorted(p.relative_to(DEFS) for p in DEFS.rglob("*") if p.is_file() and kind_of(p.relative_to(DEFS)))


def slugs(kind: Kind) -> set[str]:
    return {kind.slug_from_path(relative) for relative in definition_files() if kind_of(relative) is kind}


def parse_shipped(relative: Path) -> ParsedDefinition:
    kind = kind_of(relative)
    context = {"known_agents": slugs(AGENT)} if kind is WORKFLOW else None
    text = (DEFS / relative).read_bytes().decode("utf-8")
    return parse_definition(kind, text, path=str(relative), context=context)


def shipped(kind: Kind) -> dict[str, ParsedDefinition]:
    return {
        kind.slug_from_path(relative): parse_shipped(relative)
        for relative in definition_files()
        if kind_of(relative) is kind
    }


def test_the_issue_examples_are_all_shipped():
    assert slugs(AGENT) == {"researcher", "writer", "reviewer", "orchestrator"}
    assert slugs(WORKFLOW) == {"chain", "fan-out", "debate", "review-loop", "research-and-review"}
    assert slugs(TOOL) == {"summarize"}
    assert slugs(SKILL) == {"citation-style"}
    assert slugs(PROVIDER) == {"scripted", "openai"}
    assert slugs(MCP) == {"github"}


def test_every_file_is_a_definition_or_a_file_beside_a_skill():
    strays = []
    for path in sorted(p for p in DEFS.rglob("*") if p.is_file()):
        relative = path.relative_to(DEFS)
        if kind_of(relative):
            continue
        skill_dir = DEFS.joinpath(*relative.parts[:2])
        if not (relative.parts[0] == SKILL.folder and (skill_dir / "SKILL.md").is_file()):
            strays.append(str(relative))
    assert strays == []


@pytest.mark.parametrize("relative", definition_files(), ids=str)
def test_file_parses_without_warnings_and_is_canonical(relative: Path):
    parsed = parse_shipped(relative)
    assert parsed.warnings == []
    assert render_parsed(parsed).encode("utf-8") == (DEFS / relative).read_bytes()
    # Named by the slug its name gives, as the mirror names the files it writes.
    assert definition_slug(parsed.spec.name) == kind_of(relative).slug_from_path(relative)
    assert parsed.body, "every shipped definition explains itself in its body"


def test_agents_are_complete_examples():
    skills = slugs(SKILL)
    for slug, parsed in shipped(AGENT).items():
        spec = parsed.spec
        assert spec.description and spec.context, slug
        assert 2 <= len(spec.examples) <= 3, slug
        assert all(example.task and example.approach and example.outcome for example in spec.examples), slug
        assert spec.tier is not None, slug
        assert spec.tools and set(spec.tools) <= set(BUILTIN_TOOLS), slug
        assert "set_output" in spec.tools, f"{slug} runs workflow steps with named outputs"
        assert spec.memory.enabled, slug
        assert set(spec.skills) <= skills, slug
        assert spec.mcp_servers == [], slug
        for tool in spec.custom_tools:
            assert tool.template_warnings() == [], (slug, tool.name)
    ladders = {slug: (parsed.spec.tier, parsed.spec.escalation) for slug, parsed in shipped(AGENT).items()}
    assert ladders == {
        "researcher": ("small", ["small", "medium", "large"]),
        "writer": ("medium", ["medium", "large"]),
        "reviewer": ("medium", ["medium", "large"]),
        "orchestrator": ("large", []),
    }


def test_workflow_levels_are_the_intended_shapes():
    levels = {slug: parsed.spec.levels() for slug, parsed in shipped(WORKFLOW).items()}
    assert levels == {
        "chain": [["research"], ["write"], ["review"]],
        "fan-out": [["plan"], ["research_a", "research_b", "research_c"], ["merge"]],
        "debate": [["case_for", "case_against"], ["rebuttal_for", "rebuttal_against"], ["judge"]],
        "review-loop": [["draft"], ["review"], ["revise"]],
        "research-and-review": [["research"], ["check_facts", "check_clarity"], ["report"]],
    }
    agents = {slug: {step.id: step.agent for step in parsed.spec.steps} for slug, parsed in shipped(WORKFLOW).items()}
    assert agents["debate"] == {
        "case_for": "researcher",
        "case_against": "reviewer",
        "rebuttal_for": "researcher",
        "rebuttal_against": "reviewer",
        "judge": "orchestrator",
    }
    assert set(agents["review-loop"].values()) == {"writer", "reviewer"}


def test_workflows_are_rejected_without_the_shipped_agents():
    relative = Path("workflows/chain.md")
    text = (DEFS / relative).read_text(encoding="utf-8")
    with pytest.raises(ValueError, match="agent 'researcher' does not exist in this team"):
        parse_definition(WORKFLOW, text, path=str(relative), context={"known_agents": {"writer", "reviewer"}})


def test_custom_tool_template_matches_its_parameters():
    tool = shipped(TOOL)["summarize"].spec
    assert tool.template_warnings() == []
    assert set(tool.parameters) == {"text", "max_words", "purpose", "style"}
    assert tool.result_schema["required"] == ["summary", "key_points"]


def test_providers_name_key_variables_never_keys():
    providers = shipped(PROVIDER)
    assert providers["openai"].spec.api_key_env == "OPENAI_API_KEY"
    assert providers["scripted"].spec.api_key_env is None
    for slug, parsed in providers.items():
        assert {model.tier for model in parsed.spec.models} == {"small", "medium", "large"}, slug
        assert "sk-" not in (DEFS / PROVIDER.relative_path(slug)).read_text(encoding="utf-8"), slug


def test_mcp_example_holds_no_literal_secret():
    server = shipped(MCP)["github"].spec
    assert server.secret_values() == ({}, {})
    assert server.enabled is False


@pytest.mark.django_db
def test_saving_every_shipped_definition_leaves_the_files_untouched(make_team, tmp_path):
    """The save service renders each row to exactly the shipped bytes (skill references included)."""
    copy = tmp_path / "defs"
    shutil.copytree(DEFS, copy)
    team = make_team("shipped", defs_dir=str(copy))
    statuses = {}
    for kind in KINDS:  # import order: agents before the workflows that use them
        for slug in sorted(slugs(kind)):
            item = storage.read_item(kind, copy, slug)
            parsed = definition_parse(kind=kind, team=team, text=item.text, path=str(kind.relative_path(slug)))
            references = item.references if kind is SKILL else None
            result = definition_save(
                kind=kind, team=team, parsed=parsed, slug=slug, references=references, source="sync"
            )
            assert result.warnings == [], (kind.name, slug)
            statuses[f"{kind.name}:{slug}"] = (result.created, result.file_status)
    assert set(statuses.values()) == {(True, "unchanged")}
    assert len(statuses) == len(definition_files())
    assert {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*") if p.is_file()} == {
        p.relative_to(DEFS): p.read_bytes() for p in DEFS.rglob("*") if p.is_file()
    }
