"""The execution context in a session's first message: whole when it fits the tier, spilled to files when not."""

from agents_app.kernel.prompt import CONTEXT_BUDGETS, ExecutionContext, WorkspaceEntry, build_task_message


def test_everything_that_fits_is_shown_in_order():
    execution = ExecutionContext(
        task="Review the findings", output_dir="out/reviewer/", parent_context='{"topic": "tides"}',
        parent="lead", dependency_results={"research": "**findings**:\nThe moon pulls."},
        files=[WorkspaceEntry("notes.md", 12, "researcher"), WorkspaceEntry("out/a.md", 0, "")],
    )
    text, spilled = build_task_message(execution, tier="small")
    assert spilled == {}
    assert text == (
        "Review the findings\n"
        "\nWrite your files under `out/reviewer/`.\n"
        "\n## Context from lead\n{\"topic\": \"tides\"}\n"
        "\n## Results of earlier steps\n"
        "\n### research\n**findings**:\nThe moon pulls.\n"
        "\n## Files in the workspace\n- notes.md (12 B, by researcher)\n- out/a.md (0 B, by ?)"
    )


def test_what_passes_the_tiers_budget_is_cut_and_pointed_to_a_file():
    long = "x" * 3000
    execution = ExecutionContext(task="T", dependency_results={"a": long, "b": "short"})
    text, spilled = build_task_message(execution, tier="small", spill_prefix="context/step-1/")
    assert spilled == {"context/step-1/a.md": long}  # each of two parts may take half of small's 2 KiB
    assert "[… 3000 bytes in all: the full text is in `context/step-1/a.md` (read it with vfs_read)]" in text
    assert "### b\nshort" in text
    assert len(text.encode("utf-8")) < CONTEXT_BUDGETS["small"] + 100
    # The same context fits a large model whole.
    assert build_task_message(execution, tier="large", spill_prefix="context/step-1/")[1] == {}


def test_a_long_file_list_is_capped():
    files = [WorkspaceEntry(f"f{i:03}.md", i, "w") for i in range(60)]
    text, _ = build_task_message(ExecutionContext(task="T", files=files))
    assert text.count("\n- f") == 50
    assert text.endswith("- … and 10 more (vfs_list shows them all)")


def test_the_task_is_never_cut():
    task = "t" * 50_000
    text, spilled = build_task_message(ExecutionContext(task=task), tier="small")
    assert text == task and spilled == {}


def test_findings_share_the_tiers_budget_and_spill_to_a_file():
    findings = [f"finding {i}: " + "y" * 280 for i in range(20)]  # ~5.8 KB
    execution = ExecutionContext(task="T", dependency_results={"a": "short"}, findings=findings)
    text, spilled = build_task_message(execution, tier="small", spill_prefix="context/step-1/")
    whole = "\n".join(f"- {item}" for item in findings)
    assert spilled == {"context/step-1/findings.md": whole}
    assert "\n## Findings so far\n- finding 0: " in text and "the full text is in `context/step-1/findings.md`" in text
    assert len(text.encode("utf-8")) < CONTEXT_BUDGETS["small"] + 100
    text, spilled = build_task_message(execution, tier="large")
    assert spilled == {} and text.endswith("\n## Findings so far\n" + whole)
