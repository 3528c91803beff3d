"""The manual (README.md and the MkDocs site in docs/): it builds offline with no broken link, every example of
every page holds, and the reference pages list what the code has — every field of every definition kind, every
API route, every management command's options, every built-in tool and every environment variable MAS reads.

Examples that say more than their syntax are run for what they say by the tests of their subject (they find
them through tests/manual.py): the websocket follower and the tokens in tests/test_docs_examples.py, the
eval dataset in tests/evals_app, the webhook signature in tests/agents_app/test_approval_webhooks.py, …
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin
from urllib.parse import urlparse

import pytest
import yaml
from pydantic import BaseModel

from tests.manual import DOCS, ROOT, Example, examples, fence_lines, page, pages, section

MKDOCS = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
PAGES_WITH_EXAMPLES = [name for name in pages() if fence_lines(name)]


def nav_pages(entries: list[Any]) -> list[str]:
    found = []
    for entry in entries:
        for value in (entry.values() if isinstance(entry, dict) else [entry]):
            found.extend(nav_pages(value) if isinstance(value, list) else [value])
    return found


# -- the site ---------------------------------------------------------------------------------------------------


def test_the_manual_builds_offline_with_no_broken_link(tmp_path):
    """``mkdocs build --strict`` with no network at all (a network namespace of its own, as code_exec has)."""
    site = tmp_path / "site"
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
    offline = [shutil.which("bwrap") or "/usr/bin/bwrap", "--dev-bind", "/", "/", "--unshare-net", "--", *command]
    done = subprocess.run(offline, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
                          env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    built = {path.relative_to(site).as_posix() for path in site.rglob("index.html")}
    expected = {"index.html" if name == "index.md" else name.removesuffix(".md").removesuffix("/index") + "/index.html"
                for name in nav_pages(MKDOCS["nav"])}
    assert expected <= built, expected - built
    # Nothing the browser would fetch from elsewhere either: no web fonts.
    for html in site.rglob("*.html"):
        text = html.read_text(encoding="utf-8")
        assert "fonts.googleapis" not in text and "fonts.gstatic" not in text, html


def test_the_site_is_configured_strict_and_offline():
    assert MKDOCS["docs_dir"] == "docs"
    assert MKDOCS["site_dir"].startswith("var/")  # var/ is not tracked (.gitignore)
    assert "var/" in (ROOT / ".gitignore").read_text(encoding="utf-8").split()
    assert MKDOCS["strict"] is True
    assert MKDOCS["theme"]["name"] == "material" and MKDOCS["theme"]["font"] is False
    # Material's social cards and privacy plugin download at build time; only its search runs here.
    assert MKDOCS["plugins"] == ["search"]
    links = MKDOCS["validation"]["links"]
    assert (links["not_found"], links["anchors"]) == ("warn", "warn")  # --strict turns a warning into a failure


def test_every_page_is_in_the_nav_once():
    listed = nav_pages(MKDOCS["nav"])
    assert len(listed) == len(set(listed))
    assert sorted(listed) == sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))


def test_make_test_builds_the_manual_before_pytest_and_make_docs_serves_it():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")

    def recipe(target: str) -> str:
        return makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]

    test = recipe("test")
    assert test.index("$(BIN)/lint-imports") < test.index("$(MAKE) docs-build") < test.index("$(BIN)/python -m pytest")
    assert "$(BIN)/mkdocs build --strict --site-dir var/site" in recipe("docs-build")
    assert "$(BIN)/mkdocs serve --dev-addr 127.0.0.1:$(MAS_DOCS_PORT)" in recipe("docs")
    assert "MAS_DOCS_PORT ?= 8001" in makefile  # daphne has 8000
    assert "-e '.[test,docs]'" in makefile
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert extras["docs"] == ["mkdocs>=1.6,<2", "mkdocs-material>=9.6,<10"]


def test_the_readme_is_short_and_its_links_lead_somewhere():
    readme = page("README.md")
    assert len(readme.splitlines()) < 240  # 200 until it showed one example per door (issue 25)
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    assert links, "the README links to the manual"
    for link in links:
        assert "://" in link or (ROOT / link).is_file(), link
    assert set(link for link in links if link.startswith("docs/")) >= {
        "docs/quickstart.md", "docs/model-providers.md", "docs/concepts/architecture.md", "docs/deployment.md"}


# -- the examples -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PAGES_WITH_EXAMPLES)
def test_every_example_of_the_page_holds(name):
    found = examples(name)
    # The guard: a page that has examples yields them all (a fence the parser misses would go untested).
    assert found and len(found) * 2 == fence_lines(name), (len(found), fence_lines(name))
    for block in found:
        CHECKS[block.language](block)


def test_pages_with_examples_are_found():
    assert {"README.md", "docs/quickstart.md", "docs/concepts/runs.md", "docs/concepts/evals.md",
            "docs/reference/definitions/agents.md", "docs/deployment.md"} <= set(PAGES_WITH_EXAMPLES)


def check_markdown(block: Example) -> None:
    """A definition file, titled with its path in a team's folder: it parses as that kind."""
    from mas_core.definitions.kinds import KINDS
    from mas_core.definitions.markdown import parse_definition

    assert block.title.startswith("defs/"), f"{block}: title a markdown example with its file, defs/<kind>/…"
    relative = Path(block.title.removeprefix("defs/"))
    [kind] = [kind for kind in KINDS if kind.slug_from_path(relative) is not None]
    parsed = parse_definition(kind, block.text, path=block.title)
    assert parsed.spec.name, block


def check_json(block: Example) -> None:
    json.loads(block.text)


def check_yaml(block: Example) -> None:
    assert yaml.safe_load(block.text) is not None, block


def check_python(block: Example) -> None:
    compile(block.text, str(block), "exec")


def check_text(block: Example) -> None:
    assert block.text.strip(), block  # a picture: nothing to run


def check_sh(block: Example) -> None:
    """Each command of a shell block: manage.py's with that command's own parser, curl's against the API's
    routes, make's against the Makefile's targets."""
    text = block.text.replace("\\\n", " ")
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if "manage.py" in line:
            manage_command_check(line, block)
        if words and words[0] == "curl" and "..." not in words:
            curl_check(words, block)
        if words and words[0] == "make":
            targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M))
            for target in (word for word in words[1:] if "=" not in word):
                assert target in targets, f"{block}: make {target}"


def manage_command_check(line: str, block: Example) -> None:
    from django.core.management import get_commands, load_command_class

    after = re.split(r"\s*(?:\||\)|&&|;|#)", line.split("manage.py", 1)[1])[0]
    name, *argv = shlex.split(after)
    app = get_commands().get(name)
    assert app is not None, f"{block}: manage.py {name} is no command"
    command = load_command_class(app, name)
    # A CommandError names what is wrong; an abbreviated option would parse but read as a typo.
    command.create_parser("manage.py", name, allow_abbrev=False).parse_args(argv)


def curl_check(words: list[str], block: Example) -> None:
    from mas_project.api import api

    method = words[words.index("-X") + 1] if "-X" in words else "POST" if "-d" in words else "GET"
    [url] = [word for word in words if "/api/" in word and not word.startswith("{")]
    path = urlparse(url.replace("$MAS", "http://127.0.0.1:8000")).path
    routes = {re.sub(r"\{[^}]+\}", "[^/]+", route): set(operations) for route, operations
              in api.get_openapi_schema()["paths"].items()}
    matching = [operations for pattern, operations in routes.items() if re.fullmatch(pattern, path)]
    assert matching and method.lower() in matching[0], f"{block}: {method} {path} is no route of the API"


CHECKS = {"markdown": check_markdown, "json": check_json, "yaml": check_yaml, "python": check_python,
          "sh": check_sh, "text": check_text}


# -- the reference pages ----------------------------------------------------------------------------------------

# Kept keys the code reads (an agent or skill keeps keys it does not know): documented beside the fields.
KEPT_KEYS = {"agent": {"unmapped_tools"}, "skill": {"always"}}
REFERENCE_PAGES = {"agent": "agents", "tool": "tools", "mcp": "mcp-servers", "skill": "skills",
                   "provider": "providers", "guardrail": "guardrails", "workflow": "workflows", "eval": "evals",
                   "remote_agent": "remote-agents"}


def spec_fields(model: type[BaseModel], prefix: str = "") -> dict[str, Any]:
    """Every field of a definition's schema by its path (``limits.max_steps``, ``steps[].id``), nested models
    opened; a nested model that is a kind's own schema (an agent's ``custom_tools``) is one field."""
    from mas_core.definitions.kinds import KINDS

    specs = {kind.spec for kind in KINDS}
    found: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        path = prefix + name
        found[path] = field
        annotation = field.annotation
        while get_origin(annotation) is Union or type(annotation).__name__ == "UnionType":
            annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
        origin, args = get_origin(annotation), get_args(annotation)
        if origin is list:
            inner, mark = args[0], "[]"
        elif origin is dict:
            inner, mark = args[1], ".<name>"
        else:
            inner, mark = annotation, ""
        if isinstance(inner, type) and issubclass(inner, BaseModel) and inner not in specs:
            if not mark:
                del found[path]  # a group of fields (limits, memory.cache): its fields are the rows
            found.update(spec_fields(inner, f"{path}{mark}."))
    return found


def reference_rows(name: str) -> dict[str, str]:
    """The rows of the ``Fields`` table of a reference page, by the field in their first cell."""
    rows = {}
    for line in section(name, "Fields").splitlines():
        match = re.match(r"^\| `([^`]+)`( \(a text\))? \|", line)
        if match and match[1] != "field":
            rows[match[1]] = line
    return rows


def number_forms(value: float) -> set[str]:
    """How the reference may write a number: 86400 or 86,400; 0.96; 1.0 or 1."""
    forms = {repr(value)}
    if float(value).is_integer():
        forms |= {str(int(value)), f"{int(value):,}"}
    return forms


@pytest.mark.parametrize("kind_name", list(REFERENCE_PAGES))
def test_the_definitions_reference_lists_every_field_with_its_default_choices_and_bounds(kind_name):
    from mas_core.definitions.kinds import kind_named

    kind = kind_named(kind_name)
    name = f"docs/reference/definitions/{REFERENCE_PAGES[kind_name]}.md"
    rows = reference_rows(name)
    fields = spec_fields(kind.spec)
    missing = set(fields) - set(rows)
    assert not missing, f"{name} does not document {sorted(missing)}"
    # A row that is no field of the schema documents a key inside one (approval[].tool) or a kept key.
    for documented in set(rows) - set(fields):
        parent = re.split(r"\[\]|\.", documented)[0]
        group = any(path.startswith(documented + ".") for path in fields)  # judge, for judge.model …
        assert parent in fields or group or documented in KEPT_KEYS.get(kind_name, set()), f"{name}: {documented}"
    for path, field in fields.items():
        row = rows[path]
        default_cell = row.split(" | ")[2]
        if field.is_required():
            assert default_cell == "required", (path, default_cell)
            continue
        default = field.default
        if isinstance(default, bool):
            assert f"`{str(default).lower()}`" in default_cell, (path, default_cell)
        elif isinstance(default, (int, float)):
            assert any(f"`{form}`" in default_cell for form in number_forms(default)), (path, default_cell)
        elif isinstance(default, str) and default:
            assert f"`{default}`" in default_cell, (path, default_cell)
        annotation = field.annotation
        for choice in (arg for arg in get_args(annotation) + (annotation,) if get_origin(arg) is Literal):
            for value in get_args(choice):
                assert f"`{value}`" in row, (path, value)
        for constraint in field.metadata:
            for bound in ("ge", "gt", "le", "lt", "min_length", "max_length"):
                value = getattr(constraint, bound, None)
                if value is not None and not (bound == "min_length" and value <= 1):
                    assert any(form in row for form in number_forms(value)), (path, bound, value)


def test_the_kept_keys_are_read_by_the_code():
    assert '(row.extra or {}).get("always") is True' in (ROOT / "agents_app/skills.py").read_text(encoding="utf-8")
    assert 'data["unmapped_tools"]' in (ROOT / "mas_core/definitions/markdown.py").read_text(encoding="utf-8")


def test_the_definitions_overview_lists_every_kind_and_its_folder():
    from mas_core.definitions.kinds import KINDS

    overview = page("docs/reference/definitions/index.md")
    for kind in KINDS:
        assert f"`{kind.relative_path('<slug>').as_posix()}`" in overview, kind.name
        assert f"]({REFERENCE_PAGES[kind.name]}.md)" in overview, kind.name


def test_the_built_in_tools_reference_lists_every_tool_as_the_model_sees_it():
    from tools_app.builtin import BUILTIN_TOOL_CLASSES
    from tools_app.catalog import BUILTIN_TOOLS, SAFE_DEFAULT_TOOLS

    rows = re.findall(r"^\| `(\w+)\(([^)]*)\)` \| (default|—) \| (.*) \|$", page("docs/reference/built-in-tools.md"),
                      re.M)
    assert sorted(row[0] for row in rows) == sorted(BUILTIN_TOOLS)
    for name, signature, default, description in rows:
        tool = BUILTIN_TOOL_CLASSES[name]
        parameters = [field + ("" if info.is_required() else "?")
                      for field, info in tool.Parameters.model_fields.items()]
        assert (signature.split(", ") if signature else []) == parameters, name
        assert (default == "default") == (name in SAFE_DEFAULT_TOOLS), name
        unescaped = re.sub(r"\\([*_|])", r"\1", description).replace("&lt;", "<").replace("&gt;", ">")
        assert unescaped == tool.description, name


def test_the_api_reference_lists_every_route_with_its_methods():
    from mas_project.api import api

    text = page("docs/reference/api.md")
    # "For every kind `<p>` in `agents`, …:" — a kind left out leaves its routes undocumented.
    kinds = re.findall(r"`([a-z-]+)`", re.search(r"For every kind `<p>` in (.+?):", text, re.S)[1])
    assert len(kinds) >= 9, kinds
    documented: set[tuple[str, str]] = set()
    for line in text.splitlines():
        cells = line.split(" | ")
        if not line.startswith("| ") or len(cells) < 3 or not re.fullmatch(r"\| [A-Z /]+", cells[0]):
            continue
        methods = re.findall(r"[A-Z]+", cells[0])
        for path in re.findall(r"`(/api/[^`?]*)", cells[1]):
            for expanded in ([path.replace("<p>", kind) for kind in kinds] if "<p>" in path else [path]):
                shape = re.sub(r"\{[^}]+\}", "{}", expanded)
                documented |= {(method, shape) for method in methods}
    routes = {(method.upper(), re.sub(r"\{[^}]+\}", "{}", path))
              for path, operations in api.get_openapi_schema()["paths"].items() for method in operations}
    assert routes - documented == set(), "routes missing from docs/reference/api.md"
    assert documented - routes == set(), "docs/reference/api.md lists routes that do not exist"


MAS_COMMANDS = ["create_team", "create_api_token", "setup_demo", "demo_scenario", "sync_markdown", "run_agent",
                "run_workflow", "eval", "prune_runs", "mcp_serve"]


def test_every_command_of_mas_is_in_the_cli_reference():
    from django.core.management import get_commands

    ours = sorted(name for name, app in get_commands().items()
                  if app in {"agents_app", "tools_app", "memory_app", "workflows_app", "evals_app", "mas_project"})
    assert ours == sorted(MAS_COMMANDS)


@pytest.mark.parametrize("name", MAS_COMMANDS)
def test_the_cli_reference_lists_every_option_of_the_command(name):
    from django.core.management import get_commands, load_command_class
    from django.core.management.base import BaseCommand

    parser = load_command_class(get_commands()[name], name).create_parser("manage.py", name)
    common = {option for action in BaseCommand().create_parser("manage.py", "x")._actions
              for option in action.option_strings}
    actual = {option for action in parser._actions for option in action.option_strings
              if option.startswith("--") and option not in common}
    actual |= {action.dest for action in parser._actions if not action.option_strings}
    documented = set()
    for line in section("docs/reference/cli.md", name).splitlines():
        if line.startswith("| `"):
            documented |= set(re.findall(r"`([^`]+)`", line.split(" | ")[0]))
    assert documented == actual


def environment_reads() -> set[str]:
    """Every environment variable MAS's code reads (tests' own settings aside)."""
    sources = [*ROOT.glob("mas_project/*.py"), *ROOT.glob("scripts/*.py"),
               *(path for app in ("mas_core", "agents_app", "tools_app", "memory_app", "workflows_app", "evals_app")
                 for path in (ROOT / app).rglob("*.py"))]
    found = set()
    for path in sources:
        if path.name == "settings_test.py" or "migrations" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        found |= set(re.findall(r"""(?:environ\.get\(\s*|environ\[|env_bool\(|env_list\()["']([A-Z][A-Z0-9_]+)["']""",
                                text))
    return found - {"DJANGO_SETTINGS_MODULE"}


def test_the_settings_reference_names_every_variable_mas_reads_and_no_other():
    documented = set(re.findall(r"`((?:MAS|DJANGO|OTEL|CELERY|CHANNELS)_[A-Z0-9_]+|DATABASE_URL|REDIS_URL)`",
                                page("docs/reference/settings.md")))
    read = environment_reads()
    assert read - documented == set(), "read by MAS but missing from docs/reference/settings.md"
    assert documented - read == set(), "in docs/reference/settings.md but read nowhere"


def test_every_bench_script_is_in_the_bench_readmes_table():
    """bench/README.md says what each script measures: a script added without a row would go unnoticed."""
    scripts = sorted(path.name for path in (ROOT / "bench").glob("*.py") if not path.name.startswith("_"))
    table = (ROOT / "bench" / "README.md").read_text()
    rows = sorted(line.split("`")[1] for line in table.splitlines() if line.startswith("| `"))
    assert len(scripts) >= 19
    assert rows == scripts
