"""Remote agents (issue 25, point 3): MAS as an A2A client, delegating to an agent served elsewhere.

The remote agent is real: team beta's exposed agent behind MAS's own A2A door (a real daphne, the
``a2a-sdk``'s dispatcher), reached over HTTP from team alpha's run on a real worker, with beta's token taken
from the server's environment (declared for alpha in MAS_TEAM_SECRETS). Beta's agent answers through a local
OpenAI-wire server (the outside world); alpha's runs are scripted.
"""

from __future__ import annotations

import json
import os

import pytest

from agents_app.execution.runs import run_cancel, run_start
from agents_app.kinds import AGENT, PROVIDER, REMOTE_AGENT
from agents_app.models import ApprovalRequest, Run, Session, WorkspaceFile
from mas_core.definitions.markdown import DefinitionError
from mas_core.definitions.services import definition_parse
from mas_core.models import ApiToken
from mas_core.teams import TOKEN_PREFIX, _token_hash
from tests.agents_app.llm.fake_servers import FakeServer, hang, openai_stream, sse
from tests.local_http import Quiet, serving
from tests.otel import Collector
from tests.runs import agent, call, define, events, finish, wait_until
from tests.web import WebServer
from tests.workers import start_worker, stop_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

TOKEN = TOKEN_PREFIX + "partner-token-for-remote-agent-tests-0123456789"


@pytest.fixture(scope="module")
def partner(django_db_setup, django_db_blocker):
    """Beta's A2A door (daphne) and a worker, on a queue of their own: the worker may reach 127.0.0.1 (the
    door) and holds beta's token in ALPHA_PARTNER_TOKEN (the suite declares ALPHA_* for teams)."""
    queue = f"remote-{os.getpid()}"
    web = WebServer(label="remote-agents", env={"MAS_CELERY_QUEUE": queue})
    web.start()
    collector = Collector()  # the worker traces its sessions: a remote agent's task continues their trace
    worker = start_worker(queue, queue=queue, env={"MAS_WEB_FETCH_ALLOW": "127.0.0.1", "ALPHA_PARTNER_TOKEN": TOKEN,
                                                   "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
                                                   "OTEL_BSP_SCHEDULE_DELAY": "100"})
    yield {"url": f"http://127.0.0.1:{web.port}", "queue": queue, "log": worker.log_path, "spans": collector}
    stop_worker(worker)
    web.stop()


@pytest.fixture
def world(partner, team_a, team_b, make_member, settings, monkeypatch):
    """Alpha's runs go to the partner's queue; beta has a model (a local server) and a member whose token is
    TOKEN; alpha may reach 127.0.0.1 when saving."""
    from mas_project.celery import app

    monkeypatch.setitem(app.conf, "task_default_queue", partner["queue"])
    settings.MAS_WEB_FETCH_ALLOW = ["127.0.0.1"]
    model = FakeServer().start()
    define(team_b, PROVIDER, f"---\nname: Fake\ntype: openai\nbase_url: {model.url}/v1\nmodels:\n"
                             "- name: m-medium\n  tier: medium\n---\n")
    member = make_member(team_b, "operator")
    ApiToken.objects.create(team=team_b, user=member, role="operator", prefix=TOKEN[:12], token_hash=_token_hash(TOKEN))
    yield {**partner, "model": model}
    model.stop()


def remote(team, url: str, name: str = "Partner", extra: str = "") -> None:
    define(team, REMOTE_AGENT, f"---\nname: {name}\ndescription: Researches for us, elsewhere.\ncard_url: {url}\n"
                               f"headers:\n  Authorization: Bearer ${{ALPHA_PARTNER_TOKEN}}\n{extra}---\n")


def card(world, slug: str = "researcher") -> str:
    return f"{world['url']}/a2a/{slug}/.well-known/agent-card.json"


def delegating(team, task: str = "Find the tide tables", then: str = "Thanks") -> Run:
    agent(team, "Lead", "tools:\n- delegate\n")
    script = {"lead": [call("delegate", agent="partner", task=task, context={"port": "Brest"}), {"text": then}]}
    return run_start(team=team, agent="lead", input="Plan the sailing", script=script)


def their_run(team_b) -> Run:
    return wait_until(lambda: Run.objects.filter(team=team_b).first(), 30, "the remote run to start")


def test_a_delegated_task_runs_on_the_remote_agent_and_its_answer_is_the_outcome(world, team_a, team_b):
    agent(team_b, "Researcher", "expose: true\ntier: medium\n")
    world["model"].add(sse(openai_stream(text=["High tide ", "at 06:12."], usage=(5, 4))))
    remote(team_a, card(world))

    run = finish(delegating(team_a))

    assert (run.status, run.result) == ("succeeded", "Thanks")
    [outcome] = [json.loads(e.data["content"]) for e in events(run, "tool_result")]
    assert (outcome["agent"], outcome["status"], outcome["result"], outcome["failure"]) == (
        "partner", "ok", "High tide at 06:12.", None)
    theirs = Run.objects.get(team=team_b)
    assert (theirs.agent, theirs.status, theirs.result) == ("researcher", "succeeded", "High tide at 06:12.")
    # It was sent the task with the delegating agent's context, authenticated by beta's token.
    assert theirs.input == 'Find the tide tables\n\n## Context\n\n{"port": "Brest"}'
    # Its states and its text are the session's events; the remote task is kept on the session.
    session = Session.objects.get(run=run, agent="partner")
    [known] = events(run, "remote_task")
    assert (known.data["task"], known.data["context"], known.session_id) == (str(theirs.id), str(theirs.id), session.id)
    assert session.state == {"remote": {"task": str(theirs.id), "context": str(theirs.id), "answered": 0}}
    states = [e.data["state"] for e in events(run, "remote_status")]
    assert states[0] in {"submitted", "working"} and states[-1] == "completed"
    assert "".join(e.data["text"] for e in events(run, "stream_chunk") if e.session_id == session.id) == (
        "High tide at 06:12.")
    assert TOKEN not in json.dumps([e.data for e in events(run)])
    assert TOKEN not in world["log"].read_text()
    # Beta's run continues the trace of alpha's session: its run_start names the session's span as its parent.
    [span] = [s for s in world["spans"].trace(run.id.bytes, 4) if s.name == "invoke_agent partner"]
    assert {a.key: a.value.string_value for a in span.attributes if a.key in (
        "gen_ai.provider.name", "mas.session.status", "mas.remote.task")} == {
        "gen_ai.provider.name": "a2a", "mas.session.status": "ok", "mas.remote.task": str(theirs.id)}
    [started] = events(theirs, "run_start")
    assert started.data["traceparent"] == f"00-{run.id.hex}-{span.span_id.hex()}-01"


def test_a_run_of_a_remote_agent_itself_is_its_task(world, team_a, team_b, api_for):
    agent(team_b, "Researcher", "expose: true\ntier: medium\n")
    world["model"].add(sse(openai_stream(text=["Spring tides."], usage=(5, 4))))
    remote(team_a, card(world))

    made = api_for(team_a, "operator").post("/api/runs", {"agent": "partner", "input": "Which tides?"})
    assert made.status_code == 201, made.json()
    run = finish(Run.objects.get(pk=made.json()["id"]))

    assert (made.status_code, run.status, run.result) == (201, "succeeded", "Spring tides.")
    assert Run.objects.get(team=team_b).input == "Which tides?"
    assert run.versions == {"remote_agent:partner": 1}


def test_a_workflow_step_names_a_remote_agent_and_gets_its_answer_and_files(world, team_a, team_b):
    from workflows_app.kinds import WORKFLOW
    from workflows_app.services import workflow_run_start

    agent(team_b, "Researcher", "expose: true\ntier: medium\ntools:\n- vfs_write\n")
    world["model"].add(
        sse(openai_stream(tool_calls=[("c1", "vfs_write", ['{"path": "tides.csv", "content": "06:12,4.1\\n"}'])],
                          usage=(5, 5))),
        sse(openai_stream(text=["Tides written."], usage=(6, 3))))
    remote(team_a, card(world))
    define(team_a, WORKFLOW, "---\nname: Sail\ninputs: [port]\nsteps:\n- id: tides\n  agent: partner\n"
                             "  prompt: Tide tables for {port}\n  outputs: [tides]\n---\n")

    run = finish(workflow_run_start(team=team_a, workflow="sail", inputs={"port": "Brest"}))

    assert (run.status, run.result) == ("succeeded", "Tides written.")
    assert Run.objects.get(team=team_b).input == "Tide tables for Brest"
    assert dict(WorkspaceFile.objects.filter(run=run).values_list("path", "content")) == {
        "remote/partner/tides.csv": "06:12,4.1\n"}
    assert run.versions["remote_agent:partner"] == 1  # pinned with the step agents


def test_a_remote_question_is_asked_in_mas_and_the_answer_goes_back(world, team_a, team_b, make_member):
    from agents_app.approvals.services import approval_decide

    agent(team_b, "Researcher", "expose: true\ntier: medium\ntools:\n- ask_human\n")
    world["model"].add(
        sse(openai_stream(tool_calls=[("c1", "ask_human", ['{"question": "Which port?"}'])], usage=(5, 5))),
        sse(openai_stream(text=["Brest: 06:12."], usage=(6, 3))))
    remote(team_a, card(world))
    run = delegating(team_a)

    asked = wait_until(lambda: ApprovalRequest.objects.filter(run=run, status="pending").first(), 60,
                       "alpha to be asked")
    assert (asked.kind, asked.agent, asked.question) == ("question", "partner", "partner asks: Which port?")
    wait_until(lambda: Session.objects.get(run=run, agent="partner").status == "suspended", 30,
               "the remote session to suspend, holding no worker")
    assert Run.objects.get(pk=run.pk).status == "waiting"
    assert Run.objects.get(team=team_b).status == "waiting"

    approval_decide(team=team_a, request_id=asked.id, user=make_member(team_a, "operator"), decision="answer",
                    answer="Brest")
    run = finish(run)

    assert (run.status, run.result) == ("succeeded", "Thanks")
    theirs = Run.objects.get(team=team_b)
    assert (theirs.status, theirs.result) == ("succeeded", "Brest: 06:12.")
    assert ApprovalRequest.objects.get(run=theirs).decision["answer"] == "Brest"
    assert Session.objects.get(run=run, agent="partner").state["remote"]["answered"] == 1


def test_cancelling_the_run_cancels_the_remote_task(world, team_a, team_b):
    agent(team_b, "Researcher", "expose: true\ntier: medium\n")
    world["model"].add(hang(60))
    remote(team_a, card(world))
    run = delegating(team_a)
    wait_until(lambda: Run.objects.filter(team=team_b, status="running").exists(), 60, "the remote run to run")
    wait_until(lambda: events(run, "remote_task"), 30, "the remote task to be known")

    run_cancel(run=run)

    wait_until(lambda: Run.objects.get(team=team_b).status == "cancelled", 30, "the remote run cancelled")
    wait_until(lambda: Session.objects.get(run=run, agent="partner").status == "cancelled", 30,
               "the remote session to end")
    assert [e.data["state"] for e in events(run, "remote_status")][-1] == "canceled"


def test_a_session_resumed_after_its_worker_died_follows_the_same_remote_task(world, team_a, team_b, monkeypatch):
    from mas_project.celery import app
    from tests.workers import kill_mid_run_and_resume

    agent(team_b, "Researcher", "expose: true\ntier: medium\n")
    # Any worker's scheduler may take beta's session too: killed with alpha's, it asks its model again.
    world["model"].add(sse(openai_stream(text=["Neap ", "tides ", "this ", "week."], usage=(5, 4)),
                           event_delay_s=0.8),
                       sse(openai_stream(text=["Neap ", "tides ", "this ", "week."], usage=(5, 4))))
    remote(team_a, card(world))
    queue = f"remote-failover-{os.getpid()}"
    monkeypatch.setitem(app.conf, "task_default_queue", queue)  # alpha's run: on the workers killed and resumed

    run = kill_mid_run_and_resume(
        "remote", queue=queue, stale_s=2, start=lambda: delegating(team_a),
        reached=lambda run: bool(events(run, "remote_task")), what="the remote task to be sent",
        env={"MAS_WEB_FETCH_ALLOW": "127.0.0.1", "ALPHA_PARTNER_TOKEN": TOKEN})

    assert (run.status, run.result) == ("succeeded", "Thanks")
    theirs = Run.objects.get(team=team_b)  # the one task: the resumed session did not send it again
    assert (theirs.status, theirs.result) == ("succeeded", "Neap tides this week.")
    [outcome] = [json.loads(e.data["content"]) for e in events(run, "tool_result")]
    assert (outcome["status"], outcome["result"]) == ("ok", "Neap tides this week.")
    sessions = Session.objects.filter(run=run, agent="partner")
    assert [(s.attempt, s.status) for s in sessions] == [(1, "ok")]  # the same session, resumed
    starts = [e.data["resumed"] for e in events(run, "session_start") if e.agent == "partner"]
    assert starts == [False, True]
    assert len(events(run, "remote_task")) == 1


def test_the_runs_guardrails_check_what_goes_to_the_remote_agent_and_what_comes_back(world, team_a, team_b):
    from agents_app.kinds import GUARDRAIL

    for name, settings in {
        "g-out": "applies_to: [model_request]\ndetector:\n  type: pattern\n  patterns: ['\\bproject ORCA\\b']\n"
                 "action: redact\n",
        "g-back": "applies_to: [model_answer]\ndetector:\n  type: keywords\n  words: [damn]\naction: mask\n",
    }.items():
        define(team_a, GUARDRAIL, f"---\nname: {name}\n{settings}default: true\n---\n")
    agent(team_b, "Researcher", "expose: true\ntier: medium\n")
    world["model"].add(sse(openai_stream(text=["The damn ", "tides."], usage=(5, 4))))
    remote(team_a, card(world))

    run = finish(delegating(team_a, task="Tides for project ORCA"))

    theirs = Run.objects.get(team=team_b)
    assert theirs.input.startswith("Tides for [pattern]\n\n## Context")  # what left MAS
    [outcome] = [json.loads(e.data["content"]) for e in events(run, "tool_result")]
    assert (outcome["status"], outcome["result"]) == ("ok", "The **** tides.")
    assert [(e.data["guardrail"], e.data["where"], e.data["action"]) for e in events(run, "guardrail_triggered")
            if e.agent == "partner"] == [("g-out", "model_request", "redact"), ("g-back", "model_answer", "mask")]
    session = Session.objects.get(run=run, agent="partner")
    # A checked answer is not streamed: it shows whole once judged.
    assert [e for e in events(run, "stream_chunk") if e.session_id == session.id] == []


class Cards(Quiet):
    """Cards of remote agents that misbehave: one whose endpoint is the cloud metadata address, one too large,
    one that is not a card."""

    def do_GET(self):
        bodies = {"/metadata.json": json.dumps({
            "name": "Sly", "description": "x", "version": "1", "capabilities": {}, "skills": [],
            "defaultInputModes": ["text"], "defaultOutputModes": ["text"],
            "supportedInterfaces": [{"url": "http://169.254.169.254/a2a", "protocolBinding": "JSONRPC",
                                     "protocolVersion": "1.0"}]}),
            "/huge.json": json.dumps({"name": "x" * (300 * 1024)}), "/list.json": "[1, 2]"}
        self.reply("application/json", bodies[self.path].encode())


class Chatty(Quiet):
    """An A2A 1.0 server (JSON-RPC over HTTP, SSE) that streams too much: one status a thousand times over, and
    5,000 one-character chunks over 300 artifacts, then ends the task; its task, asked for, has no artifact."""

    def do_GET(self):
        port = self.server.server_address[1]
        self.reply("application/json", json.dumps({
            "name": "Chatty", "description": "Talks a lot", "version": "1", "capabilities": {"streaming": True},
            "skills": [], "defaultInputModes": ["text"], "defaultOutputModes": ["text"],
            "supportedInterfaces": [{"url": f"http://127.0.0.1:{port}/rpc", "protocolBinding": "JSONRPC",
                                     "protocolVersion": "1.0"}]}).encode())

    def do_POST(self):
        call = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        task = {"id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_COMPLETED"}}
        if call["method"] == "GetTask":
            self.reply("application/json", json.dumps({"jsonrpc": "2.0", "id": call["id"], "result": task}).encode())
            return
        working = {"taskId": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_WORKING"}}
        results = [{"task": {**task, "status": {"state": "TASK_STATE_SUBMITTED"}}}]
        results += [{"statusUpdate": working}] * 1000
        results += [{"artifactUpdate": {"taskId": "t-1", "contextId": "c-1", "append": True, "artifact": {
            "artifactId": f"a{n % 300}", "parts": [{"text": "x"}]}}} for n in range(5000)]
        results += [{"statusUpdate": {**working, "status": {"state": "TASK_STATE_COMPLETED"}}}]
        self.reply("text/event-stream", b"".join(
            b"data: " + json.dumps({"jsonrpc": "2.0", "id": call["id"], "result": result}).encode() + b"\n\n"
            for result in results))



def test_a_remote_agent_that_streams_too_much_costs_a_bounded_number_of_events(world, team_a):
    with serving(Chatty) as base:
        remote(team_a, f"{base}/card.json")
        run = finish(delegating(team_a))

    session = Session.objects.get(run=run, agent="partner")
    # The text of the first 100 artifacts (17 characters each) is kept, the rest dropped; the answer is it.
    assert (session.status, session.result) == ("ok", "\n\n".join(["x" * 17] * 100))
    assert [e.data["state"] for e in events(run, "remote_status")] == ["submitted", "working", "completed"]
    chunks = [e.data["text"] for e in events(run, "stream_chunk") if e.session_id == session.id]
    assert "".join(chunks) == "x" * 1700 and len(chunks) == 9  # 200 characters an event


def test_a_remote_agent_that_cannot_be_used_fails_the_delegation_with_the_reason(world, team_a, settings):
    with serving(Cards) as base:
        failures = {}
        for path in ("metadata.json", "huge.json", "list.json"):
            Run.objects.all().delete()
            remote(team_a, f"{base}/{path}")
            run = finish(delegating(team_a, then="noted"))
            [outcome] = [json.loads(e.data["content"]) for e in events(run, "tool_result")]
            failures[path] = (outcome["status"], outcome["failure"]["kind"], outcome["failure"]["message"])
    assert failures["metadata.json"][:2] == ("failed", "policy_denied")
    assert "169.254.169.254" in failures["metadata.json"][2]
    assert failures["huge.json"] == ("failed", "provider_error",
                                     f"remote agent partner: its card at {base}/huge.json is larger than 256 KB")
    assert failures["list.json"][:2] == ("failed", "provider_error")
    assert failures["list.json"][2].startswith(f"remote agent partner: {base}/list.json is not an A2A agent card")


def test_a_secret_no_longer_declared_for_the_team_fails_before_anything_is_sent(world, team_a, team_b):
    agent(team_b, "Researcher", "expose: true\ntier: medium\n")
    remote(team_a, card(world), extra="")
    # Saved while declared; the worker's declaration names another variable for alpha.
    ApiToken.objects.filter(team=team_b).delete()
    from agents_app.models import RemoteAgent

    row = RemoteAgent.objects.get(team=team_a)
    row.spec = {**row.spec, "headers": {"Authorization": "Bearer ${OTHER_TOKEN}"}}
    row.save()
    run = finish(delegating(team_a, then="noted"))
    [outcome] = [json.loads(e.data["content"]) for e in events(run, "tool_result")]
    assert (outcome["status"], outcome["failure"]["kind"]) == ("failed", "policy_denied")
    assert outcome["failure"]["message"] == (
        "remote agent partner: header Authorization refers to ${OTHER_TOKEN}: OTHER_TOKEN is not declared for teams "
        "on this server: the operator lists the environment variables teams may use in MAS_TEAM_SECRETS")
    assert not Run.objects.filter(team=team_b).exists()


# -- the definition ------------------------------------------------------------------------------------------


def parse(team, text: str):
    return definition_parse(kind=REMOTE_AGENT, team=team, text=text)


CARD = "https://agents.example.com/a2a/r/.well-known/agent-card.json"


@pytest.mark.parametrize("frontmatter, message", [
    (f"card_url: {CARD}\nheaders:\n  Authorization: Bearer abc123", "a header carries a credential"),
    (f"card_url: {CARD}\nheaders:\n  Authorization: Bearer ${{NOT_DECLARED}}", "NOT_DECLARED is not declared"),
    (f"card_url: {CARD}\nheaders:\n  Authorization: Bearer ${{BRAVO_TOKEN}}", "BRAVO_TOKEN is declared in "
                                                                               "MAS_TEAM_SECRETS for other teams"),
    ("card_url: http://127.0.0.1:8000/card.json", "a private/loopback/link-local address; refused (allow it in "
                                                  "MAS_WEB_FETCH_ALLOW)"),
    ("card_url: http://169.254.169.254/card.json", "169.254.169.254"),
    ("card_url: ftp://agents.example.com/card.json", "must start with http:// or https://"),
    (f"card_url: {CARD}\ntimeout_s: 0", "timeout_s"),
])
def test_a_remote_agent_that_would_leak_a_secret_or_reach_inside_is_refused_on_save(team_a, settings, frontmatter,
                                                                                     message):
    settings.MAS_TEAM_SECRETS = "ALPHA_*=alpha, BRAVO_*=beta"
    with pytest.raises(DefinitionError) as refused:
        parse(team_a, f"---\nname: Partner\n{frontmatter}\n---\n")
    assert message in str(refused.value)


def test_agents_and_remote_agents_share_one_namespace_and_a_used_one_cannot_be_deleted(team_a):
    from mas_core.definitions.dependents import DefinitionInUse
    from mas_core.definitions.services import definition_delete
    from workflows_app.kinds import WORKFLOW

    agent(team_a, "Writer")
    with pytest.raises(DefinitionError) as taken:
        parse(team_a, f"---\nname: Writer\ncard_url: {CARD}\n---\n")
    assert "the team has an agent 'writer': a remote agent needs a name of its own" in str(taken.value)
    remote(team_a, CARD)
    with pytest.raises(DefinitionError) as taken:
        definition_parse(kind=AGENT, team=team_a, text="---\nname: Partner\n---\n")
    assert "the team has a remote agent 'partner': an agent needs a name of its own" in str(taken.value)
    define(team_a, WORKFLOW, "---\nname: Sail\nsteps:\n- id: tides\n  agent: partner\n  prompt: Tides\n---\n")
    with pytest.raises(DefinitionInUse) as used:
        definition_delete(kind=REMOTE_AGENT, team=team_a, slug="partner")
    assert str(used.value) == "Remote agent partner is used by workflow sail (step tides): change or delete them first"
