"""``manage.py run_workflow``: starts a workflow, prints each step's progress and a table, exits by outcome."""

import json
import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from workflows_app.kinds import WORKFLOW
from agents_app.execution.modelchoice import DEMO_RECORDING
from agents_app.models import Event, Run, WorkspaceFile
from tests.runs import agent, define

FLOW = """---
name: Two
inputs: [topic]
on_failure: continue
steps:
- id: draft
  agent: writer
  prompt: "Draft {topic}"
  outputs: [text]
- id: review
  agent: reviewer
  depends_on: [draft]
  prompt: "Review {draft.text}"
  outputs: [verdict]
---
"""


def setup(team):
    agent(team, "Writer")
    agent(team, "Reviewer")
    define(team, WORKFLOW, FLOW)


def run_command(tmp_path, *args, script=None):
    if script is not None:
        path = tmp_path / "script.json"
        path.write_text(json.dumps(script))
        args = (*args, "--script", str(path))
    out = StringIO()
    try:
        call_command("run_workflow", *args, stdout=out)
    except CommandError as error:
        return out.getvalue(), error
    return out.getvalue(), None


def steps_part(out: str) -> list[str]:
    """The step lines without their elapsed time."""
    return [re.sub(r"^\s*[\d.]+s ", "", line) for line in out.splitlines() if re.match(r"^\s*[\d.]+s \[", line)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_progress_per_step_then_a_table(team_a, tmp_path, celery_worker_process):
    setup(team_a)
    script = {"writer": [{"text": "a draft", "usage": {"prompt_tokens": 10, "completion_tokens": 5}}],
              "reviewer": [{"text": "approve", "usage": {"prompt_tokens": 20, "completion_tokens": 2}}]}
    out, error = run_command(tmp_path, "two", "--team", "alpha", "--input", "topic=tides", script=script)
    assert error is None, out
    run = Run.objects.get()
    lines = out.splitlines()
    assert lines[0] == f"Workflow two started: run {run.id} in team alpha, 2 steps (scripted)"
    assert lines[1] == f"  monitor: /runs/{run.id}/   API: /api/runs/{run.id}"
    assert steps_part(out) == [
        "[  0% 0/2] ▶ draft (writer) running (attempt 1) · 0 tokens · $0.00",
        "[ 50% 1/2] ✓ draft (writer) done · 15 tokens · $0.00",
        "[ 50% 1/2] ▶ review (reviewer) running (attempt 1) · 15 tokens · $0.00",
        "[100% 2/2] ✓ review (reviewer) done · 37 tokens · $0.00",
    ]
    table = out[out.index("step "):].splitlines()
    assert table[:4] == [
        "step    agent     status     tries  tokens  cost",
        "------  --------  ---------  -----  ------  -----",
        "draft   writer    succeeded  1      15      $0.00",
        "review  reviewer  succeeded  1      22      $0.00",
    ]
    assert "Status:   succeeded — 2/2 steps succeeded" in out and "Result:   approve" in out


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_loops_rounds_show_in_the_progress(team_a, tmp_path, celery_worker_process):
    setup(team_a)
    define(team_a, WORKFLOW, FLOW.replace("name: Two", "name: Loop").replace(
        "  outputs: [verdict]\n", "  outputs: [verdict]\nloops:\n- {steps: [draft, review], until: "
                                   "'review.verdict == \"approve\"', max_rounds: 3}\n"))
    script = {"writer": [{"text": "v1"}, {"text": "v2"}],
              "reviewer": [{"text": "revise", "usage": {"prompt_tokens": 1, "completion_tokens": 1}},
                           {"text": "approve", "usage": {"prompt_tokens": 1, "completion_tokens": 1}}]}
    out, error = run_command(tmp_path, "loop", "--input", "topic=tides", script=script)
    assert error is None, out
    marks = [re.sub(r"^\[.*?\] ", "", line).split(" · ")[0] for line in steps_part(out)]
    assert marks == ["▶ draft (writer) round 1, running (attempt 1)", "✓ draft (writer) round 1, done",
                     "▶ review (reviewer) round 1, running (attempt 1)", "✓ review (reviewer) round 1, done",
                     "▶ draft (writer) round 2, running (attempt 1)", "✓ draft (writer) round 2, done",
                     "▶ review (reviewer) round 2, running (attempt 1)", "✓ review (reviewer) round 2, done"]
    assert re.search(r"#\d+ +- +loop draft, review: round 2 of at most 3\n", out)
    assert re.search(r"#\d+ +- +loop draft, review done after 2 round\(s\): met\n", out)
    assert "Result:   approve" in out

@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_failed_step_exits_non_zero_even_when_the_workflow_went_on(team_a, tmp_path, celery_worker_process):
    setup(team_a)
    script = {"writer": [{"error": "auth"}], "reviewer": [{"text": "nothing to review"}]}
    out, error = run_command(tmp_path, "two", "--input", "topic=tides", script=script)
    run = Run.objects.get()
    assert run.status == "succeeded"  # on_failure: continue
    assert error is not None and error.returncode == 1
    assert str(error) == (f"run {run.id} succeeded: step(s) draft failed; the workflow went on without them "
                          "(on_failure: continue)")
    assert steps_part(out)[1].startswith("[ 50% 1/2] ✗ draft (writer) failed (attempt 1): provider_error: auth")
    assert "Status:   succeeded — 1/2 steps succeeded" in out


@pytest.mark.django_db
def test_bad_arguments_are_clear_errors_and_start_nothing(team_a, tmp_path, monkeypatch):
    from agents_app.management.commands import run_agent

    setup(team_a)
    monkeypatch.setattr(run_agent.Command, "_check_worker", lambda self, wait: None)
    cases = [
        (("two", "--input", "topic"), "--input 'topic': write it as key=value"),
        (("two",), "missing input(s): topic"),
        (("two", "--input", "topic=x", "--input", "mood=odd"), "unknown input(s): mood (the workflow declares: topic)"),
        (("nope",), "workflow 'nope' does not exist in this team"),
        (("two", "--team", "zeta", "--input", "topic=x"), "no team 'zeta'"),
    ]
    for args, message in cases:
        _, error = run_command(tmp_path, *args)
        assert error is not None and str(error) == message, (args, error)
    _, error = run_command(tmp_path, "two", "--input", "topic=x", script={"writer": [{"bogus": 1}]})
    assert "writer" in str(error)
    assert Run.objects.count() == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_the_demo_workflow_runs_end_to_end_on_the_bundled_recording(tmp_path, celery_worker_process, demo_secrets):
    """What `make demo` does after starting the services: setup_demo, then run_workflow (no provider configured)."""
    call_command("setup_demo", stdout=StringIO())  # the team's copy of defs/ goes under MAS_DEFS_ROOT (tmp_path)
    out, error = run_command(tmp_path, "research-and-review", "--team", "demo", "--input",
                             "topic=How do ocean tides work?", "--base-url", "http://127.0.0.1:8000")
    assert error is None, out
    run = Run.objects.get()
    assert f"  monitor: http://127.0.0.1:8000/runs/{run.id}/   API: http://127.0.0.1:8000/api/runs/{run.id}" in out
    assert [line.split("] ")[1].split(" · ")[0] for line in steps_part(out)][-1] == "✓ report (writer) done"
    assert sum("✓" in line for line in steps_part(out)) == 4
    assert "Status:   succeeded — 4/4 steps succeeded" in out
    assert "Notice:   No model provider is configured for this team" in out
    # The recording shows what each agent does on the demo topic, says it is a recording, and invents no usage.
    label = "*Recorded answer (MAS demo recording, no model called).*"
    assert run.result.startswith(f"{label}\n\n# How ocean tides work\n")
    assert run.result.endswith("The report is in `report.md`.")
    files = {f.path: f for f in WorkspaceFile.objects.filter(run=run)}
    assert sorted(files) == ["notes/tides-findings.md", "report.md"]
    assert (files["notes/tides-findings.md"].author, files["report.md"].author) == ("researcher", "writer")
    assert files["report.md"].content.startswith("# How ocean tides work")
    assert "16 m (Burntcoat Head)" in files["report.md"].content  # the fact check's correction, applied
    # Both review steps play the reviewer's recorded turn (each session starts at its first): facts and clarity.
    reviews = [e.data["text"] for e in Event.objects.filter(run=run, type="llm_response", agent="reviewer")]
    assert len(reviews) == 2 and reviews[0] == reviews[1]
    assert [line for line in reviews[0].splitlines() if line.startswith("## ")] == ["## Fact check", "## Clarity review"]
    assert (run.prompt_tokens, run.completion_tokens, run.cost_usd) == (0, 0, 0)
    responses = Event.objects.filter(run=run, type="llm_response")
    assert responses.count() == 6
    assert {(e.data["usage"]["prompt_tokens"], e.data["usage"]["completion_tokens"]) for e in responses} == {(0, 0)}


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_new_agent_in_two_steps_runs_on_the_recording_with_no_provider(team_a, tmp_path, celery_worker_process):
    """A newcomer's first workflow: a new agent (not in the recording: its "*" turn) in two steps, outputs named."""
    agent(team_a, "Lead")
    define(team_a, WORKFLOW, FLOW.replace("name: Two", "name: Twice").replace("agent: writer", "agent: lead")
           .replace("agent: reviewer", "agent: lead"))
    out, error = run_command(tmp_path, "twice", "--team", team_a.slug, "--input", "topic=prime numbers")
    assert error is None, out
    assert "Status:   succeeded — 2/2 steps succeeded" in out  # the review failed: "script for agent lead has no turn 1"
    run = Run.objects.get()
    anyone = json.loads(DEMO_RECORDING.read_text())["*"][0]["text"]
    assert [e.data["text"] for e in Event.objects.filter(run=run, type="llm_response").order_by("seq")] == [
        anyone, anyone]
