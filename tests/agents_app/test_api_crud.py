"""Create, read, replace, patch and delete every definition kind through the REST API.

``CASES`` (one per kind) is shared with the isolation, role and malformed
payload tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from agents_app.kinds import AGENT, GUARDRAIL, PROVIDER, SKILL

from mas_core.definitions.kinds import Kind

from tools_app.kinds import MCP, TOOL

from workflows_app.kinds import WORKFLOW
from mas_core.definitions.services import definition_parse, definition_save
from mas_core.definitions.storage import team_defs_dir
from agents_app.models import DefinitionVersion

pytestmark = pytest.mark.django_db


@dataclass(frozen=True)
class Case:
    plural: str
    kind: Kind
    slug: str
    payload: dict[str, Any]  # POST
    created: dict[str, Any]  # expected fields of the response
    replace: dict[str, Any]  # PUT
    replaced: dict[str, Any]
    patch: dict[str, Any]  # PATCH
    patched: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return self.plural


CASES = [
    Case(
        plural="agents",
        kind=AGENT,
        slug="researcher-x",
        payload={
            "name": "Researcher X",
            "description": "Finds facts",
            "tier": "medium",
            "tools": ["vfs_read", "web_fetch"],
            "limits": {"max_steps": 7},
            "body": "You research.",
        },
        created={
            "name": "Researcher X",
            "description": "Finds facts",
            "tier": "medium",
            "tools": ["vfs_read", "web_fetch"],
            "limits": {"max_steps": 7, "max_tool_calls": 50, "timeout_s": 600},
            "memory": {"enabled": False, "k": 5, "consolidate": False,
                       "cache": {"enabled": False, "similarity": 0.96, "ttl_s": 86400}},
            "body": "You research.",
            "extra": {},
        },
        replace={"name": "Researcher X", "description": "Finds and checks facts", "body": "You research carefully."},
        replaced={
            "description": "Finds and checks facts",
            "tier": None,
            "tools": None,
            "limits": {"max_steps": 20, "max_tool_calls": 50, "timeout_s": 600},
            "body": "You research carefully.",
        },
        patch={"tier": "large", "memory": {"enabled": True, "k": 3}},
        patched={
            "description": "Finds and checks facts",
            "tier": "large",
            "memory": {"enabled": True, "k": 3, "consolidate": False,
                       "cache": {"enabled": False, "similarity": 0.96, "ttl_s": 86400}},
            "body": "You research carefully.",
        },
    ),
    Case(
        plural="skills",
        kind=SKILL,
        slug="citations",
        payload={
            "name": "Citations",
            "description": "How to cite sources",
            "body": "Cite every source.",
            "references": {"styles/apa.md": "APA rules"},
            "extra": {"license": "MIT"},
        },
        created={
            "name": "Citations",
            "description": "How to cite sources",
            "body": "Cite every source.",
            "references": {"styles/apa.md": "APA rules"},
            "extra": {"license": "MIT"},
        },
        warnings=["skill: unknown keys kept as they are: license"],
        replace={"name": "Citations", "description": "Citing", "body": "Cite."},
        replaced={"description": "Citing", "body": "Cite.", "extra": {}, "references": {"styles/apa.md": "APA rules"}},
        patch={"references": {"styles/mla.md": "MLA rules"}},
        patched={"description": "Citing", "references": {"styles/mla.md": "MLA rules"}},
    ),
    Case(
        plural="providers",
        kind=PROVIDER,
        slug="local-llm",
        payload={
            "name": "Local LLM",
            "type": "openai",
            "base_url": "http://127.0.0.1:11434/v1",
            "api_key_env": "LOCAL_LLM_KEY",
            "models": [{"name": "llama3", "tier": "small", "input_price": "0.10", "output_price": "0.20",
                        "context_window": 8192}],
        },
        created={
            "name": "Local LLM",
            "type": "openai",
            "base_url": "http://127.0.0.1:11434/v1",
            "api_key_env": "LOCAL_LLM_KEY",
            "models": [{"name": "llama3", "tier": "small", "input_price": "0.10", "output_price": "0.20",
                        "context_window": 8192, "max_output_tokens": None}],
        },
        replace={"name": "Local LLM", "type": "anthropic", "models": [{"name": "claude-x", "input_price": 3}]},
        replaced={
            "type": "anthropic",
            "base_url": None,
            "api_key_env": None,
            "models": [{"name": "claude-x", "tier": None, "input_price": "3", "output_price": "0",
                        "context_window": None, "max_output_tokens": None}],
        },
        patch={"api_key_env": "ANTHROPIC_API_KEY"},
        patched={"type": "anthropic", "api_key_env": "ANTHROPIC_API_KEY"},
    ),
    Case(
        plural="tools",
        kind=TOOL,
        slug="summarize",
        payload={
            "name": "summarize",
            "description": "Summarize a text",
            "parameters": {"text": {"type": "string", "description": "the text"}},
            "prompt": "Summarize: {{text}}",
        },
        created={
            "name": "summarize",
            "description": "Summarize a text",
            "parameters": {"text": {"type": "string", "description": "the text", "required": True, "enum": None}},
            "prompt": "Summarize: {{text}}",
            "model": None,
            "result_schema": None,
        },
        replace={"name": "summarize", "parameters": {"text": {}}, "prompt": "Briefly: {{text}}"},
        replaced={
            "description": "",
            "parameters": {"text": {"type": "string", "description": "", "required": True, "enum": None}},
            "prompt": "Briefly: {{text}}",
        },
        patch={"result_schema": {"type": "object"}},
        patched={"prompt": "Briefly: {{text}}", "result_schema": {"type": "object"}},
    ),
    Case(
        plural="mcp-servers",
        kind=MCP,
        slug="search",
        payload={
            "name": "Search",
            "transport": "streamable-http",
            "url": "https://mcp.example.com/mcp",
            "headers": {"X-Org": "${ORG_ID}"},
            "tools": ["search"],
        },
        created={
            "name": "Search",
            "transport": "streamable-http",
            "url": "https://mcp.example.com/mcp",
            "headers": {"X-Org": "${ORG_ID}"},
            "tools": ["search"],
            "timeout_s": 30,
            "enabled": True,
            "command": None,
            "env": {},
            "secret_env_keys": [],
            "secret_header_keys": [],
        },
        replace={"name": "Search", "transport": "sse", "url": "https://mcp.example.com/sse"},
        replaced={"transport": "sse", "url": "https://mcp.example.com/sse", "headers": {}, "tools": None},
        patch={"timeout_s": 60, "enabled": False},
        patched={"transport": "sse", "timeout_s": 60, "enabled": False},
    ),
    Case(
        plural="workflows",
        kind=WORKFLOW,
        slug="research-chain",
        payload={
            "name": "Research chain",
            "inputs": ["topic"],
            "steps": [
                {"id": "research", "agent": "researcher", "prompt": "Research {topic}", "outputs": ["findings"]},
                {"id": "review", "agent": "reviewer", "depends_on": ["research"], "prompt": "Review {research.findings}"},
            ],
        },
        created={
            "name": "Research chain",
            "trigger": "manual",
            "inputs": ["topic"],
            "on_failure": "stop",
            "steps": [
                {
                    "id": "research",
                    "agent": "researcher",
                    "prompt": "Research {topic}",
                    "depends_on": [],
                    "outputs": ["findings"],
                    "output_schemas": {},
                    "max_retries": 0,
                    "on_failure": None,
                    "gate": [],
                    "approval": [],
                    "guardrails": [],
                },
                {
                    "id": "review",
                    "agent": "reviewer",
                    "prompt": "Review {research.findings}",
                    "depends_on": ["research"],
                    "outputs": [],
                    "output_schemas": {},
                    "max_retries": 0,
                    "on_failure": None,
                    "gate": [],
                    "approval": [],
                    "guardrails": [],
                },
            ],
        },
        replace={"name": "Research chain", "steps": [{"id": "only", "agent": "researcher", "prompt": "Go"}]},
        replaced={"inputs": [], "steps": [{"id": "only", "agent": "researcher", "prompt": "Go", "depends_on": [],
                                           "outputs": [], "output_schemas": {}, "max_retries": 0,
                                           "on_failure": None, "gate": [], "approval": [], "guardrails": []}]},
        patch={"trigger": "schedule", "schedule": "0 6 * * 1"},
        patched={"trigger": "schedule", "schedule": "0 6 * * 1", "inputs": []},
    ),
    Case(
        plural="guardrails",
        kind=GUARDRAIL,
        slug="card-numbers",
        payload={
            "name": "Card numbers",
            "applies_to": ["tool_result", "memory_write"],
            "tools": ["web_fetch", "mcp__*"],
            "detector": {"type": "pii", "kinds": ["card"]},
            "action": "redact",
            "body": "Payment data stays with the payment service.",
        },
        created={
            "name": "Card numbers",
            "description": "",
            "applies_to": ["tool_result", "memory_write"],
            "tools": ["web_fetch", "mcp__*"],
            "detector": {"type": "pii", "kinds": ["card"]},
            "action": "redact",
            "default": False,
            "body": "Payment data stays with the payment service.",
        },
        replace={"name": "Card numbers", "applies_to": ["tool_result"], "detector": {"type": "pii", "kinds": ["card"]},
                 "action": "fence"},
        replaced={"applies_to": ["tool_result"], "tools": ["*"], "action": "fence", "default": False, "body": ""},
        patch={"default": True, "description": "Every run"},
        patched={"description": "Every run", "action": "fence", "default": True},
    ),
]
CASE_IDS = [case.plural for case in CASES]


def seed_agents(team, *slugs: str) -> None:
    """Agents a workflow can name (saved through the service, as an import would)."""
    for slug in slugs or ("researcher", "reviewer"):
        parsed = definition_parse(kind=AGENT, team=team, text=f"---\nname: {slug}\n---\n\nYou are {slug}.\n")
        definition_save(kind=AGENT, team=team, parsed=parsed, source="test")


def prepare(case: Case, team) -> None:
    """What a case needs in its team first: a workflow's agents."""
    if case.kind is WORKFLOW:
        seed_agents(team)


def pick(data: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    return {key: data.get(key, "<missing>") for key in expected}


def file_of(case: Case, team):
    return team_defs_dir(team) / case.kind.relative_path(case.slug)


def create(api, case: Case):
    response = api.post(f"/api/{case.plural}", case.payload)
    assert response.status_code == 201, response.json()
    return response.json()


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_create_get_list_and_markdown_file(case, team_a, api_for):
    prepare(case, team_a)
    api = api_for(team_a, "editor")

    body = create(api, case)

    assert pick(body, case.created) == case.created
    assert (body["slug"], body["version"], body["file_status"], body["sync_status"]) == (case.slug, 1, "written", "in_sync")
    assert body["warnings"] == case.warnings
    row = case.kind.model.objects.get(team=team_a, slug=case.slug)
    assert (row.name, row.version) == (case.payload["name"], 1)

    # The markdown mirror was written, and it is what the API and the version hold.
    text = file_of(case, team_a).read_text(encoding="utf-8")
    markdown = api.get(f"/api/{case.plural}/{case.slug}/markdown")
    assert markdown.status_code == 200
    assert markdown["Content-Type"] == "text/markdown; charset=utf-8"
    assert markdown.content.decode() == text
    version = DefinitionVersion.objects.get(team=team_a, kind=case.kind.name, slug=case.slug)
    assert (version.number, version.content, version.author, version.source) == (1, text, api.user, "api")

    read = {**body, "file_status": None, "warnings": [], "updated_at": row.updated_at.isoformat()[:23] + "Z"}
    got = api.get(f"/api/{case.plural}/{case.slug}")
    assert got.status_code == 200
    assert got.json() == read
    listing = api.get(f"/api/{case.plural}")
    assert listing.status_code == 200
    assert listing.json() == [read]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_replace_patch_versions_delete(case, team_a, api_for):
    prepare(case, team_a)
    api = api_for(team_a, "editor")
    create(api, case)
    url = f"/api/{case.plural}/{case.slug}"

    replaced = api.put(url, case.replace)
    assert replaced.status_code == 200, replaced.json()
    assert pick(replaced.json(), case.replaced) == case.replaced
    assert (replaced.json()["slug"], replaced.json()["version"], replaced.json()["file_status"]) == (case.slug, 2, "written")

    patched = api.patch(url, case.patch)
    assert patched.status_code == 200, patched.json()
    assert pick(patched.json(), case.patched) == case.patched
    assert patched.json()["version"] == 3
    assert file_of(case, team_a).read_text(encoding="utf-8") == api.get(f"{url}/markdown").content.decode()

    versions = api.get(f"{url}/versions")
    assert versions.status_code == 200
    assert [(v["number"], v["author"], v["source"]) for v in versions.json()] == [
        (3, api.user.username, "api"),
        (2, api.user.username, "api"),
        (1, api.user.username, "api"),
    ]
    first = api.get(f"{url}/versions/1")
    assert first.status_code == 200
    stored = DefinitionVersion.objects.get(team=team_a, kind=case.kind.name, slug=case.slug, number=1)
    assert first.json()["markdown"] == stored.content
    assert first.json()["content_hash"] == stored.content_hash
    assert api.get(f"{url}/versions/4").status_code == 404

    deleted = api.delete(url)
    assert deleted.status_code == 200
    assert deleted.json() == {"slug": case.slug, "deleted": True, "warnings": []}
    assert not case.kind.model.objects.filter(team=team_a, slug=case.slug).exists()
    assert not file_of(case, team_a).exists()
    assert api.get(url).status_code == 404
    assert api.get(f"/api/{case.plural}").json() == []
    # History outlives the definition.
    assert [v["number"] for v in api.get(f"{url}/versions").json()] == [3, 2, 1]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_saving_unchanged_content_keeps_the_version(case, team_a, api_for):
    prepare(case, team_a)
    api = api_for(team_a, "editor")
    create(api, case)
    url = f"/api/{case.plural}/{case.slug}"

    again = api.put(url, case.payload)
    assert again.status_code == 200
    assert (again.json()["version"], again.json()["file_status"]) == (1, "unchanged")
    assert api.patch(url, {}).json()["version"] == 1
    markdown = api.get(f"{url}/markdown").content.decode()
    assert api.put(f"{url}/markdown", markdown, content_type="text/markdown").json()["version"] == 1
    assert DefinitionVersion.objects.filter(team=team_a, kind=case.kind.name, slug=case.slug).count() == 1

    changed = api.patch(url, {"description": "changed"})
    assert changed.json()["version"] == 2
    assert DefinitionVersion.objects.filter(team=team_a, kind=case.kind.name, slug=case.slug).count() == 2


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_creating_an_existing_slug_is_a_conflict(case, team_a, api_for):
    prepare(case, team_a)
    api = api_for(team_a, "editor")
    create(api, case)
    before = file_of(case, team_a).read_text(encoding="utf-8")

    again = api.post(f"/api/{case.plural}", {**case.payload, "description": "another"})

    assert again.status_code == 409
    assert again.json() == {"detail": f"a {case.kind.label.lower()} with slug {case.slug!r} already exists"}
    row = case.kind.model.objects.get(team=team_a, slug=case.slug)
    assert row.version == 1
    assert file_of(case, team_a).read_text(encoding="utf-8") == before


def test_agent_markdown_is_exact(team_a, api_for):
    api = api_for(team_a, "editor")
    create(api, CASES[0])
    assert api.get("/api/agents/researcher-x/markdown").content.decode() == (
        "---\n"
        "name: Researcher X\n"
        "description: Finds facts\n"
        "tier: medium\n"
        "tools:\n"
        "- vfs_read\n"
        "- web_fetch\n"
        "limits:\n"
        "  max_steps: 7\n"
        "---\n"
        "\n"
        "You research.\n"
    )


def test_renaming_keeps_the_slug(team_a, api_for):
    api = api_for(team_a, "editor")
    create(api, CASES[0])
    renamed = api.patch("/api/agents/researcher-x", {"name": "Chief Researcher"})
    assert (renamed.json()["slug"], renamed.json()["name"]) == ("researcher-x", "Chief Researcher")
    assert api.get("/api/agents/chief-researcher").status_code == 404


def test_patch_null_resets_a_field_and_required_fields_stay_required(team_a, api_for):
    api = api_for(team_a, "editor")
    create(api, CASES[0])

    reset = api.patch("/api/agents/researcher-x", {"tier": None, "limits": None})
    assert reset.status_code == 200
    assert (reset.json()["tier"], reset.json()["limits"]["max_steps"]) == (None, 20)

    nameless = api.patch("/api/agents/researcher-x", {"name": None})
    assert nameless.status_code == 422
    assert nameless.json() == {
        "detail": [{"loc": ["body", "name"], "msg": "required field is missing", "type": "invalid_definition"}]
    }


def test_agent_extra_keys_are_kept_and_rendered(team_a, api_for):
    api = api_for(team_a, "editor")
    created = api.post("/api/agents", {"name": "Scout", "extra": {"color": "blue", "owner": {"team": "x"}}})
    assert created.status_code == 201
    assert created.json()["extra"] == {"color": "blue", "owner": {"team": "x"}}
    assert created.json()["warnings"] == ["agent: unknown keys kept as they are: color, owner"]
    assert "color: blue\n" in (team_defs_dir(team_a) / "agents/scout.md").read_text()

    patched = api.patch("/api/agents/scout", {"extra": {"color": None, "size": 3}})
    assert patched.json()["extra"] == {"owner": {"team": "x"}, "size": 3}

    clash = api.patch("/api/agents/scout", {"extra": {"tools": ["vfs_read"]}})
    assert clash.status_code == 422
    assert clash.json()["detail"][0]["loc"] == ["body", "extra", "tools"]


def test_agent_may_name_the_teams_custom_tools(team_a, api_for):
    api = api_for(team_a, "editor")
    unknown = api.post("/api/agents", {"name": "Writer", "tools": ["vfs_read", "summarize"]})
    assert unknown.status_code == 422
    assert unknown.json()["detail"][0]["loc"] == ["body", "tools"]
    assert unknown.json()["detail"][0]["msg"].startswith("unknown tool(s) summarize; known tools are: vfs_read, ")

    assert api.post("/api/tools", CASES[3].payload).status_code == 201
    known = api.post("/api/agents", {"name": "Writer", "tools": ["vfs_read", "summarize"]})
    assert known.status_code == 201, known.json()
    assert known.json()["tools"] == ["vfs_read", "summarize"]


def test_provider_models_and_prices_are_rows(team_a, api_for):
    from decimal import Decimal

    from agents_app.models import ProviderModel

    api = api_for(team_a, "editor")
    create(api, CASES[2])
    models = ProviderModel.objects.filter(provider__team=team_a, provider__slug="local-llm")
    assert [(m.name, m.tier, m.input_price, m.output_price, m.context_window, m.max_output_tokens)
            for m in models] == [("llama3", "small", Decimal("0.1000"), Decimal("0.2000"), 8192, None)]
    row = PROVIDER.model.objects.get(team=team_a, slug="local-llm")
    assert (row.provider_type, row.base_url, row.api_key_env) == ("openai", "http://127.0.0.1:11434/v1", "LOCAL_LLM_KEY")


def test_provider_api_key_must_be_an_env_var_name(team_a, api_for):
    api = api_for(team_a, "editor")
    response = api.post("/api/providers", {**CASES[2].payload, "api_key_env": "sk-live-1234"})
    assert response.status_code == 422
    assert [(e["loc"], e["type"]) for e in response.json()["detail"]] == [(["body", "api_key_env"], "string_pattern_mismatch")]
    assert "sk-live-1234" not in PROVIDER.model.objects.values_list("api_key_env", flat=True)


def test_skill_references_are_written_beside_skill_md(team_a, api_for):
    api = api_for(team_a, "editor")
    create(api, CASES[1])
    folder = team_defs_dir(team_a) / "skills" / "citations"
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [
        "SKILL.md",
        "styles/apa.md",
    ]
    assert (folder / "styles/apa.md").read_text() == "APA rules"


@pytest.mark.parametrize("path", ["../escape.md", "/etc/passwd", "a/../../b.md", ".hidden", "SKILL.md", "a/.git/x"])
def test_skill_reference_paths_stay_in_the_folder(team_a, api_for, path):
    api = api_for(team_a, "editor")
    response = api.post("/api/skills", {"name": "Bad", "references": {path: "x"}})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "references"]
    assert not SKILL.model.objects.filter(team=team_a).exists()
    assert not (team_defs_dir(team_a) / "skills").exists()


def test_column_limits_are_422_with_the_field(team_a, api_for):
    api = api_for(team_a, "editor")
    long_url = "http://example.com/" + "x" * 600
    response = api.post("/api/providers", {"name": "P", "type": "openai", "base_url": long_url})
    assert response.status_code == 422
    assert response.json() == {
        "detail": [
            {"loc": ["body", "base_url"], "msg": "Ensure this value has at most 500 characters (it has 619).",
             "type": "invalid"}
        ]
    }
    assert not PROVIDER.model.objects.filter(team=team_a).exists()
    assert api.post("/api/agents", {"name": "A", "model": "m" * 201}).json()["detail"][0]["loc"] == ["body", "model"]
