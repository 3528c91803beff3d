"""The example definitions shipped in defs/, and the built-in workflow templates, are valid, canonical and coherent.

A new team sees these files first, and `make demo` copies and imports them:
each must parse without a warning, already be in the canonical form the
markdown mirror writes (so `sync_markdown --check` has nothing to do), and
refer only to agents, skills and MCP servers that are shipped too. They are
read where they are, in the repository, and never written.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mas_core.definitions import storage
from agents_app.kinds import AGENT, PROVIDER, SKILL
from mas_core.definitions.kinds import KINDS, Kind
from tools_app.kinds import MCP, TOOL
from workflows_app.kinds import WORKFLOW
from mas_core.definitions.markdown import ParsedDefinition, parse_definition, render_parsed
from mas_core.definitions.services import definition_parse, definition_save, definition_slug
from evals_app.kinds import EVAL
from tests.listing import listed, markdown_files
from tools_app.catalog import BUILTIN_TOOLS
from workflows_app.templates import templates_folder

DEFS = Path(__file__).resolve().parents[1] / "defs"
TEMPLATES = Path(templates_folder())


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


def parse_template(path: Path) -> ParsedDefinition:
    text = path.read_bytes().decode("utf-8")
    return parse_definition(WORKFLOW, text, path=f"workflows/{path.name}", context={"known_agents": slugs(AGENT)})


def templates() -> dict[str, ParsedDefinition]:
    return {path.stem: parse_template(path) for path in markdown_files(TEMPLATES)}


def shipped(kind: Kind) -> dict[str, ParsedDefinition]:
    return {
        kind.slug_from_path(relative): parse_shipped(relative)
        for relative in definition_files()
        if kind_of(relative) is kind
    }


def test_the_issue_examples_are_all_shipped():
    # The demo's second scenario (`manage.py demo_scenario`): a lead and its two specialists.
    assert slugs(AGENT) == {"researcher", "writer", "reviewer", "orchestrator",
                            "launch-lead", "market-analyst", "risk-analyst"}
    assert slugs(WORKFLOW) == {"chain", "fan-out", "debate", "review-loop", "research-and-review"}
    assert [path.name for path in markdown_files(TEMPLATES)] == ["chain.md", "debate.md", "fan-out.md",
                                                                 "review-loop.md"]
    assert slugs(TOOL) == {"summarize"}
    assert slugs(SKILL) == {"citation-style"}
    assert slugs(PROVIDER) == {"scripted", "openai"}
    assert slugs(MCP) == {"github"}
    assert slugs(EVAL) == {"research-and-review-evals"}


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


def test_the_parametrized_lists_are_not_empty():
    assert len(definition_files()) == 18
    assert len(markdown_files(TEMPLATES)) == 4


@pytest.mark.parametrize("relative", listed(definition_files(), "definition files in defs/"), ids=str)
def test_file_parses_without_warnings_and_is_canonical(relative: Path):
    parsed = parse_shipped(relative)
    assert parsed.warnings == []
    assert render_parsed(parsed).encode("utf-8") == (DEFS / relative).read_bytes()
    # Named by the slug its name gives, as the mirror names the files it writes.
    assert definition_slug(parsed.spec.name) == kind_of(relative).slug_from_path(relative)
    assert parsed.body, "every shipped definition explains itself in its body"


@pytest.mark.parametrize("path", markdown_files(TEMPLATES), ids=lambda path: path.stem)
def test_template_parses_without_warnings_and_is_canonical(path: Path):
    parsed = parse_template(path)
    assert parsed.warnings == []
    # Created from as it is, a template is saved byte for byte (the mirror writes the same file).
    assert render_parsed(parsed).encode("utf-8") == path.read_bytes()
    assert definition_slug(parsed.spec.name) == path.stem
    assert parsed.body


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
        "launch-lead": ("medium", []),
        "market-analyst": ("small", []),
        "risk-analyst": ("small", []),
    }


def test_workflow_levels_are_the_intended_shapes():
    workflows = shipped(WORKFLOW)
    levels = {slug: parsed.spec.levels() for slug, parsed in workflows.items()}
    assert levels == {
        "chain": [["research"], ["write"], ["review"]],
        "fan-out": [["plan"], ["research_a", "research_b", "research_c"], ["merge"]],
        "debate": [["case_for", "case_against"], ["rebuttal_for", "rebuttal_against"], ["judge"]],
        "review-loop": [["draft"], ["review"], ["final"]],
        "research-and-review": [["research"], ["check_facts", "check_clarity"], ["report"]],
    }
    agents = {slug: {step.id: step.agent for step in parsed.spec.steps} for slug, parsed in workflows.items()}
    assert agents["debate"] == {
        "case_for": "researcher",
        "case_against": "reviewer",
        "rebuttal_for": "researcher",
        "rebuttal_against": "reviewer",
        "judge": "orchestrator",
    }
    assert set(agents["review-loop"].values()) == {"writer", "reviewer"}
    # The review loop loops: draft and review repeat until the reviewer approves, three rounds at most.
    loops = {slug: [loop.model_dump() for loop in parsed.spec.loops] for slug, parsed in shipped(WORKFLOW).items()}
    assert loops == {"chain": [], "fan-out": [], "debate": [], "research-and-review": [], "review-loop": [
        {"steps": ["draft", "review"], "until": 'review.verdict == "approve"', "max_rounds": 3}]}


def test_the_demo_team_starts_with_copies_of_the_built_in_templates():
    """defs/workflows/ holds the demo team's own copies (edited as the team likes once copied to var/defs/demo);
    the templates themselves are the package's. A template changed without its demo copy is caught here."""
    copies = {path.name: path.read_bytes() for path in markdown_files(DEFS / "workflows") if path.stem != "research-and-review"}
    assert copies == {path.name: path.read_bytes() for path in markdown_files(TEMPLATES)}


def test_workflows_are_rejected_without_the_shipped_agents():
    relative = Path("workflows/chain.md")
    text = (TEMPLATES / "chain.md").read_text(encoding="utf-8")
    with pytest.raises(ValueError, match="agent 'researcher' does not exist in this team"):
        parse_definition(WORKFLOW, text, path=str(relative), context={"known_agents": {"writer", "reviewer"}})


def test_the_eval_dataset_tests_the_demo_workflow_on_the_demo_topic():
    """The shipped dataset runs the workflow `make demo` runs, on the topic it runs it on (the Makefile's
    DEMO_TOPIC, which the bundled recording answers); tests/evals_app/test_shipped_dataset.py runs it."""
    import re

    spec = shipped(EVAL)["research-and-review-evals"].spec
    flow = shipped(WORKFLOW)[spec.workflow].spec
    [topic] = re.findall(r"^DEMO_TOPIC \?= (.+)$", (DEFS.parent / "Makefile").read_text(), re.M)
    assert (spec.workflow, spec.agent, spec.judge) == ("research-and-review", None, None)
    assert [(case.id, case.inputs) for case in spec.cases] == [("tides", {"topic": topic}),
                                                               ("scripted-research", {"topic": topic})]
    steps = {step.id: set(step.outputs) for step in flow.steps}
    for case in spec.cases:
        # Every output a check reads is one the workflow's step declares; scripts name only shipped agents.
        for check in case.checks:
            if check.target.startswith("output:"):
                step, _, name = check.target.removeprefix("output:").partition(".")
                assert name in steps[step], (case.id, check.target)
        assert set(case.script or {}) <= slugs(AGENT), case.id
    kinds = {check.type for case in spec.cases for check in case.checks}
    assert kinds == {"status", "contains", "exact", "file", "tool_called", "tool_not_called", "max_tool_calls",
                     "max_cost_usd", "max_tokens", "max_duration_s"}


def test_the_manual_lists_the_folder_of_every_kind():
    import re

    from tests.manual import example

    listing = example("docs/concepts/definitions.md", language="text", containing="defs/agents/").text
    assert re.findall(r"^defs/([a-z_]+)/", listing, re.M) == [
        "agents", "remote_agents", "workflows", "tools", "mcp", "skills", "providers", "guardrails", "evals"]
    assert {kind.folder for kind in KINDS} == {"agents", "remote_agents", "workflows", "tools", "mcp", "skills",
                                               "providers", "guardrails", "evals"}


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


def repository_files() -> dict[Path, bytes]:
    return {p.relative_to(DEFS): p.read_bytes() for p in DEFS.rglob("*") if p.is_file()}


@pytest.mark.django_db
def test_saving_every_shipped_definition_leaves_the_files_untouched(make_team, settings):
    """The save service renders each row to exactly the shipped bytes (skill references included).

    The team works on the repository's defs/ itself: a save that wanted to
    write anything there would be refused (ReadOnlyFolderError) and fail this.
    """
    # The variables the shipped provider and MCP server name, declared for this team (as `make demo` does).
    settings.MAS_TEAM_SECRETS = "OPENAI_API_KEY=shipped,GITHUB_TOKEN=shipped"
    before = repository_files()
    team = make_team("shipped", defs_dir=str(DEFS))
    statuses = {}
    for kind in KINDS:  # import order: agents before the workflows that use them
        for slug in sorted(slugs(kind)):
            item = storage.read_item(kind, DEFS, slug)
            parsed = definition_parse(kind=kind, team=team, text=item.text, path=str(kind.relative_path(slug)))
            references = item.references if kind is SKILL else None
            result = definition_save(
                kind=kind, team=team, parsed=parsed, slug=slug, references=references, source="sync"
            )
            assert result.warnings == [], (kind.name, slug)
            statuses[f"{kind.name}:{slug}"] = (result.created, result.file_status)
    assert set(statuses.values()) == {(True, "unchanged")}
    assert len(statuses) == len(definition_files())
    assert repository_files() == before


@pytest.mark.django_db
def test_make_demo_declares_every_variable_the_shipped_definitions_name_for_team_demo_only(make_team, tmp_path,
                                                                                         settings):
    """`make demo` imports defs/ into team demo: what they name must be declared for it (Makefile), and no more
    than that team gets them."""
    import re

    from mas_core.definitions.sync import markdown_sync
    from mas_core.secrets import env_refusal, references

    [declared] = re.findall(r"^export MAS_TEAM_SECRETS \?= (.+)$", (DEFS.parent / "Makefile").read_text(), re.M)
    settings.MAS_TEAM_SECRETS = declared
    named = {shipped(PROVIDER)["openai"].spec.api_key_env}
    named |= {name for value in shipped(MCP)["github"].spec.headers.values() for name in references(value)}
    assert named == {"OPENAI_API_KEY", "GITHUB_TOKEN"}
    assert [env_refusal(name, team="demo") for name in sorted(named)] == [None, None]
    assert all(env_refusal(name, team="alpha") for name in named)  # the demo's keys are the demo team's

    copy = tmp_path / "defs"
    shutil.copytree(DEFS, copy)
    report = markdown_sync(team=make_team("demo", defs_dir=str(copy)), mode="import")
    assert (report.errors, len(report.imported)) == ([], len(definition_files()))
