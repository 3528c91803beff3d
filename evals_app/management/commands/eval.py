"""``manage.py eval <dataset> [--agent-version N] [--compare-to M] [--min-pass 0.9] [--no-regressions]``: a CI gate.

Runs every case of the dataset as runs on the Celery workers (the same path as the API), waits for the
results, prints a line per case and check, the totals and — with ``--compare-to`` — the comparison with
that version of the agent, regressions first. Exit codes: 0 when the pass rate is at least
``--min-pass`` (default 1.0), 1 below it (or when the eval cannot start), 3 when ``--timeout`` ran out.

``--no-regressions`` gates on regressions alone: exit code 4 when a case that passed in the baseline (the
``--compare-to`` eval run, else the dataset's previous finished eval run) fails now, 0 otherwise; the pass
rate then gates only if ``--min-pass`` is given too.
"""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from agents_app.management.commands.run_agent import Command as RunAgentCommand
from evals_app.models import EvalRun
from evals_app.services import EvalError, eval_compare, eval_dataset_get, eval_run_start

POLL_S = 0.3
EXIT_BELOW, EXIT_TIMEOUT, EXIT_REGRESSION = 1, 3, 4
MARKS = {True: "PASS", False: "FAIL", None: "skip"}


def min_pass(value: str) -> float:
    number = float(value)
    if not 0 <= number <= 1:
        raise ValueError(value)
    return number


def previous_eval_run(eval_run: EvalRun) -> EvalRun | None:
    """The dataset's latest eval run that finished before ``eval_run`` started (same team), or None."""
    return (EvalRun.objects.filter(team_id=eval_run.team_id, dataset_slug=eval_run.dataset_slug, status="finished",
                                   created_at__lt=eval_run.created_at)
            .exclude(pk=eval_run.pk).order_by("-created_at", "-pk").first())


class Command(BaseCommand):
    help = ("Run an eval dataset against its agent (needs a running Celery worker); exit code 1 when the "
            "pass rate is below --min-pass, so a CI job can gate a change.")

    def add_arguments(self, parser):
        parser.add_argument("dataset", help="slug of the eval dataset")
        parser.add_argument("--team", help="team slug (needed when there is more than one team)")
        parser.add_argument("--agent-version", type=int, help="version of the agent under test (default: current)")
        parser.add_argument("--compare-to", type=int, help="also run this version of the agent and compare")
        parser.add_argument("--min-pass", type=min_pass, default=None,
                            help="the pass rate (0 to 1) below which the command fails (default 1.0; with "
                                 "--no-regressions, no pass rate gate unless given)")
        parser.add_argument("--no-regressions", action="store_true",
                            help="fail (exit code 4) only when a case that passed in the baseline fails now: "
                                 "the --compare-to eval run, else the dataset's previous finished eval run")
        parser.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for results")
        parser.add_argument("--worker-wait", type=float, default=3.0,
                            help="seconds to wait for a Celery worker to answer (default 3)")

    def handle(self, *args, dataset: str, team: str | None, agent_version: int | None, compare_to: int | None,
               min_pass: float | None, no_regressions: bool, timeout: float, worker_wait: float, **options):
        helper = RunAgentCommand(stdout=self.stdout, stderr=self.stderr)
        team_row = helper._team(team)
        helper._check_worker(worker_wait)
        try:
            row = eval_dataset_get(team=team_row, slug=dataset)
            baseline = (eval_run_start(team=team_row, dataset=row, agent_version=compare_to)
                        if compare_to is not None else None)
            eval_run = eval_run_start(team=team_row, dataset=row, agent_version=agent_version, baseline=baseline)
        except EvalError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"Eval {eval_run.id} of {row.slug} v{eval_run.dataset_version}: "
                          f"{eval_run.agent or eval_run.workflow}"
                          + (f" v{eval_run.agent_version}" if eval_run.agent_version else "")
                          + (f", compared with v{baseline.agent_version} (eval {baseline.id})" if baseline else ""))
        deadline = time.monotonic() + timeout
        waiting = [eval_run] + ([baseline] if baseline else [])
        while any(EvalRun.objects.filter(pk=e.pk, status="running").exists() for e in waiting):
            if time.monotonic() > deadline:
                raise CommandError(f"eval {eval_run.id} still running after {timeout:g} s",
                                   returncode=EXIT_TIMEOUT)
            time.sleep(POLL_S)
        eval_run.refresh_from_db()
        self._cases(eval_run)
        if baseline is not None:
            baseline.refresh_from_db()
            self._comparison(eval_run, baseline)
        elif no_regressions:
            baseline = previous_eval_run(eval_run)
            if baseline is not None:
                self._comparison(eval_run, baseline)
        totals = eval_run.totals
        helper.write_rows([
            ("Pass rate", f"{totals['pass_rate']:.0%} ({totals['passed']} of {totals['cases']} cases)"),
            ("Cost", f"${totals['cost_usd']}" + (f" (judge ${totals['judge_cost_usd']})"
                                                  if totals.get("judge_calls") else "")),
            ("Tokens", str(totals["tokens"])),
            ("Duration", f"p50 {totals['duration_p50_s']} s, p95 {totals['duration_p95_s']} s"),
        ])
        if baseline is not None:
            version = f", v{baseline.agent_version}" if baseline.agent_version else ""
            helper.write_rows([("Baseline", f"{baseline.totals['pass_rate']:.0%} (eval {baseline.id}{version})")])
        if no_regressions:
            self._regressions_gate(eval_run, baseline)
            if min_pass is None:
                return
        min_pass = 1.0 if min_pass is None else min_pass
        if totals["pass_rate"] < min_pass:
            raise CommandError(f"pass rate {totals['pass_rate']:.0%} is below --min-pass {min_pass:.0%}",
                               returncode=EXIT_BELOW)
        self.stdout.write(self.style.SUCCESS(f"pass rate {totals['pass_rate']:.0%} meets --min-pass {min_pass:.0%}"))

    def _regressions_gate(self, eval_run: EvalRun, baseline: EvalRun | None) -> None:
        if baseline is None:
            self.stdout.write("no earlier eval run of this dataset to compare with: no regression possible")
            return
        regressed = [row["case_id"] for row in eval_compare(eval_run=eval_run, baseline=baseline)
                     if row["change"] == "regression"]
        if regressed:
            raise CommandError(f"{len(regressed)} case(s) passed in eval {baseline.id} and fail now: "
                               f"{', '.join(regressed)}", returncode=EXIT_REGRESSION)
        self.stdout.write(self.style.SUCCESS(f"no regression against eval {baseline.id}"))

    def _cases(self, eval_run: EvalRun) -> None:
        for case in eval_run.cases.all():
            style = self.style.SUCCESS if case.status == "passed" else self.style.ERROR
            self.stdout.write(f"{style(case.status.upper()):<6} {case.case_id} (score {case.score:g}, "
                              f"run {case.run_id or '-'})")
            for check in case.checks:
                self.stdout.write(f"    {MARKS[check['passed']]} {check['type']}: {check['reason']}")

    def _comparison(self, eval_run: EvalRun, baseline: EvalRun) -> None:
        if baseline.agent_version and eval_run.agent_version:
            self.stdout.write(f"Comparison, v{baseline.agent_version} → v{eval_run.agent_version} "
                              "(regressions first):")
        else:
            self.stdout.write(f"Comparison with eval {baseline.id} (regressions first):")
        for row in eval_compare(eval_run=eval_run, baseline=baseline):
            before = (row["before"] or {}).get("status", "-")
            after = (row["after"] or {}).get("status", "-")
            self.stdout.write(f"  {row['change'].upper():<14} {row['case_id']}: {before} → {after}")
