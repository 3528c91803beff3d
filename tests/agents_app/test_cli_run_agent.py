"""``manage.py run_agent``: starts a run, follows it on a real worker, prints a summary, exits by outcome."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from agents_app.management.commands.run_agent import describe_event, short_arguments
from agents_app.models import Run
from tests.agents_app.test_api_runs import SCRIPT, agent

ROOT = Path(__file__).resolve().parents[2]


def script_file(tmp_path, script) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    return str(path)


def run_command(*args, **options) -> tuple[str, CommandError | None]:
    out = StringIO()
    try:
        call_command("run_agent", *args, stdout=out, **options)
    except CommandError as error:
        return out.getvalue(), error
    return out.getvalue(), None


# -- against the worker -------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_follows_a_run_to_success_with_a_summary(team_a, tmp_path, celery_worker_process):
    agent(team_a, "Lead")
    agent(team_a, "Helper")
    out, error = run_command("lead", "Investigate", "--team", "alpha", "--script", script_file(tmp_path, SCRIPT))
    assert error is None, out
    run = Run.objects.get()
    assert run.status == "succeeded" and run.input == "Investigate"
    lines = out.splitlines()
    assert lines[0] == f"Run {run.id} started: agent lead in team alpha (scripted)"
    progress = "\n".join(lines)
    # One readable line per step, in order.
    expected = [
        "lead           run started: lead on 'Investigate'",
        "lead           session started (attempt 1, tier medium)",
        "lead           calls model scripted (step 1,",
        "lead           model replied: 10 in / 5 out tokens, $0.00; 3 tool call(s): vfs_write, vfs_write, delegate",
        "lead           → vfs_write(path='notes.md', content='plan')",
        "lead           created notes.md (v1, 4 bytes)",
        "lead           ← vfs_write ok:",
        "lead           delegates to helper: Check the report",
        "helper         session started (attempt 1, tier medium)",
        "helper         session ok after",
        "run succeeded",
    ]
    position = 0
    for fragment in expected:
        found = progress.find(fragment, position)
        assert found >= 0, f"{fragment!r} missing after position {position}:\n{out}"
        position = found
    summary = lines[lines.index("") + 1:]
    assert summary[0] == "Status:     succeeded"
    assert summary[1].startswith("Duration:   ") and summary[1].endswith(" s")
    assert summary[2:7] == ["Sessions:   2 (2 ok)", "Tool calls: 3", "Tokens:     21 in / 9 out",
                            "Cost:       $0.00", "Files:      2"]
    assert summary[-1] == "Result:     Done."


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_failed_run_exits_non_zero(team_a, tmp_path, celery_worker_process):
    agent(team_a, "Lead")
    out, error = run_command("lead", "Try", "--script", script_file(tmp_path, {"lead": [{"error": "auth"}]}))
    assert error is not None and error.returncode == 1, out
    assert "failed" in str(error)
    assert "ERROR in model_call (auth): scripted authentication failure" in out
    assert "session failed after" in out and "provider_error" in out
    assert "Status:     failed" in out
    assert "Sessions:   1 (1 failed)" in out
    assert Run.objects.get().status == "failed"


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_the_process_exit_code_follows_the_run(team_a, tmp_path, celery_worker_process):
    agent(team_a, "Lead")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mas_project.settings_test",
           "MAS_DATABASE_NAME": settings.DATABASES["default"]["NAME"]}
    command = [sys.executable, "manage.py", "run_agent", "lead", "Go", "--timeout", "60"]
    ok = subprocess.run([*command, "--script", script_file(tmp_path, {"lead": [{"text": "fine"}]})],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "Result:     fine" in ok.stdout
    bad = subprocess.run([*command, "--script", script_file(tmp_path, {"lead": [{"error": "auth"}]})],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "Status:     failed" in bad.stdout
    assert bad.stderr.startswith("CommandError: run ") and "failed: provider_error: auth" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_no_follow_prints_the_run_and_returns(team_a, tmp_path, celery_worker_process):
    agent(team_a, "Lead")
    out, error = run_command("lead", "Go", "--no-follow", "--script", script_file(tmp_path, {"lead": [{"text": "ok"}]}))
    assert error is None
    run = Run.objects.get()
    assert out.splitlines() == [f"Run {run.id} started: agent lead in team alpha (scripted)",
                                f"  API: /api/runs/{run.id}   events: /api/runs/{run.id}/events"]


# -- refusals before anything starts ---------------------------------------------------------


@pytest.mark.django_db
def test_without_a_worker_on_the_queue_nothing_starts(team_a, settings):
    agent(team_a, "Lead")
    settings.CELERY_TASK_DEFAULT_QUEUE = "mas-nobody-listens-here"
    _, error = run_command("lead", "Go", "--worker-wait", "0.5")
    assert error is not None
    assert "no Celery worker answered within 0.5 s on queue 'mas-nobody-listens-here'" in str(error)
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_team_must_be_named_when_there_are_several(team_a, team_b):
    agent(team_a, "Lead")
    _, error = run_command("lead", "Go")
    assert str(error) == "name the team with --team (one of: alpha, beta)"
    _, error = run_command("lead", "Go", "--team", "gamma")
    assert str(error) == "no team 'gamma'"
    _, error = run_command("lead", "Go", "--team", "beta")
    assert str(error) == "no agent 'lead' in team beta"
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_a_bad_script_file_is_refused_with_its_reason(team_a, tmp_path):
    agent(team_a, "Lead")
    _, error = run_command("lead", "Go", "--script", script_file(tmp_path, {"lead": [{"txt": "typo"}]}))
    assert "turn 0: unknown key(s) txt" in str(error)
    broken = tmp_path / "broken.json"
    broken.write_text("{nope")
    _, error = run_command("lead", "Go", "--script", str(broken))
    assert str(error).startswith(f"{broken}: Expecting property name")
    _, error = run_command("lead", "Go", "--script", str(tmp_path / "missing.json"))
    assert "cannot read" in str(error)
    assert Run.objects.count() == 0


def test_event_lines_say_what_happens():
    assert describe_event({"type": "stream_chunk", "data": {"text": "hi"}}) is None
    assert describe_event({"type": "stream_chunk", "data": {"text": "hi"}}, verbose=True) == "… hi"
    assert describe_event({"type": "retry", "data": {"what": "model_call", "attempt": 2, "delay_s": 0.1,
                                                     "error": "scripted rate limit"}}) == \
        "retry of the model_call (attempt 2) in 0.1 s: scripted rate limit"
    assert describe_event({"type": "escalation", "data": {"from": "small", "to": "medium"}}) == \
        "escalates tier small → medium"
    assert describe_event({"type": "escalation", "data": {"from": "small", "to": "large", "from_model": "a:s",
                                                          "to_model": "b:l"}}) == \
        "escalates tier small → large (a:s → b:l)"
    assert describe_event({"type": "signal", "data": {"to": "lead", "message": "found water"}}) == \
        "signals lead: found water"
    assert describe_event({"type": "tool_result", "data": {"name": "vfs_read", "ok": False,
                                                           "error_kind": "not_found", "content": "no such file"}}) == \
        "← vfs_read FAILED (not_found): no such file"
    assert describe_event({"type": "mcp_connect", "data": {"server": "git"}}) == 'mcp_connect {"server": "git"}'
    assert short_arguments({"content": "x" * 100, "n": 3}) == f"content='{'x' * 39}…', n=3"
