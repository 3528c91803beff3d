"""schemathesis in stateful mode: sequences of calls (create → read → change → delete …) chained on the ids
the API hands back, by an admin of a team set up like the demo's (every shipped definition, runs with events
and files). No server error; and the repository's defs/ is exactly as it was afterwards.

Starting runs is fuzzed too: their task messages are dropped (no worker here), so nothing runs after the test.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from hypothesis import HealthCheck, Phase, seed, settings
from schemathesis.checks import not_a_server_error

STATEFUL_EXAMPLES = int(os.environ.get("MAS_FUZZ_STATEFUL_EXAMPLES", 30))
DEFS = Path(django_settings.BASE_DIR) / "defs"


def tree_digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def git_status(path: Path) -> str:
    done = subprocess.run(["git", "status", "--porcelain", "--", str(path)], cwd=path.parent,
                          capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture
def demo_like_team(make_team, make_member, make_token, settings, tmp_path, monkeypatch):
    """A team on a copy of the shipped definitions, with runs that have events and files; an admin's token."""
    from mas_core.definitions.sync import markdown_sync
    from agents_app.execution.runs import run_start
    from agents_app.execution.tool_requests import workspace_write
    from agents_app.tasks import dispatch_run
    from mas_project.celery import app

    monkeypatch.setitem(app.conf, "task_default_queue", f"unserved-{os.getpid()}")  # no worker runs these
    monkeypatch.setattr(dispatch_run, "apply_async", lambda *args, **kwargs: None)
    settings.MAS_TEAM_SECRETS = "OPENAI_API_KEY=fuzz,GITHUB_TOKEN=fuzz"
    copy = tmp_path / "fuzz-defs"
    shutil.copytree(DEFS, copy)
    team = make_team("fuzz", defs_dir=str(copy))
    report = markdown_sync(team=team, mode="import")
    assert report.errors == [] and len(report.imported) >= 10
    for index in range(3):
        run = run_start(team=team, agent="researcher", input=f"Topic {index}")
        workspace_write(run_id=run.id, path=f"notes-{index}.md", content="notes", agent="researcher",
                        session_id=None)
    return make_token(team, make_member(team, "admin"))


def test_stateful_sequences_make_no_server_error_and_leave_the_repository_alone(api_schema, demo_like_team):
    before = tree_digest(DEFS)
    token = demo_like_team
    # The token is sent by get_call_kwargs; schemathesis must not add (or, in its negative cases, strip) an
    # Authorization header of its own, or every sequence is a string of 401s that reaches no object.
    api_schema.config.generation.update(with_security_parameters=False)
    machine = api_schema.as_state_machine()

    calls: list[tuple[str, int]] = []

    class Sequences(machine):
        def get_call_kwargs(self, case):
            return {"headers": {"Authorization": f"Bearer {token}"}}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            calls.append((f"{case.method} {case.path}", response.status_code))
            case.validate_response(response, checks=[not_a_server_error], transport_kwargs=kwargs)

    assert len(machine.bundles) >= 5  # links were inferred between the API's operations
    # One sequence per engine: the team's data changes from one sequence to the next (and schemathesis learns
    # from responses), which one hypothesis engine would take for a flaky strategy. A failing sequence is
    # reported as it happened. Each sequence has a seed of its own: under CI, hypothesis loads its `ci` profile
    # (derandomize=True), which would make every sequence the same one.
    for index in range(STATEFUL_EXAMPLES):
        seed(index)(Sequences)
        Sequences.run(settings=settings(max_examples=1, stateful_step_count=10, deadline=None,
                                        suppress_health_check=list(HealthCheck), database=None,
                                        phases=[Phase.generate]))
    # Sequences reached the team's real objects through the ids earlier answers gave (a path with an id
    # answered 2xx), and changed some of them.
    assert len(calls) >= STATEFUL_EXAMPLES * 2
    found = [(call, status) for call, status in calls if "{" in call and 200 <= status < 300]
    assert len(found) >= 5, calls
    assert any(call.split()[0] in {"PUT", "PATCH", "DELETE", "POST"} for call, _ in found), found
    assert tree_digest(DEFS) == before
    if (DEFS.parent / ".git").exists():
        assert git_status(DEFS) == ""
