"""Eval runs on real workers with scripted models: two versions compared, the CI gate, save-as-case.

The cases run as ordinary runs on the Celery worker; the agent under test is scripted by the case (or,
in the save-as-case test, calls a local HTTP server speaking OpenAI's wire format, since the saved case
scripts only the *other* agent).
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from agents_app.kinds import PROVIDER
from agents_app.execution.runs import run_start
from agents_app.models import Run, Session
from evals_app.kinds import EVAL
from evals_app.models import EvalDataset, EvalRun
from tests.agents_app.llm.fake_servers import FakeServer, openai_stream, sse
from tests.runs import agent, call, define, finish, wait_until

DATASET = """---
name: Writer evals
agent: writer
cases:
- id: greet
  task: Greet the reader.
  script:
    writer:
    - text: Hello, reader!
  checks:
  - type: exact
    value: Hello, reader!
  - type: max_tool_calls
    max: 0
- id: report
  task: Write report.md about tides, from notes.md.
  files:
    notes.md: The moon pulls the sea.
  script:
    writer:
    - tool_calls:
      - name: vfs_read
        arguments: {path: notes.md}
    - tool_calls:
      - name: vfs_write
        arguments: {path: report.md, content: 'Tides: the moon pulls the sea.'}
      expect: The moon pulls the sea.
    - text: Wrote report.md.
  checks:
  - type: file
    path: report.md
    contains: moon
  - type: tool_called
    tool: vfs_write
    args: {path: {regex: '^report\\.md$'}}
  - type: status
    equals: succeeded
---
"""


def eval_done(eval_run: EvalRun) -> EvalRun:
    return wait_until(lambda: EvalRun.objects.filter(pk=eval_run.pk, status="finished").first(), 90,
                      f"eval run {eval_run.pk} to finish")


@pytest.fixture
def writer_versions(team_a):
    """The writer at v1 (may write files) and v2 (its edit dropped vfs_write), and the dataset."""
    agent(team_a, "Writer", "tools: [vfs_read, vfs_write]\n")
    agent(team_a, "Writer", "tools: [vfs_read]\n")
    return define(team_a, EVAL, DATASET).row


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_an_eval_compares_two_versions_and_the_regression_comes_first(team_a, writer_versions, api_for,
                                                                       celery_worker_process):
    operator = api_for(team_a, "operator")
    started = operator.post("/api/evals/writer-evals/runs", {"agent_version": 2, "compare_to": 1})
    assert started.status_code == 201, started.content
    body = started.json()
    assert (body["agent"], body["agent_version"], body["status"]) == ("writer", 2, "running")
    eval_run = eval_done(EvalRun.objects.get(pk=body["id"]))
    baseline = eval_done(EvalRun.objects.get(pk=body["baseline"]))

    # Every case ran as an ordinary run of the pinned version, marked as an eval run.
    runs = Run.objects.filter(team=team_a).order_by("created_at")
    assert [(r.agent, r.is_eval, r.versions["agent:writer"]) for r in runs] == [("writer", True, 1)] * 2 + [
        ("writer", True, 2)] * 2
    assert operator.get("/api/runs").json() == []  # eval runs are left out of the normal list
    assert len(operator.get("/api/runs", {"evals": "only"}).json()) == 4

    result = operator.get(f"/api/evals/writer-evals/runs/{eval_run.pk}").json()
    assert [(c["case_id"], c["status"]) for c in result["cases"]] == [("greet", "passed"), ("report", "failed")]
    report = result["cases"][1]
    # v2 may not write: its call of vfs_write is refused (the tool result says so), the run still succeeds.
    assert [(c["type"], c["passed"], c["reason"]) for c in report["checks"]] == [
        ("file", False, "no file report.md in the workspace (files: notes.md)"),
        ("tool_called", True, "vfs_write was called with the expected arguments"),
        ("status", True, "the run succeeded")]
    totals = result["totals"]
    assert (totals["cases"], totals["passed"], totals["failed"], totals["pass_rate"]) == (2, 1, 1, 0.5)
    assert totals["tokens"] > 0 and totals["duration_p50_s"] <= totals["duration_p95_s"]
    assert baseline.totals["pass_rate"] == 1.0
    comparison = result["comparison"]
    assert [(row["case_id"], row["change"]) for row in comparison] == [("report", "regression"),
                                                                       ("greet", "still_passing")]
    assert (comparison[0]["before"]["status"], comparison[0]["after"]["status"]) == ("passed", "failed")
    assert comparison[0]["failed_checks"] == ["no file report.md in the workspace (files: notes.md)"]
    listed = operator.get("/api/evals/writer-evals/runs").json()
    assert [item["id"] for item in listed] == [eval_run.pk, baseline.pk]


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_the_command_gates_on_the_pass_rate(team_a, writer_versions, celery_worker_process):
    out = StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("eval", "writer-evals", "--team", team_a.slug, "--agent-version", "2", "--compare-to", "1",
                     "--min-pass", "1.0", stdout=out)
    assert caught.value.returncode == 1
    assert str(caught.value) == "pass rate 50% is below --min-pass 100%"
    lines = out.getvalue().splitlines()
    comparison = lines.index("Comparison, v1 → v2 (regressions first):")
    assert lines[comparison + 1:comparison + 3] == ["  REGRESSION     report: passed → failed",
                                                   "  STILL_PASSING  greet: passed → passed"]
    assert "    FAIL file: no file report.md in the workspace (files: notes.md)" in lines
    assert "Pass rate: 50% (1 of 2 cases)" in [" ".join(line.split()) for line in lines]

    out = StringIO()
    call_command("eval", "writer-evals", "--team", team_a.slug, "--agent-version", "2", "--min-pass", "0.5",
                 stdout=out)
    assert out.getvalue().splitlines()[-1] == "pass rate 50% meets --min-pass 50%"
    with pytest.raises(CommandError, match="below --min-pass 100%"):  # by default every case must pass
        call_command("eval", "writer-evals", "--team", team_a.slug, stdout=StringIO())  # the current version: v2
    assert EvalRun.objects.order_by("-pk").first().agent_version == 2

    with pytest.raises(CommandError, match=r"agent 'writer' has no version 9 \(kept versions: 1, 2\)"):
        call_command("eval", "writer-evals", "--team", team_a.slug, "--agent-version", "9", stdout=StringIO())
    assert EvalRun.objects.count() == 4  # the refused one started nothing


PROVIDER_TEXT = "---\nname: Fake\ntype: openai\nbase_url: {url}/v1\nmodels:\n- name: m\n  tier: medium\n---\n"


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_run_saved_as_a_case_replays_the_other_agents_and_passes(team_a, api_for, celery_worker_process):
    server = FakeServer().start()
    try:
        define(team_a, PROVIDER, PROVIDER_TEXT.format(url=server.url))
        agent(team_a, "Lead", "model: fake:m\ntools: [delegate]\n")
        agent(team_a, "Helper", "tools: []\n")
        original = finish(run_start(team=team_a, agent="lead", input="What is 2+2? Ask the helper.", script={
            "lead": [call("delegate", agent="helper", task="Add 2 and 2."), {"text": "The helper says 4."}],
            "helper": [{"text": "4", "expect": "Add 2 and 2."}],
        }))
        assert original.status == "succeeded"

        editor = api_for(team_a, "editor")
        saved = editor.post(f"/api/runs/{original.pk}/eval-case", {"dataset": "lead-cases", "case_id": "sum"})
        assert saved.status_code == 201, saved.content
        case = saved.json()["cases"][0]
        assert (case["id"], case["task"], case["reference"]) == ("sum", "What is 2+2? Ask the helper.",
                                                                 "The helper says 4.")
        assert list(case["script"]) == ["helper"]  # the agent under test is not scripted
        assert case["script"]["helper"][0]["text"] == "4"
        assert [c["type"] for c in case["checks"]] == ["status", "exact"]
        again = editor.post(f"/api/runs/{original.pk}/eval-case", {"dataset": "lead-cases", "case_id": "sum"})
        # docs/reference/api.md: 409 duplicate.
        assert (again.status_code, again.json()) == (409, {"detail": "dataset 'lead-cases' already has a case 'sum'"})
        assert EvalDataset.objects.get(team=team_a, slug="lead-cases").version == 1

        # The lead now calls the model (the local server answers as the recorded turns did).
        server.add(sse(openai_stream(tool_calls=[("c1", "delegate", ['{"agent": "helper", "task": "Add 2 and 2."}'])],
                                     usage=(50, 10))),
                   sse(openai_stream(text=["The helper says 4."], usage=(60, 5))))
        operator = api_for(team_a, "operator")
        # The saved case scripts only the helper: the lead would call the team's model, which an eval does
        # only once the dataset allows real models.
        refused = operator.post("/api/evals/lead-cases/runs", {})
        assert refused.status_code == 422
        assert refused.json()["detail"][0]["msg"].startswith("case 'sum' does not script agent 'lead', so it would "
                                                            "call the team's real models (provider fake)")
        assert editor.patch("/api/evals/lead-cases", {"allow_real_models": True}).status_code == 200
        started = operator.post("/api/evals/lead-cases/runs", {})
        assert started.status_code == 201, started.content
        eval_run = eval_done(EvalRun.objects.get(pk=started.json()["id"]))
        result = eval_run.cases.get()
        assert (result.status, result.score) == ("passed", 1.0), result.checks
        assert len(server.requests) == 2 and server.requests[0].body["model"] == "m"
        replay = result.run
        # One lead session (suspended while the helper worked, then resumed) on the model, the helper scripted.
        assert sorted(Session.objects.filter(run=replay).values_list("agent", "provider")) == [
            ("helper", "scripted"), ("lead", "fake")]
        helper_usage = case["script"]["helper"][0]["usage"]
        assert (replay.prompt_tokens, replay.completion_tokens) == (
            50 + 60 + helper_usage["prompt_tokens"], 10 + 5 + helper_usage["completion_tokens"])
        assert (replay.is_eval, replay.result) == (True, "The helper says 4.")
    finally:
        server.stop()


@pytest.mark.django_db
def test_refusals_are_clear_and_start_nothing(team_a, team_b, api_for, writer_versions):
    operator = api_for(team_a, "operator")
    assert operator.post("/api/evals/nope/runs", {}).json() == {"detail": "no eval dataset 'nope' in team alpha"}
    # docs/reference/api.md: 422 invalid, with the field path.
    refused = operator.post("/api/evals/writer-evals/runs", {"agent_version": 7})
    assert (refused.status_code, refused.json()) == (422, {"detail": [{
        "loc": ["body", "agent_version"], "msg": "agent 'writer' has no version 7 (kept versions: 1, 2)",
        "type": "eval_refused"}]})
    refused = operator.post("/api/evals/writer-evals/runs", {"agent_version": 2, "compare_to": 8})
    assert (refused.status_code, refused.json()["detail"][0]["loc"]) == (422, ["body", "compare_to"])
    # The baseline started first is rolled back with the refused eval run.
    refused = operator.post("/api/evals/writer-evals/runs", {"agent_version": 9, "compare_to": 1})
    assert (refused.status_code, refused.json()["detail"][0]["loc"]) == (422, ["body", "agent_version"])
    assert operator.post("/api/evals/writer-evals/runs", {"agent_versio": 1}).status_code == 422
    assert api_for(team_a, "viewer").post("/api/evals/writer-evals/runs", {}).status_code == 403
    assert api_for(team_b, "operator").get("/api/evals/writer-evals/runs/1").status_code == 404
    assert EvalRun.objects.count() == 0 and Run.objects.count() == 0


JUDGED = """---
name: Judged
agent: writer
judge:
  model: scripted:judge-m
  max_cost_usd: 0.15
  script:
  - text: '{"score": 0.9, "reason": "names the moon"}'
    usage: {prompt_tokens: 100, completion_tokens: 7}
    expect: Mentions the moon.
  - text: '{"score": 0.2, "reason": "no numbers"}'
    usage: {prompt_tokens: 100, completion_tokens: 5}
    expect: Gives the height in metres.
cases:
- id: tides
  task: Explain tides.
  reference: The moon pulls the oceans.
  script:
    writer:
    - text: The moon pulls the sea.
  checks:
  - type: judge
    rubric: Mentions the moon.
  - type: judge
    rubric: Gives the height in metres.
    min_score: 0.6
  - type: judge
    rubric: Is polite.
---
"""


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_the_judge_scores_through_a_team_provider_on_the_evals_own_budget(team_a, api_for, celery_worker_process):
    define(team_a, PROVIDER, "---\nname: Scripted\ntype: scripted\nmodels:\n- name: judge-m\n  input_price: 1000\n"
                             "  output_price: 0\n---\n")
    agent(team_a, "Writer")
    define(team_a, EVAL, JUDGED)
    define(team_a, EVAL, JUDGED.replace("name: Judged", "name: Unjudged").split("judge:\n")[0]
           + "cases:" + JUDGED.split("cases:")[1])
    operator = api_for(team_a, "operator")
    judged = eval_done(EvalRun.objects.get(pk=operator.post("/api/evals/judged/runs", {}).json()["id"]))
    case = judged.cases.get()
    assert case.checks == [
        {"type": "judge", "passed": True, "score": 0.9, "reason": "score 0.9 (at least 0.5): names the moon"},
        {"type": "judge", "passed": False, "score": 0.2, "reason": "score 0.2 (below 0.6): no numbers"},
        {"type": "judge", "passed": None, "score": 0.0, "reason": "the judge's budget of $0.15 is spent"},
    ]
    assert (case.status, case.score) == ("failed", 0.55)
    # 100 prompt tokens at $1000 per million, twice: billed to the eval run, not to the case's run.
    assert (str(judged.judge_cost_usd), judged.judge_tokens) == ("0.20000000", 212)
    assert (judged.totals["judge_cost_usd"], judged.totals["judge_calls"]) == ("0.2", 2)
    assert case.run.cost_usd == 0

    unjudged = eval_done(EvalRun.objects.get(pk=operator.post("/api/evals/unjudged/runs", {}).json()["id"]))
    assert [check["reason"] for check in unjudged.cases.get().checks] == ["no judge configured"] * 3
    assert (unjudged.cases.get().status, unjudged.judge_cost_usd) == ("passed", 0)


def manual_dataset() -> str:
    """The dataset of the manual's Evals page (docs/concepts/evals.md)."""
    from tests.manual import example

    return example("docs/concepts/evals.md", language="markdown", containing="name: Writer evals").text


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_the_manuals_dataset_passes_with_the_manuals_command(team_a, celery_worker_process):
    agent(team_a, "Writer", "tools: [vfs_read, vfs_write]\n")
    row = define(team_a, EVAL, manual_dataset()).row
    assert (row.slug, [case["id"] for case in row.spec["cases"]]) == ("writer-evals", ["greet", "report"])
    out = StringIO()
    call_command("eval", "writer-evals", "--team", team_a.slug, "--min-pass", "0.9", stdout=out)
    lines = [" ".join(line.split()) for line in out.getvalue().splitlines()]
    assert lines[-1] == "pass rate 100% meets --min-pass 90%"
    assert "Pass rate: 100% (2 of 2 cases)" in lines
    assert "PASS tool_called: vfs_write was called with the expected arguments" in lines


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_workflow_dataset_runs_its_cases_with_their_inputs(team_a, api_for, celery_worker_process):
    from workflows_app.kinds import WORKFLOW

    agent(team_a, "Writer")
    define(team_a, WORKFLOW, "---\nname: Pipeline\ninputs: [topic]\nsteps:\n- id: write\n  agent: writer\n"
                             "  prompt: Write about {topic}.\n  outputs: [summary]\n---\n")
    define(team_a, EVAL, """---
name: Pipeline evals
workflow: pipeline
cases:
- id: tides
  inputs: {topic: tides}
  script:
    writer:
    - text: Tides come from the moon.
      expect: Write about tides.
  checks:
  - type: contains
    target: output:summary
    value: moon
  - type: contains
    target: output:write.summary
    value: Tides
- id: waves
  inputs: {topic: waves}
  script:
    writer:
    - text: Waves come from the wind.
  checks:
  - type: exact
    target: output:summary
    value: Waves come from the moon.
---
""")
    started = api_for(team_a, "operator").post("/api/evals/pipeline-evals/runs", {})
    assert started.status_code == 201, started.content
    eval_run = eval_done(EvalRun.objects.get(pk=started.json()["id"]))
    assert [(c.case_id, c.status) for c in eval_run.cases.all()] == [("tides", "passed"), ("waves", "failed")]
    assert eval_run.cases.get(case_id="waves").checks[0]["reason"] == (
        "output:summary is 'Waves come from the wind.', expected 'Waves come from the moon.'")
    assert [(r.workflow, r.is_eval) for r in Run.objects.filter(team=team_a)] == [("pipeline", True)] * 2
    refused = api_for(team_a, "operator").post("/api/evals/pipeline-evals/runs", {"agent_version": 1})
    assert (refused.status_code, refused.json()) == (422, {"detail": [{
        "loc": ["body", "agent_version"], "type": "eval_refused",
        "msg": "--agent-version applies to a dataset of an agent; this one tests a workflow"}]})


# The same cases, judged by a model of a team provider served over HTTP.
JUDGED_OVER_HTTP = """---
name: Judged over HTTP
agent: writer
judge:
  model: judges:judge-m
  max_cost_usd: 5
""" + "cases:" + JUDGED.split("cases:")[1]


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_the_judge_calls_a_team_provider_over_http_billed_to_the_eval(team_a, celery_worker_process):
    """The judge is a model of one of the team's providers, here a local server speaking OpenAI's wire format;
    its calls are billed to the eval run (a provider that stops answering skips the check, saying why)."""
    server = FakeServer().start()
    try:
        define(team_a, PROVIDER, "---\nname: Judges\ntype: openai\nbase_url: {url}/v1\nmodels:\n- name: judge-m\n"
                                 "  input_price: 2\n  output_price: 10\n---\n".format(url=server.url))
        agent(team_a, "Writer")
        dataset = define(team_a, EVAL, JUDGED_OVER_HTTP).row
        server.add(sse(openai_stream(text=['{"score": 0.8, ', '"reason": "names the moon"}'], usage=(1000, 20))),
                   sse(openai_stream(text=['{"score": 0.1, "reason": "no height given"}'], usage=(1000, 15))))
        from evals_app.services import eval_run_start

        eval_run = eval_done(eval_run_start(team=team_a, dataset=dataset))
        case = eval_run.cases.get()
        assert case.checks[:2] == [
            {"type": "judge", "passed": True, "score": 0.8, "reason": "score 0.8 (at least 0.5): names the moon"},
            {"type": "judge", "passed": False, "score": 0.1, "reason": "score 0.1 (below 0.6): no height given"},
        ]
        third = case.checks[2]
        assert (third["passed"], third["score"]) == (None, 0.0)
        assert third["reason"].startswith("the judge could not be called: "), third
        assert (case.status, case.score) == ("failed", 0.45)
        first, second = server.requests[0].body, server.requests[1].body
        assert (first["model"], first["temperature"], first["stream"]) == ("judge-m", 0, True)
        assert "Rubric:\nMentions the moon.\n\nTask:\nExplain tides.\n\nAnswer:\nThe moon pulls the sea." in (
            first["messages"][-1]["content"])
        assert "Rubric:\nGives the height in metres." in second["messages"][-1]["content"]
        # 2000 prompt tokens at $2 and 35 completion tokens at $10 per million: the eval's, not the case's run's.
        assert (str(eval_run.judge_cost_usd), eval_run.judge_tokens) == ("0.00435000", 2035)
        assert (eval_run.totals["judge_cost_usd"], eval_run.totals["judge_calls"]) == ("0.00435", 3)
        assert (case.run.cost_usd, case.run.prompt_tokens + case.run.completion_tokens) == (0, case.tokens)
        assert sorted(Session.objects.filter(run=case.run).values_list("agent", "provider")) == [
            ("writer", "scripted")]  # the agent under test never reached the judge's provider
    finally:
        server.stop()
