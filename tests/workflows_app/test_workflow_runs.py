"""Workflows on a real Celery worker: steps as sessions, in parallel, retried, stopped or continued."""

import time

import pytest

from agents_app.kinds import AGENT, PROVIDER

from workflows_app.kinds import WORKFLOW
from agents_app.execution.errors import RunError
from agents_app.execution.runs import run_cancel
from agents_app.models import Activation, Agent, Event, Run, Session
from agents_app.money import money_str
from tests.runs import define, events, finish
from workflows_app.models import Workflow, WorkflowRun
from workflows_app.services import workflow_run_start, workflow_steps

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def agents(team, *names, frontmatter=""):
    for name in names:
        define(team, AGENT, f"---\nname: {name}\n{frontmatter}---\n\nYou work.\n")


def workflow(team, yaml_text):
    define(team, WORKFLOW, f"---\n{yaml_text}---\n\nA workflow.\n")


def out(name, value):
    return {"tool_calls": [{"name": "set_output", "arguments": {"name": name, "value": value}}]}


PIPELINE = """name: Pipeline
inputs: [topic]
steps:
- id: research
  agent: researcher
  prompt: "Research {topic}"
  outputs: [findings]
- id: review_a
  agent: critic
  depends_on: [research]
  prompt: "Check the facts: {research.findings}"
  outputs: [verdict]
- id: review_b
  agent: editor
  depends_on: [research]
  prompt: "Check the style: {research.findings}"
  outputs: [notes, score]
- id: synthesis
  agent: writer
  depends_on: [review_a, review_b]
  prompt: "Write it up. Facts: {review_a.verdict}. Style: {review_b.notes} ({review_b.score})"
  outputs: [report]
"""


def test_a_pipeline_runs_steps_in_order_with_outputs_substituted(team_a, celery_worker_process):
    agents(team_a, "Researcher", "Critic", "Editor", "Writer")
    workflow(team_a, PIPELINE)
    script = {
        "researcher": [{"text": "bees dance"}],
        "critic": [{"text": "accurate"}],
        "editor": [out("notes", "too short"), out("score", "7"), {"text": "done"}],
        "writer": [{"text": "Report: bees dance, accurately."}],
    }
    run = finish(workflow_run_start(team=team_a, workflow="pipeline", inputs={"topic": "bees"}, script=script))

    assert (run.status, run.error, run.workflow, run.agent) == ("succeeded", "", "pipeline", "")
    assert run.result == "Report: bees dance, accurately."
    assert run.input == "topic: bees"
    assert run.versions == {"workflow:pipeline": 1, "agent:researcher": 1, "agent:critic": 1, "agent:editor": 1,
                            "agent:writer": 1}
    prompts = dict(Activation.objects.filter(run=run).values_list("context__step", "input"))
    assert prompts == {
        "research": "Research bees",
        "review_a": "Check the facts: bees dance",
        "review_b": "Check the style: bees dance\n\nWhen you are done, call set_output once for each of these "
                    "outputs: notes, score.",
        "synthesis": "Write it up. Facts: accurate. Style: too short (7)",
    }
    all_events = events(run)
    assert [e.seq for e in all_events] == list(range(1, len(all_events) + 1))
    flow = [(e.type, e.data.get("step")) for e in all_events if e.type.startswith(("workflow_", "step_"))]
    assert flow[0] == ("workflow_start", None) and flow[-1] == ("workflow_complete", None)
    assert flow[1:3] == [("step_start", "research"), ("step_complete", "research")]
    assert sorted(flow[3:5]) == [("step_start", "review_a"), ("step_start", "review_b")]
    assert flow[-3:-1] == [("step_start", "synthesis"), ("step_complete", "synthesis")]
    start = all_events[1].data
    assert start["levels"] == [["research"], ["review_a", "review_b"], ["synthesis"]]
    assert start["inputs"] == {"topic": "bees"} and start["trigger"] == "manual"
    complete = events(run, "workflow_complete")[0].data
    assert {k: complete[k] for k in ("status", "steps_total", "succeeded", "failed", "skipped")} == {
        "status": "succeeded", "steps_total": 4, "succeeded": 4, "failed": 0, "skipped": 0}
    assert complete["tokens"] == run.prompt_tokens + run.completion_tokens > 0
    assert complete["cost_usd"] == money_str(run.cost_usd)
    assert all_events[-1].type == "run_complete" and all_events[-1].data["status"] == "succeeded"

    steps = {step["id"]: step for step in workflow_steps(run)}
    assert {sid: (s["status"], s["attempts"], s["outputs"]) for sid, s in steps.items()} == {
        "research": ("succeeded", 1, {"findings": "bees dance"}),
        "review_a": ("succeeded", 1, {"verdict": "accurate"}),
        "review_b": ("succeeded", 1, {"notes": "too short", "score": "7"}),
        "synthesis": ("succeeded", 1, {"report": "Report: bees dance, accurately."}),
    }
    sessions = {s.activation.context["step"]: s for s in Session.objects.filter(run=run).select_related("activation")}
    for sid, step in steps.items():
        assert (step["prompt_tokens"], step["completion_tokens"]) == (
            sessions[sid].prompt_tokens, sessions[sid].completion_tokens)
    assert sum(s["prompt_tokens"] for s in steps.values()) == run.prompt_tokens


PARALLEL = """name: Parallel
inputs: [topic]
steps:
- id: left
  agent: left
  prompt: "Left side of {topic}"
  outputs: [text]
- id: right
  agent: right
  prompt: "Right side of {topic}"
  outputs: [text]
"""


def test_independent_steps_run_at_the_same_time(team_a, celery_worker_process):
    agents(team_a, "Left", "Right")
    workflow(team_a, PARALLEL)
    script = {"left": [{"text": "L", "latency_ms": 1000}], "right": [{"text": "R", "latency_ms": 1000}]}
    run = finish(workflow_run_start(team=team_a, workflow="parallel", inputs={"topic": "x"}, script=script))
    assert run.status == "succeeded"
    assert run.result == "## left\n\nL\n\n## right\n\nR"
    sessions = list(Session.objects.filter(run=run))
    assert len(sessions) == 2
    # Both model turns (1 s each) overlap: the whole took about 1 s, not 2 s.
    first_start = min(s.started_at for s in sessions)
    last_end = max(s.finished_at for s in sessions)
    assert max(s.started_at for s in sessions) < min(s.finished_at for s in sessions)
    assert (last_end - first_start).total_seconds() < 1.8


RETRY = """name: Retry
inputs: [topic]
steps:
- id: only
  agent: lead
  prompt: "Do {topic}"
  outputs: [result]
  max_retries: 2
"""


def test_a_failed_step_is_retried_one_tier_up_the_ladder(team_a, celery_worker_process):
    agents(team_a, "Lead", frontmatter="tier: small\nescalation:\n- small\n- medium\n- large\n")
    workflow(team_a, RETRY)
    script = {"lead": [{"error": "auth"}, {"error": "auth"}, {"text": "third time"}]}
    run = finish(workflow_run_start(team=team_a, workflow="retry", inputs={"topic": "x"}, script=script))
    assert (run.status, run.result) == ("succeeded", "third time")
    sessions = list(Session.objects.filter(run=run).order_by("started_at"))
    assert [(s.tier, s.status) for s in sessions] == [("small", "failed"), ("medium", "failed"), ("large", "ok")]
    assert [e.data["attempt"] for e in events(run, "step_start")] == [1, 2, 3]
    failed = [e.data for e in events(run, "step_failed")]
    assert [(f["attempt"], f["retry"]) for f in failed] == [(1, True), (2, True)]
    assert failed[0]["error"] == "provider_error: auth: scripted authentication failure (agent lead, turn 0) (HTTP 401)"
    assert [(e.data["from"], e.data["to"]) for e in events(run, "escalation")] == [("small", "medium"),
                                                                                  ("medium", "large")]
    assert [(e.data["attempt"], e.data["delay_s"], e.data["tier"]) for e in events(run, "step_retry")] == [
        (2, 0.2, "medium"), (3, 0.4, "large")]
    [step] = workflow_steps(run)
    assert (step["status"], step["attempts"], step["tier"], step["error"]) == ("succeeded", 3, "large", "")


def test_a_step_out_of_retries_fails_the_workflow_with_its_error(team_a, celery_worker_process):
    agents(team_a, "Lead")
    workflow(team_a, RETRY.replace("max_retries: 2", "max_retries: 1"))
    run = finish(workflow_run_start(team=team_a, workflow="retry", inputs={"topic": "x"},
                                    script={"lead": [{"error": "auth"}] * 2}))
    assert run.status == "failed"
    assert run.error == ("step 'only' failed: provider_error: auth: scripted authentication failure "
                         "(agent lead, turn 1) (HTTP 401)")
    [step] = workflow_steps(run)
    assert (step["status"], step["attempts"]) == ("failed", 2)
    assert events(run, "workflow_complete")[0].data["status"] == "failed"


TWO_STAGE = """name: Two stage
inputs: [topic]
on_failure: {policy}
steps:
- id: gather
  agent: gatherer
  prompt: "Gather {topic}"
  outputs: [facts]
- id: side
  agent: sider
  prompt: "Side work on {topic}"
  outputs: [extra]
- id: write
  agent: writer
  depends_on: [gather, side]
  prompt: "Write from {gather.facts} and {side.extra}"
  outputs: [text]
"""


def test_on_failure_stop_skips_what_depends_on_the_failed_step(team_a, celery_worker_process):
    agents(team_a, "Gatherer", "Sider", "Writer")
    workflow(team_a, TWO_STAGE.replace("{policy}", "stop"))
    script = {"gatherer": [{"error": "auth"}], "sider": [{"text": "extra bits", "latency_ms": 300}],
              "writer": [{"text": "never"}]}
    run = finish(workflow_run_start(team=team_a, workflow="two-stage", inputs={"topic": "x"}, script=script))
    assert run.status == "failed"
    assert run.error.startswith("step 'gather' failed: provider_error: auth")
    steps = {s["id"]: s["status"] for s in workflow_steps(run)}
    # The side step already running finishes; nothing new starts after the failure.
    assert steps == {"gather": "failed", "side": "succeeded", "write": "skipped"}
    assert not Activation.objects.filter(run=run, context__step="write").exists()
    complete = events(run, "workflow_complete")[0].data
    assert (complete["status"], complete["skipped_steps"], complete["failed_steps"]) == ("failed", ["write"],
                                                                                         ["gather"])
    [skip] = events(run, "step_skipped")
    assert skip.data["step"] == "write" and skip.data["reason"].startswith("step 'gather' failed: ")


def test_on_failure_continue_passes_partial_results_marked(team_a, celery_worker_process):
    agents(team_a, "Gatherer", "Sider", "Writer")
    workflow(team_a, TWO_STAGE.replace("{policy}", "continue"))
    script = {"gatherer": [{"error": "auth"}], "sider": [{"text": "extra bits"}],
              "writer": [{"text": "written with a gap"}]}
    run = finish(workflow_run_start(team=team_a, workflow="two-stage", inputs={"topic": "x"}, script=script))
    assert (run.status, run.result) == ("succeeded", "written with a gap")
    assert run.error == "step(s) gather failed; the workflow went on without them (on_failure: continue)"
    prompt = Activation.objects.get(run=run, context__step="write").input
    assert prompt == "Write from [partial: step 'gather' failed, output 'facts' missing] and extra bits"
    steps = {s["id"]: (s["status"], s["partial"]) for s in workflow_steps(run)}
    assert steps == {"gather": ("failed", False), "side": ("succeeded", False), "write": ("succeeded", True)}
    assert events(run, "workflow_complete")[0].data["status"] == "partial"
    assert [e.data["partial"] for e in events(run, "step_start") if e.data["step"] == "write"] == [True]


def test_a_missing_declared_output_fails_the_step_with_a_clear_message(team_a, celery_worker_process):
    agents(team_a, "Editor")
    workflow(team_a, "name: Outs\nsteps:\n- id: edit\n  agent: editor\n  prompt: Edit\n  outputs: [notes, score]\n")
    run = finish(workflow_run_start(team=team_a, workflow="outs", inputs={},
                                    script={"editor": [out("notes", "fine"), {"text": "forgot the score"}]}))
    assert run.status == "failed"
    message = ("step 'edit' did not produce declared output(s) 'score' (call set_output, or declare a single "
               "output to use the final answer)")
    assert [e.data["error"] for e in events(run, "step_failed")] == [message]
    assert run.error == f"step 'edit' failed: {message}"


def test_the_run_budget_stops_the_workflow_before_the_next_step(team_a, celery_worker_process):
    # Output only is priced: a call's worst cost is its 50 tokens at most, $0.50, which the budget just covers.
    define(team_a, PROVIDER, "---\nname: Scripted\ntype: scripted\nmodels:\n- name: s-medium\n  tier: medium\n"
                             "  output_price: '10000.0000'\n---\n")
    agents(team_a, "Gatherer", "Writer", frontmatter="max_tokens: 50\n")
    workflow(team_a, "name: Budgeted\nsteps:\n- id: gather\n  agent: gatherer\n  prompt: Gather\n"
                     "  outputs: [facts]\n- id: write\n  agent: writer\n  depends_on: [gather]\n"
                     "  prompt: 'Write {gather.facts}'\n  outputs: [text]\n")
    script = {"gatherer": [{"text": "facts", "usage": {"prompt_tokens": 100, "completion_tokens": 50}}],
              "writer": [{"text": "never"}]}
    run = finish(workflow_run_start(team=team_a, workflow="budgeted", inputs={}, script=script,
                                    budget={"max_cost_usd": "0.5"}))
    assert run.status == "failed"
    assert run.error == "the run's budget of $0.50 is spent ($0.50)"
    assert {s["id"]: s["status"] for s in workflow_steps(run)} == {"gather": "succeeded", "write": "skipped"}
    assert [e.data for e in events(run, "workflow_stopped")] == [
        {"reason": "the run's budget of $0.50 is spent ($0.50)", "skipped": ["write"]}]
    assert [(e.agent, e.data) for e in events(run, "step_skipped")] == [
        ("writer", {"step": "write", "reason": "the run's budget of $0.50 is spent ($0.50)"})]
    assert Session.objects.filter(run=run).count() == 1


def test_cancelling_a_workflow_skips_its_waiting_steps(team_a, celery_worker_process):
    agents(team_a, "Gatherer", "Sider", "Writer")
    workflow(team_a, TWO_STAGE.replace("{policy}", "stop"))
    script = {"gatherer": [{"text": "slow", "latency_ms": 20000}], "sider": [{"text": "s", "latency_ms": 20000}]}
    run = workflow_run_start(team=team_a, workflow="two-stage", inputs={"topic": "x"}, script=script)
    deadline = time.monotonic() + 20
    while Event.objects.filter(run=run, type="llm_request").count() < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    run_cancel(run=run)
    run = finish(run)
    assert run.status == "cancelled"
    assert {s["id"]: s["status"] for s in workflow_steps(run)} == {"gather": "running", "side": "running",
                                                                   "write": "skipped"}
    [complete] = events(run, "workflow_complete")
    assert (complete.data["status"], complete.data["skipped_steps"]) == ("cancelled", ["write"])
    assert [e.data for e in events(run, "step_skipped")] == [{"step": "write", "reason": "cancelled"}]


# -- refused before anything runs ------------------------------------------------------------


def test_bad_starts_are_refused_with_clear_messages_and_create_nothing(team_a, team_b):
    agents(team_a, "Researcher", "Critic", "Editor", "Writer")
    workflow(team_a, PIPELINE)
    with pytest.raises(RunError, match=r"^missing input\(s\): topic$"):
        workflow_run_start(team=team_a, workflow="pipeline", inputs={})
    with pytest.raises(RunError, match=r"^unknown input\(s\): colour \(the workflow declares: topic\)$"):
        workflow_run_start(team=team_a, workflow="pipeline", inputs={"topic": "x", "colour": "red"})
    with pytest.raises(RunError, match=r"^workflow 'nope' does not exist in this team$"):
        workflow_run_start(team=team_a, workflow="nope", inputs={})
    with pytest.raises(RunError, match=r"^workflow 'pipeline' does not exist in this team$"):
        workflow_run_start(team=team_b, workflow="pipeline", inputs={"topic": "x"})
    # An agent deleted since the workflow was saved.
    Agent.objects.filter(team=team_a, slug="critic").delete()
    with pytest.raises(RunError, match=r"^workflow 'pipeline' cannot run: .*agent 'critic' does not exist"):
        workflow_run_start(team=team_a, workflow="pipeline", inputs={"topic": "x"})
    # A stored spec that no longer validates: a cycle, an undeclared output.
    row = Workflow.objects.get(team=team_a, slug="pipeline")
    for broken, message in [
        ({"research": ["synthesis"]}, r"cycle: research → synthesis → review_a → research"),
        ({}, r"\{review_b.missing\}: step 'review_b' declares no output 'missing'"),
    ]:
        define(team_a, AGENT, "---\nname: Critic\n---\n\nYou work.\n")
        spec = dict(row.spec)
        spec["steps"] = [dict(step) for step in spec["steps"]]
        for step in spec["steps"]:
            if step["id"] in broken:
                step["depends_on"] = broken[step["id"]]
        if not broken:
            spec["steps"][3]["prompt"] = "Write {review_b.missing}"
        Workflow.objects.filter(pk=row.pk).update(spec=spec)
        with pytest.raises(RunError, match=message):
            workflow_run_start(team=team_a, workflow="pipeline", inputs={"topic": "x"})
    assert Run.objects.count() == 0 and WorkflowRun.objects.count() == 0 and Event.objects.count() == 0
