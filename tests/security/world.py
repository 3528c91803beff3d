"""Two teams that each own one of everything, for the isolation and secret sweeps.

Team B's rows carry :data:`MARK` in a text field (descriptions, inputs,
contents), never in a slug or id: a 404 may echo the slug the caller sent,
but nothing of B's that the caller did not send may come back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.apps import apps

from agents_app.kinds import AGENT, GUARDRAIL, PROVIDER, REMOTE_AGENT, SKILL

from tools_app.kinds import MCP, TOOL

from workflows_app.kinds import WORKFLOW
from mas_core.definitions.storage import team_defs_dir
from agents_app.execution.runs import run_start
from agents_app.execution.tool_requests import workspace_write
from agents_app.models import ApprovalRequest, Session, Team
from evals_app.kinds import EVAL
from memory_app.models import BlackboardEntry, CachedResponse, Channel, ChannelMessage, Subscription
from memory_app.services import memory_store

MARK = "BRAVO-PRIVATE-7f3a"
MAS_APPS = ("agents_app", "tools_app", "memory_app", "workflows_app", "evals_app")
# Written by every authenticated request of the caller: not a change to anyone's objects.
KINDS = {"agents": AGENT, "skills": SKILL, "providers": PROVIDER, "guardrails": GUARDRAIL, "tools": TOOL,
         "mcp-servers": MCP, "remote-agents": REMOTE_AGENT, "workflows": WORKFLOW, "evals": EVAL}
VOLATILE = {("agents_app", "apitoken"): {"last_used_at"}}
# No team's data, and beating all the time: the worker processes of the suite (agents_app.scheduler).
PROCESS_ROWS = {("agents_app", "worker")}


def definitions(prefix: str, note: str) -> dict[str, dict[str, Any]]:
    """One valid create payload per definition kind (keyed by the API's plural)."""
    return {
        "agents": {"name": f"{prefix} Lead", "description": note, "tools": ["vfs_read"], "body": f"Lead. {note}"},
        "skills": {"name": f"{prefix} Skill", "description": note, "body": f"Do it. {note}"},
        "providers": {"name": f"{prefix} Provider", "type": "openai", "description": note,
                      "base_url": "http://127.0.0.1:9/v1", "api_key_env": f"{prefix.upper()}_LLM_KEY",
                      "models": [{"name": "m1", "tier": "medium"}]},
        "guardrails": {"name": f"{prefix} Guard", "description": note, "applies_to": ["tool_result"],
                       "detector": {"type": "keywords", "words": [note]}, "action": "warn"},
        "tools": {"name": f"{prefix.lower()}_tool", "description": note, "parameters": {"text": {}},
                  "prompt": f"Use {{{{text}}}}. {note}"},
        "mcp-servers": {"name": f"{prefix} MCP", "description": note, "transport": "streamable-http",
                        "url": "https://mcp.example.com/mcp", "headers": {"X-Note": f"${{{prefix.upper()}_ORG}}"}},
        "remote-agents": {"name": f"{prefix} Partner", "description": note,
                          "card_url": "https://agents.example.com/a2a/partner/.well-known/agent-card.json",
                          "headers": {"Authorization": f"Bearer ${{{prefix.upper()}_PARTNER_TOKEN}}"}},
        "workflows": {"name": f"{prefix} Flow", "description": note,
                      "steps": [{"id": "only", "agent": f"{prefix.lower()}-lead", "prompt": f"Go. {note}"}]},
        "evals": {"name": f"{prefix} Evals", "description": note, "agent": f"{prefix.lower()}-lead",
                  "cases": [{"id": "one", "task": f"Task. {note}", "checks": [{"type": "contains", "value": note}]}]},
    }


# What PUT and PATCH send to an item of each kind (valid, so a 404 is the lookup's answer).
REPLACE = {
    "agents": {"name": "X Lead", "description": "hijacked"},
    "skills": {"name": "X Skill", "description": "hijacked"},
    "providers": {"name": "X Provider", "type": "anthropic"},
    "guardrails": {"name": "X Guard", "applies_to": ["model_answer"], "detector": {"type": "length", "max_chars": 1},
                   "action": "block"},
    "tools": {"name": "x_tool", "prompt": "hijacked {{text}}", "parameters": {"text": {}}},
    "mcp-servers": {"name": "X MCP", "transport": "sse", "url": "https://evil.example.com/sse"},
    "remote-agents": {"name": "X Partner", "card_url": "https://evil.example.com/.well-known/agent-card.json"},
    "workflows": {"name": "X Flow", "steps": [{"id": "only", "agent": "x", "prompt": "hijacked"}]},
    "evals": {"name": "X Evals", "agent": "x", "cases": [{"id": "a", "task": "hijacked",
                                                        "checks": [{"type": "status", "equals": "failed"}]}]},
}
PATCH = {"description": "hijacked"}


@dataclass
class Side:
    team: Team
    slugs: dict[str, str] = field(default_factory=dict)  # plural → slug
    run: Any = None
    memory: Any = None
    approval: Any = None
    eval_run: Any = None
    objects: dict[str, Any] = field(default_factory=dict)  # model label → one row


def build_side(team: Team, api, prefix: str, note: str) -> Side:
    side = Side(team=team)
    for plural, payload in definitions(prefix, note).items():
        response = api.post(f"/api/{plural}", payload)
        assert response.status_code == 201, (plural, response.json())
        side.slugs[plural] = response.json()["slug"]
    run = run_start(team=team, agent=side.slugs["agents"], input=f"task {note}")
    activation = run.activations.get()
    session = Session.objects.create(run=run, activation=activation, agent=activation.agent, tier="medium",
                                     model="scripted", result=f"result {note}")
    workspace_write(run_id=run.id, path="out/report.md", content=f"report {note}", agent=activation.agent,
                    session_id=session.id)
    board = BlackboardEntry.objects.create(run=run, key="plan", value=f"plan {note}", author="lead")
    channel = Channel.objects.create(run=run, name="news", next_seq=1)
    message = ChannelMessage.objects.create(channel=channel, seq=1, sender="lead", content=f"news {note}")
    subscription = Subscription.objects.create(channel=channel, agent="lead")
    side.memory = memory_store(team_id=team.id, content=f"memory {note}", agent=side.slugs["agents"], shared=True)
    cached = CachedResponse.objects.create(team=team, agent=side.slugs["agents"], model="scripted:m",
                                           context_digest="0" * 64, prompt=f"prompt {note}",
                                           response={"text": f"cached {note}"}, embedding=side.memory.embedding)
    from django.utils import timezone

    side.approval = ApprovalRequest.objects.create(
        team=team, run=run, session=session, agent=activation.agent, kind="question", tool="ask_human",
        call_id="call_1", question=f"question {note}", deadline=timezone.now() + timezone.timedelta(hours=1))
    side.run = run
    side.eval_run = _eval_run(team, side.slugs["evals"], run, note)
    for row in (run, activation, session, run.files.get(), run.events.first(), board, channel, message,
                subscription, side.memory, cached, side.approval, side.eval_run, side.eval_run.cases.get()):
        side.objects[row._meta.label_lower] = row
    for plural, slug in side.slugs.items():
        model = KINDS[plural].model
        side.objects[model._meta.label_lower] = model.objects.get(team=team, slug=slug)
    from agents_app.models import ApiToken, DefinitionVersion, Membership
    from mas_core.teams import invitation_create

    side.objects["agents_app.definitionversion"] = DefinitionVersion.objects.filter(team=team).first()
    side.objects["agents_app.membership"] = Membership.objects.filter(team=team).first()
    side.objects["agents_app.apitoken"] = ApiToken.objects.filter(team=team).first()
    side.objects["agents_app.invitation"] = invitation_create(team=team, role="viewer").row
    side.objects["agents_app.team"] = team
    side.objects["agents_app.providermodel"] = side.objects["agents_app.modelprovider"].models.first()
    side.objects["auth.user"] = side.objects["agents_app.membership"].user
    side.objects["auth.group"] = side.objects["auth.user"].groups.first()  # the role groups are global
    return side


def _eval_run(team: Team, dataset_slug: str, run, note: str):
    """An eval run of the side's dataset whose one case is its run, its reason marked."""
    from django.utils import timezone

    from evals_app.models import EvalCaseResult, EvalDataset, EvalRun

    dataset = EvalDataset.objects.get(team=team, slug=dataset_slug)
    eval_run = EvalRun.objects.create(team=team, dataset=dataset, dataset_slug=dataset.slug, dataset_version=1,
                                      agent=run.agent, agent_version=1, deadline=timezone.now(), status="finished")
    EvalCaseResult.objects.create(eval_run=eval_run, case_id="one", position=0, run=run, status="failed",
                                  checks=[{"type": "contains", "passed": False, "score": 0.0, "reason": f"why {note}"}])
    return eval_run


def db_snapshot() -> str:
    """Every row of the MAS apps, as JSON (minus what a request of the caller itself refreshes)."""
    rows = {}
    for label in MAS_APPS:
        for model in apps.get_app_config(label).get_models():
            if (model._meta.app_label, model._meta.model_name) in PROCESS_ROWS:
                continue
            skip = VOLATILE.get((model._meta.app_label, model._meta.model_name), set())
            fields = [f.attname for f in model._meta.concrete_fields if f.attname not in skip]
            rows[model._meta.label] = list(model.objects.order_by("pk").values_list(*fields))
    return json.dumps(rows, default=str, sort_keys=True)


def files_snapshot(team: Team) -> dict[str, bytes]:
    root = Path(team_defs_dir(team))
    if not root.exists():
        return {}
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}
