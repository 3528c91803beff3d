"""Structured logs: JSON lines carrying the run and session they belong to, from a real worker too."""

import json
import logging
import os

import pytest

from mas_core.logs import ContextFilter, JsonFormatter, bind, log_context


def test_a_json_line_carries_the_bound_ids_and_the_call_s_extra_fields():
    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(JsonFormatter().format(record))
    handler.addFilter(ContextFilter())
    log = logging.getLogger("mas.test.json")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    token = bind(run="r-1", session="s-1")
    try:
        log.info("tool crashed %s", "x", extra={"tool": "vfs_read", "session": "explicit"})
    finally:
        log_context.reset(token)
        log.removeHandler(handler)
    log.info("not captured")
    [line] = records
    data = json.loads(line)
    assert {k: data[k] for k in ("level", "logger", "message", "run", "session", "tool")} == {
        "level": "INFO", "logger": "mas.test.json", "message": "tool crashed x", "run": "r-1",
        "session": "explicit", "tool": "vfs_read"}
    assert data["time"].endswith("+00:00")


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_worker_logs_json_lines_with_its_sessions_ids_and_no_secrets(team_a, monkeypatch):
    from mas_project.celery import app
    from agents_app.execution.runs import run_start
    from agents_app.models import Session
    from tests.runs import agent, finish
    from tests.workers import start_worker, stop_worker

    queue = f"logs-{os.getpid()}"
    monkeypatch.setitem(app.conf, "task_default_queue", queue)
    worker = start_worker(queue, queue=queue, env={"MAS_LOG_FORMAT": "json", "MAS_LOG_LEVEL": "INFO",
                                                   "OPENAI_API_KEY": "sk-canary-logs-1234"})
    offset = worker.log_path.stat().st_size
    try:
        agent(team_a, "Lead")
        run = finish(run_start(team=team_a, agent="lead", input="x", script={"lead": [{"text": "done"}]}))
    finally:
        stop_worker(worker)
    session = Session.objects.get(run=run)
    text = worker.log_path.read_bytes()[offset:].decode()
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    ended = [line for line in lines if line["message"] == "session ended"]
    assert [(line["run"], line["session"], line["agent"], line["status"]) for line in ended] == [
        (str(run.id), str(session.id), "lead", "ok")]
    assert "sk-canary-logs-1234" not in text
