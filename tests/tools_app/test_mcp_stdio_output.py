"""Issue 13, finding 8: what a stdio MCP server prints outside the protocol never carries its secrets.

The server (mcp_servers/leaky.py) prints its environment — a literal secret of
the row and a team secret it was given by reference — on stdout, where the
SDK fails to parse the line and logs it quoted, and on stderr. The web
process's log (the API's test action, run here in process), a worker's log (a
real run) and the run's events show ``[redacted]`` where the values were, and
no piece of them.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import pytest

from tools_app.kinds import MCP
from agents_app.execution.runs import run_start
from agents_app.models import Event
from tests.runs import agent, define, events, finish, wait_until
from tests.tools_app.stdio_teams import team_a, team_b  # noqa: F401 (fixtures: the teams hold the stdio grant)



LEAKY = str(Path(__file__).parent / "mcp_servers" / "leaky.py")
LITERAL = "literal-canary-6b1f2a9e4c7d"  # the row's own env secret
DECLARED_NAME = "LOCAL_LEAK_TOKEN"  # LOCAL_* is declared for teams in the test settings
DECLARED = "declared-canary-0d93e58a17fb"
# Set at import, before the session's worker process starts: it inherits it as a deployment's worker would.
os.environ[DECLARED_NAME] = DECLARED
PRINTED = "TOKEN=[redacted] FROM_ENV=[redacted]"
STDERR_NOTE = f"(stderr: starting with {PRINTED} | config dump: {PRINTED})"


def pieces_of_secrets(text: str) -> list[str]:
    """Every run of 8 characters of a secret found in ``text`` (a cut-off value leaks too)."""
    return [secret[i:i + 8] for secret in (LITERAL, DECLARED) for i in range(len(secret) - 7)
            if secret[i:i + 8] in text]


def leaky_server(team, slug: str, mode: str) -> None:
    define(team, MCP, f"---\nname: {slug}\ntransport: stdio\ncommand: {sys.executable}\nargs:\n- {LEAKY}\n"
                      f"- {mode}\n- TOKEN\n- FROM_ENV\nenv:\n  TOKEN: {LITERAL}\n  FROM_ENV: ${{{DECLARED_NAME}}}\n"
                      "timeout_s: 10\n---\n")


def record_text(record: logging.LogRecord) -> str:
    fields = {key: value for key, value in vars(record).items() if isinstance(value, str)}
    return json.dumps([record.getMessage(), record.exc_text or "", fields])


@pytest.mark.django_db
def test_the_test_action_logs_and_reports_what_a_server_printed_redacted(team_a, api_for, caplog, monkeypatch):
    from mas_core.secrets import RedactFilter

    # Whatever handlers a deployment has (these have no redacting filter now), the SDK's loggers and ours hand
    # them records already redacted.
    for handler in logging.root.handlers:
        monkeypatch.setattr(handler, "filters", [f for f in handler.filters if not isinstance(f, RedactFilter)])
    leaky_server(team_a, "leaky-serve", "serve")
    leaky_server(team_a, "leaky-exit", "exit")
    api = api_for(team_a, "admin")

    with caplog.at_level(logging.INFO):
        served = api.post("/api/mcp-servers/leaky-serve/test").json()
        failed = api.post("/api/mcp-servers/leaky-exit/test").json()
        stderr_lines = wait_until(lambda: [r for r in caplog.records if r.getMessage() == "mcp server stderr"][3:]
                                  and [(r.server, r.line) for r in caplog.records
                                       if r.getMessage() == "mcp server stderr"], 10, "four stderr lines")

    assert served["ok"] is True and "add" in [tool["name"] for tool in served["tools"]]
    assert failed["ok"] is False
    assert failed["error"].startswith("MCP server leaky-exit could not be reached: ")
    assert failed["error"].endswith(STDERR_NOTE)
    assert sorted(stderr_lines) == sorted((slug, f"{prefix}{PRINTED}") for slug in ("leaky-serve", "leaky-exit")
                                          for prefix in ("starting with ", "config dump: "))
    # The SDK's own line about the stray stdout quotes it whole, redacted (pydantic would cut it to its ends).
    stray = [r for r in caplog.records if r.name == "mcp.client.stdio"]
    assert stray and all(f"stray output {PRINTED}" in r.exc_text for r in stray), [r.exc_text for r in stray]
    assert pieces_of_secrets(caplog.text) == []
    assert pieces_of_secrets("".join(record_text(r) for r in caplog.records)) == []
    assert pieces_of_secrets(json.dumps([served, failed])) == []


def log_tail(path: Path, offset: int) -> str:
    with open(path, "rb") as handle:
        handle.seek(offset)
        return handle.read().decode(errors="replace")


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_run_on_a_worker_logs_and_records_what_a_server_printed_redacted(team_a, celery_worker_process):
    log_path = celery_worker_process.log_path
    offset = log_path.stat().st_size if log_path.exists() else 0
    leaky_server(team_a, "leaky-serve", "serve")
    leaky_server(team_a, "leaky-exit", "exit")
    agent(team_a, "Lead", "mcp_servers:\n- leaky-serve\n- leaky-exit\n")

    run = finish(run_start(team=team_a, agent="lead", input="Connect", script={"lead": [{"text": "done"}]}))

    assert (run.status, run.result) == ("succeeded", "done")
    connects = {e.data["server"]: e.data for e in events(run, "mcp_connect")}
    assert connects["leaky-serve"]["ok"] is True
    assert connects["leaky-exit"]["ok"] is False and connects["leaky-exit"]["error"].endswith(STDERR_NOTE)
    log = wait_until(lambda: (text := log_tail(log_path, offset)).count("mcp server stderr") >= 4
                     and f"stray output {PRINTED}" in text and text, 15, "the worker's log lines")
    assert f"line='starting with {PRINTED}'" in log and f"line='config dump: {PRINTED}'" in log
    time.sleep(0.5)  # anything the worker still writes about these servers
    log = log_tail(log_path, offset)
    assert pieces_of_secrets(log) == []
    recorded = list(Event.objects.filter(run=run).values_list("type", "data"))
    assert len(recorded) >= 5 and pieces_of_secrets(json.dumps(recorded, default=str) + run.error) == []


def test_stderr_is_logged_bounded_and_a_line_too_long_to_redact_whole_is_not_shown(caplog):
    from mas_core.secrets import Redactor
    from tools_app.mcp.stderr import StderrReader

    with caplog.at_level(logging.INFO):
        reader = StderrReader(server="noisy", team="alpha", redact=Redactor([LITERAL]))
        reader.writer.write("".join(f"line {n} {LITERAL}\n" for n in range(230)))
        # A line too long to hold (and so to redact) whole: no piece of it is shown.
        reader.writer.write("y" * 150_000 + LITERAL + "z" * 150_000 + "\n")
        reader.writer.write("last words")
        reader.spawned()
        reader.finished(10)

    lines = [r.line for r in caplog.records if r.getMessage() == "mcp server stderr"]
    assert lines == [f"line {n} [redacted]" for n in range(200)]
    [more] = [r for r in caplog.records if r.getMessage() == "mcp server stderr: more lines not logged"]
    assert (more.server, more.team, more.lines) == ("noisy", "alpha", 32)
    assert reader.tail() == ("line 227 [redacted] | line 228 [redacted] | line 229 [redacted] | "
                             "[a line of more than 64 KiB, not shown] | last words")
    assert pieces_of_secrets(caplog.text + reader.tail() + "".join(record_text(r) for r in caplog.records)) == []
