"""``manage.py run_workflow <slug> --input key=value ...``: start a workflow and watch its steps.

The run starts through ``workflows_app.services.workflow_run_start`` (as the
API does); its events are read back every ~0.2 s. Each step's start, retry,
end or skip is a line with the share of steps done and the tokens and cost so
far; ``-v 2`` adds every kernel event. A table of the steps closes it.
Exit codes: 0 every step succeeded, 1 the run failed, could not start or a
step failed (even when the workflow went on), 2 cancelled, 3 still running
when ``--timeout`` ran out.
"""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path

from django.core.management.base import CommandError

from mas_core.events import event_to_dict
from agents_app.execution.errors import RunError
from agents_app.management.commands.run_agent import (
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_TIMEOUT,
    POLL_S,
    Command as RunAgentCommand,
    _short,
    event_line,
    money,
    usage_rows,
)
from agents_app.models import Run
from agents_app.models.runs import FINISHED_RUN_STATUSES
from agents_app.selectors_runs import run_duration_s, run_events
from workflows_app.services import workflow_run_start, workflow_steps

STEP_MARKS = {"step_start": "▶", "step_complete": "✓", "step_failed": "✗", "step_retry": "↻", "step_skipped": "–"}


class Command(RunAgentCommand):
    help = ("Start a run of a workflow and follow its steps live (needs a running Celery worker). "
            "Exit code 0: every step succeeded, 1: failed or a step failed, 2: cancelled, 3: still running.")

    def add_arguments(self, parser):
        parser.add_argument("workflow", help="slug of the workflow")
        parser.add_argument("--input", action="append", default=[], metavar="KEY=VALUE",
                            help="a workflow input (repeat for each)")
        parser.add_argument("--team", help="team slug (needed when there is more than one team)")
        parser.add_argument("--script", type=Path,
                            help="JSON file of turns for the scripted provider (agent slug → list of turns)")
        parser.add_argument("--timeout", type=float, default=1800.0,
                            help="stop following after this many seconds (the run goes on; default 1800)")
        parser.add_argument("--worker-wait", type=float, default=3.0,
                            help="seconds to wait for a Celery worker to answer (default 3)")
        parser.add_argument("--base-url", default="",
                            help="where the server answers (e.g. http://127.0.0.1:8000), for the monitor's link")

    def handle(self, *args, workflow: str, input: list[str], team: str | None, script: Path | None,
               timeout: float, worker_wait: float, base_url: str = "", **options):
        verbose = options.get("verbosity", 1) >= 2
        team_row = self._team(team)
        inputs = self._inputs(input)
        script_data = self._script(script) if script else None
        self._check_worker(worker_wait)
        try:
            run = workflow_run_start(team=team_row, workflow=workflow, inputs=inputs, script=script_data)
        except RunError as error:
            raise CommandError(str(error)) from None
        total = len(workflow_steps(run) or [])
        self.stdout.write(f"Workflow {workflow} started: run {run.id} in team {team_row.slug}, {total} steps"
                          + (" (scripted)" if script_data is not None else ""))
        base = base_url.rstrip("/")
        self.stdout.write(f"  monitor: {base}/runs/{run.id}/   API: {base}/api/runs/{run.id}")
        finished = self._follow_steps(run, total=total, timeout=timeout, verbose=verbose)
        run.refresh_from_db()
        steps = workflow_steps(run) or []
        self._table(run, steps)
        if not finished and run.status not in FINISHED_RUN_STATUSES:
            raise CommandError(f"run {run.id} is still {run.status} after {timeout:g} s; it goes on without us",
                               returncode=EXIT_TIMEOUT)
        if run.status == "cancelled":
            raise CommandError(f"run {run.id} was cancelled", returncode=EXIT_CANCELLED)
        failed = [step["id"] for step in steps if step["status"] != "succeeded"]
        if run.status != "succeeded" or failed:
            raise CommandError(f"run {run.id} {run.status}: {run.error or 'no error recorded'}",
                               returncode=EXIT_FAILED)

    def _inputs(self, pairs: list[str]) -> dict[str, str]:
        inputs: dict[str, str] = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise CommandError(f"--input {pair!r}: write it as key=value")
            inputs[key.strip()] = value
        return inputs

    def _follow_steps(self, run: Run, *, total: int, timeout: float, verbose: bool) -> bool:
        """A line per step event (every event with -v 2) until run_complete; False when the timeout comes first."""
        started = time.monotonic()
        deadline, after = started + timeout, 0
        done: set[str] = set()
        tokens, cost = 0, Decimal(0)
        while True:
            events = run_events(run=run, after=after)
            for event in events:
                payload = event_to_dict(event)
                after, data = event.seq, payload["data"]
                if event.type == "llm_response":
                    usage = data.get("usage") or {}
                    tokens += int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
                    cost += Decimal(str(data.get("cost_usd") or 0))
                if event.type in STEP_MARKS:
                    if event.type in {"step_complete", "step_skipped"} or (
                            event.type == "step_failed" and not data.get("retry")):
                        done.add(data["step"])
                    self.stdout.write(self._step_line(event.type, payload, started=started, done=len(done),
                                                      total=total, tokens=tokens, cost=cost))
                elif verbose or event.type in {"workflow_stopped", "run_complete", "plan_created", "loop_round",
                                               "loop_complete"}:
                    line = event_line(payload, started=started, verbose=verbose)
                    if line is not None:
                        self.stdout.write(line)
                if event.type == "run_complete":
                    return True
            if not events:
                if time.monotonic() > deadline:
                    return False
                time.sleep(POLL_S)

    @staticmethod
    def _step_line(kind: str, event: dict, *, started: float, done: int, total: int, tokens: int,
                   cost: Decimal) -> str:
        data = event["data"]
        what = {
            "step_start": f"running (attempt {data.get('attempt')})",
            "step_complete": "done",
            "step_failed": f"failed (attempt {data.get('attempt')}): {_short(data.get('error', ''), 80)}",
            "step_retry": f"retry {data.get('attempt')} in {data.get('delay_s')} s"
                          + (f" at tier {data['tier']}" if data.get("tier") else ""),
            "step_skipped": f"skipped: {_short(data.get('reason', ''), 80)}",
        }[kind]
        if "loop" in data:
            what = f"round {data.get('round')}, {what}"
        share = f"{100 * done // total:3d}%" if total else "  -%"
        return (f"{time.monotonic() - started:6.1f}s [{share} {done}/{total}] {STEP_MARKS[kind]} "
                f"{data.get('step')} ({event['agent'] or '-'}) {what} · {tokens:,} tokens · {money(cost)}")

    def _table(self, run: Run, steps: list[dict]) -> None:
        style = self.style.SUCCESS if run.status == "succeeded" and all(
            s["status"] == "succeeded" for s in steps) else self.style.ERROR
        rows = [("step", "agent", "status", "tries", "tokens", "cost")] + [
            (s["id"], s["agent"], s["status"], str(s["attempts"]), f"{s['prompt_tokens'] + s['completion_tokens']:,}",
             money(s["cost_usd"])) for s in steps]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        self.stdout.write("")
        for index, row in enumerate(rows):
            self.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
            if index == 0:
                self.stdout.write("  ".join("-" * width for width in widths))
        succeeded = sum(s["status"] == "succeeded" for s in steps)
        duration = run_duration_s(run)
        self.stdout.write("")
        self.write_rows([("Status", f"{style(run.status)} — {succeeded}/{len(steps)} steps succeeded"),
                         ("Duration", f"{duration if duration is not None else '-'} s"), *usage_rows(run)])
