"""Datasets are definitions: markdown under defs/evals/<slug>.md, versions, the API's CRUD, clear refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from mas_core.definitions import storage
from mas_core.definitions.kinds import KINDS, KINDS_BY_NAME, register_kind
from mas_core.definitions.markdown import DefinitionError
from mas_core.definitions.sync import markdown_sync
from agents_app.models import DefinitionVersion
from evals_app.kinds import EVAL
from evals_app.models import EvalDataset
from tests.runs import agent, define

DATASET = """---
name: Writer evals
agent: writer
cases:
- id: report
  task: Write a report on tides.
  files:
    notes.md: The moon pulls the sea.
  script:
    reviewer:
    - text: Looks good.
  checks:
  - type: file
    path: report.md
    contains: moon
  - type: tool_not_called
    tool: web_fetch
---

Cases of the writer.
"""


def test_the_eval_kind_is_registered_by_its_app_after_the_built_in_kinds():
    assert KINDS[-1] is EVAL and KINDS_BY_NAME["eval"] is EVAL
    assert register_kind(EVAL) is EVAL  # a second ready(): nothing changes
    assert KINDS.count(EVAL) == 1
    with pytest.raises(ValueError, match="the folder 'evals' already holds another kind"):
        register_kind(type(EVAL)("eval2", "Other", "evals_app.EvalDataset", EVAL.spec, "evals"))
    assert EVAL.relative_path("writer-evals") == Path("evals/writer-evals.md")


@pytest.mark.django_db
def test_a_saved_dataset_is_written_to_defs_evals_and_versioned(team_a):
    agent(team_a, "Writer")
    result = define(team_a, EVAL, DATASET)
    row = result.row
    assert (row.slug, row.version, result.file_status) == ("writer-evals", 1, "written")
    path = storage.team_defs_dir(team_a) / "evals" / "writer-evals.md"
    assert path.read_text() == row.content
    assert row.spec["cases"][0]["files"] == {"notes.md": "The moon pulls the sea."}
    define(team_a, EVAL, DATASET.replace("Write a report", "Write a short report"))
    assert list(DefinitionVersion.objects.filter(team=team_a, kind="eval").values_list("number", flat=True)
                .order_by("number")) == [1, 2]
    # Edited on disk, imported by the sync as the next version.
    path.write_text(path.read_text().replace("short report", "long report"))
    report = markdown_sync(team=team_a, mode="both")
    assert [item.path for item in report.imported] == ["evals/writer-evals.md"]
    assert EvalDataset.objects.get(team=team_a).version == 3


HEAD = "---\nname: X\nagent: w\ncases:\n- id: a\n  task: t\n"
STATUS = "  checks:\n  - type: status\n    equals: succeeded\n"


@pytest.mark.parametrize("text,message", [
    (HEAD.replace("agent: w\n", "agent: w\nworkflow: f\n") + STATUS + "---\n",
     "evals/x.md:3: agent: name the agent under test, or a workflow (one of them)"),
    (HEAD + "  checks:\n  - type: contains\n---\n", "evals/x.md:8: cases.0.checks.0: a contains check needs value"),
    (HEAD + STATUS + "- id: b\n  task: t\n  checks: []\n---\n",
     "evals/x.md:12: cases.1.checks: List should have at least 1 item after validation, not 0"),
    (HEAD + "  checks:\n  - type: regex\n    pattern: '('\n---\n",
     "evals/x.md:8: cases.0.checks.0: pattern '(': missing ), unterminated subpattern at position 0"),
    (HEAD + "  files: {'../x': y}\n" + STATUS + "---\n",
     "evals/x.md:7: cases.0.files: '../x': a relative workspace path"),
    (HEAD + "  script: {w: [{txt: hi}]}\n" + STATUS + "---\n",
     "evals/x.md:7: cases.0.script: script for agent w, turn 0: unknown key(s) txt"),
])
def test_invalid_datasets_are_refused_naming_the_line_and_field(text, message):
    from mas_core.definitions.markdown import parse_definition

    with pytest.raises(DefinitionError) as caught:
        parse_definition(EVAL, text, path="evals/x.md")
    assert str(caught.value) == message


def test_a_dataset_holds_at_most_100_cases_and_unique_ids():
    from mas_core.definitions.markdown import validate_definition

    case = {"task": "t", "checks": [{"type": "status", "equals": "succeeded"}]}
    with pytest.raises(DefinitionError, match="cases: List should have at most 100 items"):
        validate_definition(EVAL, {"name": "X", "agent": "w", "cases": [{"id": f"c{i}", **case} for i in range(101)]})
    with pytest.raises(DefinitionError, match="cases\\[1\\].id: 'c' is the id of an earlier case"):
        validate_definition(EVAL, {"name": "X", "agent": "w", "cases": [{"id": "c", **case}, {"id": "c", **case}]})


@pytest.mark.django_db
def test_the_api_creates_reads_edits_and_deletes_datasets(team_a, team_b, api_for):
    editor, viewer, other = api_for(team_a, "editor"), api_for(team_a, "viewer"), api_for(team_b, "editor")
    agent(team_a, "Writer")
    created = editor.post("/api/evals", {"name": "Writer evals", "agent": "writer", "cases": [
        {"id": "one", "task": "Say hi", "checks": [{"type": "contains", "value": "hi"}]}]})
    assert created.status_code == 201, created.content
    assert (created.json()["slug"], created.json()["version"]) == ("writer-evals", 1)
    case = viewer.get("/api/evals/writer-evals").json()["cases"][0]
    assert (case["id"], case["task"], case["script"], case["files"]) == ("one", "Say hi", None, {})
    assert {k: v for k, v in case["checks"][0].items() if v is not None} == {
        "type": "contains", "target": "result", "value": "hi", "min_score": 0.5}
    assert viewer.post("/api/evals", {"name": "Nope", "agent": "w", "cases": []}).status_code == 403
    assert other.get("/api/evals/writer-evals").status_code == 404
    bad = editor.patch("/api/evals/writer-evals", {"cases": [{"id": "one", "task": "x", "checks": [{"type": "file"}]}]})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["msg"] == "a file check needs path"
    markdown = editor.get("/api/evals/writer-evals/markdown").content.decode()
    assert markdown.startswith("---\nname: Writer evals\nagent: writer\ncases:\n- id: one\n")
    assert editor.delete("/api/evals/writer-evals").json() == {"slug": "writer-evals", "deleted": True,
                                                                "warnings": []}
    assert EvalDataset.objects.filter(team=team_a).count() == 0


def test_bounds_keep_their_written_form_in_the_markdown():
    """An integer bound stays an integer (`max: 2`, not `max: 2.0`); a fraction stays a fraction."""
    from mas_core.definitions.markdown import parse_definition, render_parsed

    text = DATASET.replace("  - type: tool_not_called\n    tool: web_fetch\n",
                           "  - type: max_tool_calls\n    max: 2\n  - type: max_cost_usd\n    max: 0.05\n")
    text = text.replace("agent: writer\n", "agent: writer\ntimeout_s: 120\n")
    parsed = parse_definition(EVAL, text, path="evals/writer-evals.md")
    assert [check.max for check in parsed.spec.cases[0].checks] == [None, 2, 0.05]
    assert [type(check.max) for check in parsed.spec.cases[0].checks[1:]] == [int, float]
    assert render_parsed(parsed) == text
