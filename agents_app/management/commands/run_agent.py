"""``manage.py run_agent <slug> "<task>"``: start a run and follow it live from a terminal.

The run starts through ``execution.runs.run_start`` (the same path as
the API); its events are read back from the database every ~0.2 s and
printed one line each, then a summary. Exit codes: 0 succeeded, 1 failed
(or could not start), 2 cancelled, 3 still running when ``--timeout`` ran out.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from kombu.exceptions import OperationalError as KombuOperationalError

from mas_core.events import event_to_dict
from agents_app.execution.errors import RunError
from agents_app.execution.runs import run_start
from agents_app.llm.scripted import validate_script
from agents_app.models import Agent, Event, Run, Session, Team, WorkspaceFile
from agents_app.models.runs import FINISHED_RUN_STATUSES
from agents_app.money import money_display
from agents_app.selectors_runs import run_duration_s, run_events

POLL_S = 0.2
EXIT_FAILED, EXIT_CANCELLED, EXIT_TIMEOUT = 1, 2, 3


# -- one line per event --------------------------------------------------------------


def _short(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def money(value: Any) -> str:
    try:
        return money_display(value)
    except ValueError:
        return f"${value}"


def short_arguments(arguments: Any, width: int = 100) -> str:
    """``path='notes.md', content='plan: sen…'``: each value cut short, the whole bounded."""
    if not isinstance(arguments, dict):
        return _short(arguments, width)
    parts = [f"{key}={_short(value, 40)!r}" if isinstance(value, str) else f"{key}={_short(value, 40)}"
             for key, value in arguments.items()]
    return _short(", ".join(parts), width)


def describe_event(event: dict[str, Any], *, verbose: bool = False) -> str | None:
    """What an event says, for a person; None for events not worth a line (streamed text unless verbose)."""
    data, kind = event.get("data") or {}, event["type"]
    if kind == "run_start":
        return f"run started: {data.get('agent')} on {_short(data.get('input', ''))!r}"
    if kind == "activation_queued":
        return f"queued ({data.get('kind')}, depth {data.get('depth')})"
    if kind == "session_start":
        resumed = ", resumed" if data.get("resumed") else ""
        return f"session started (attempt {data.get('attempt')}, tier {data.get('tier')}{resumed})"
    if kind == "llm_request":
        return f"calls model {data.get('model')} (step {data.get('step')}, {data.get('messages')} messages)"
    if kind == "llm_response":
        usage = data.get("usage") or {}
        calls = data.get("tool_calls") or []
        said = (f"{len(calls)} tool call(s): {', '.join(c.get('name', '?') for c in calls)}" if calls
                else f"answers {_short(data.get('text', ''))!r}")
        return (f"model replied: {usage.get('prompt_tokens', 0)} in / {usage.get('completion_tokens', 0)} out tokens,"
                f" {money(data.get('cost_usd'))}; {said}")
    if kind == "stream_chunk":
        return f"… {_short(data.get('text', ''))}" if verbose else None
    if kind == "tool_call":
        return f"→ {data.get('name')}({short_arguments(data.get('arguments'))})"
    if kind == "tool_result":
        status = "ok" if data.get("ok") else f"FAILED ({data.get('error_kind') or 'error'})"
        return f"← {data.get('name')} {status}: {_short(data.get('content', ''))}"
    if kind in {"spawn", "delegate"}:
        verb = "spawns" if kind == "spawn" else "delegates to"
        return f"{verb} {data.get('to')}: {_short(data.get('task', ''))}"
    if kind == "signal":
        return f"signals {data.get('to')}: {_short(data.get('message', ''))}"
    if kind == "file_change":
        if data.get("action") == "deleted":
            return f"deleted {data.get('path')}"
        return f"{data.get('action')} {data.get('path')} (v{data.get('version')}, {data.get('bytes')} bytes)"
    if kind == "retry":
        why = data.get("reason") or data.get("error") or ""
        return f"retry of the {data.get('what')} (attempt {data.get('attempt', '?')}) in {data.get('delay_s')} s: {_short(why)}"
    if kind == "escalation":
        models = (f" ({data['from_model']} → {data['to_model']})" if data.get("from_model") and data.get("to_model")
                  else "")
        return f"escalates tier {data.get('from')} → {data.get('to')}{models}"
    if kind == "budget_warning":
        return f"budget warning: {money(data.get('cost_usd'))} spent (warning at {money(data.get('warn_cost_usd'))})"
    if kind == "error":
        error_kind, message = data.get("kind"), str(data.get("message", ""))
        message = message.removeprefix(f"{error_kind}: ")  # provider errors start with their kind
        return f"ERROR in {data.get('where')} ({error_kind}): {_short(message, 120)}"
    if kind == "session_end":
        meta, failure = data.get("meta") or {}, data.get("failure")
        line = (f"session {data.get('status')} after {meta.get('duration_s', '?')} s, "
                f"{meta.get('tool_calls', 0)} tool call(s)")
        if failure:
            line += f" — {failure.get('kind')}: {_short(failure.get('message', ''), 100)}"
        return line
    if kind == "run_complete":
        return f"run {data.get('status')}" + (f": {_short(data['error'], 100)}" if data.get("error") else "")
    if kind == "output_invalid":
        return f"answer refused by its output schema (corrective turn {data.get('correction')}): " \
               f"{_short(data.get('errors', ''), 100)}"
    if kind == "loop_round":
        return f"loop {', '.join(data.get('steps') or [])}: round {data.get('round')} of at most {data.get('max_rounds')}"
    if kind == "loop_complete":
        return f"loop {', '.join(data.get('steps') or [])} done after {data.get('rounds')} round(s): {data.get('status')}"
    return f"{kind} {_short(data, 100)}"


def event_line(event: dict[str, Any], *, started: float, verbose: bool = False) -> str | None:
    text = describe_event(event, verbose=verbose)
    if text is None:
        return None
    return f"{time.monotonic() - started:6.1f}s #{event['seq']:<4} {event['agent'] or '-':<14} {text}"


def usage_rows(run: Run) -> list[tuple[str, str]]:
    """Tokens and cost, then the notice and error when there are any, and the result: the end of a summary."""
    rows = [("Tokens", f"{run.prompt_tokens} in / {run.completion_tokens} out"), ("Cost", money(run.cost_usd))]
    rows += [(label, value) for label, value in (("Notice", run.notice), ("Error", run.error)) if value]
    return rows + [("Result", run.result or "-")]


# -- the command ----------------------------------------------------------------------


class Command(BaseCommand):
    help = ("Start a run of an agent and follow it live (needs a running Celery worker). "
            "Exit code 0: succeeded, 1: failed, 2: cancelled, 3: still running at --timeout.")

    def add_arguments(self, parser):
        parser.add_argument("agent", help="slug of the agent")
        parser.add_argument("task", help="the task for the agent")
        parser.add_argument("--team", help="team slug (needed when there is more than one team)")
        parser.add_argument("--script", type=Path,
                            help="JSON file of turns for the scripted provider (agent slug → list of turns)")
        parser.add_argument("--follow", action=argparse.BooleanOptionalAction, default=True,
                            help="follow the run's events until it ends (default: yes)")
        parser.add_argument("--timeout", type=float, default=600.0,
                            help="stop following after this many seconds (the run goes on; default 600)")
        parser.add_argument("--worker-wait", type=float, default=3.0,
                            help="seconds to wait for a Celery worker to answer (default 3)")

    def handle(self, *args, agent: str, task: str, team: str | None, script: Path | None, follow: bool,
               timeout: float, worker_wait: float, **options):
        verbose = options.get("verbosity", 1) >= 2
        team_row = self._team(team)
        script_data = self._script(script) if script else None
        if not Agent.objects.filter(team=team_row, slug=agent).exists():
            raise CommandError(f"no agent {agent!r} in team {team_row.slug}")
        self._check_worker(worker_wait)
        try:
            run = run_start(team=team_row, agent=agent, input=task, script=script_data)
        except RunError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"Run {run.id} started: agent {agent} in team {team_row.slug}"
                          + (" (scripted)" if script_data is not None else ""))
        self.stdout.write(f"  API: /api/runs/{run.id}   events: /api/runs/{run.id}/events")
        if not follow:
            return
        finished = self._follow(run, timeout=timeout, verbose=verbose)
        run.refresh_from_db()
        self._summary(run)
        if not finished and run.status not in FINISHED_RUN_STATUSES:
            raise CommandError(f"run {run.id} is still {run.status} after {timeout:g} s; it goes on without us",
                               returncode=EXIT_TIMEOUT)
        if run.status == "cancelled":
            raise CommandError(f"run {run.id} was cancelled", returncode=EXIT_CANCELLED)
        if run.status != "succeeded":
            raise CommandError(f"run {run.id} {run.status}: {run.error or 'no error recorded'}",
                               returncode=EXIT_FAILED)

    # -- steps ---------------------------------------------------------------------

    def _team(self, slug: str | None) -> Team:
        if slug:
            team = Team.objects.filter(slug=slug).first()
            if team is None:
                raise CommandError(f"no team {slug!r}")
            return team
        teams = list(Team.objects.order_by("slug")[:20])
        if len(teams) == 1:
            return teams[0]
        if not teams:
            raise CommandError("there is no team yet: create one (e.g. `manage.py setup_demo`)")
        raise CommandError(f"name the team with --team (one of: {', '.join(t.slug for t in teams)})")

    def _script(self, path: Path) -> dict[str, Any]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return validate_script(data)
        except OSError as error:
            raise CommandError(f"cannot read {path}: {error.strerror or error}") from None
        except ValueError as error:  # JSON syntax or a bad turn (JSONDecodeError is a ValueError)
            raise CommandError(f"{path}: {error}") from None

    def _check_worker(self, wait: float) -> None:
        """A worker must consume the task queue, or the run would wait forever."""
        # The project's Celery app (mas_project/__init__.py loads it with the settings), not imported: the
        # composition root sits above every app.
        from celery import current_app as app

        queue = settings.CELERY_TASK_DEFAULT_QUEUE
        try:
            replies = app.control.inspect(timeout=max(0.5, wait)).active_queues() or {}
        except (OSError, KombuOperationalError) as error:  # broker down: say so rather than hang
            raise CommandError(f"cannot reach the Celery broker ({error}); is Redis running?") from None
        if not any(q.get("name") == queue for queues in replies.values() for q in queues or []):
            raise CommandError(
                f"no Celery worker answered within {wait:g} s on queue {queue!r}: start one with "
                f"`celery -A mas_project worker -Q {queue} --pool threads` (or `make run`) and try again"
            )

    def _follow(self, run: Run, *, timeout: float, verbose: bool) -> bool:
        """Print the run's events until its run_complete; False when the timeout comes first."""
        started = time.monotonic()
        deadline, after = started + timeout, 0
        while True:
            events = run_events(run=run, after=after)
            for event in events:
                payload = event_to_dict(event)
                line = event_line(payload, started=started, verbose=verbose)
                if line is not None:
                    self.stdout.write(line)
                after = event.seq
                if event.type == "run_complete":
                    return True
            if not events:
                if time.monotonic() > deadline:
                    return False
                time.sleep(POLL_S)

    def _summary(self, run: Run) -> None:
        sessions = list(Session.objects.filter(run=run).values_list("status", flat=True))
        by_status = ", ".join(f"{sessions.count(s)} {s}" for s in sorted(set(sessions)))
        tool_calls = Event.objects.filter(run=run, type="tool_call").count()
        files = WorkspaceFile.objects.filter(run=run).count()
        duration = run_duration_s(run)
        style = self.style.SUCCESS if run.status == "succeeded" else self.style.ERROR
        self.stdout.write("")
        self.write_rows([
            ("Status", style(run.status)),
            ("Duration", f"{duration if duration is not None else '-'} s"),
            ("Sessions", f"{len(sessions)}" + (f" ({by_status})" if sessions else "")),
            ("Tool calls", str(tool_calls)),
            *usage_rows(run)[:2],
            ("Files", str(files)),
            *usage_rows(run)[2:],
        ])

    def write_rows(self, rows: list[tuple[str, str]]) -> None:
        """``Label: value`` lines, the values aligned."""
        width = max(len(label) for label, _ in rows) + 2
        for label, value in rows:
            self.stdout.write(f"{label + ':':<{width}}{value}")
