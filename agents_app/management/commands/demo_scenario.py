"""``manage.py demo_scenario``: start the demo's second scenario, the one a person takes part in.

`make demo` runs it after the research workflow. The launch lead (``defs/agents/launch-lead.md``)
asks a person who the launch note is for, delegates to a market analyst and a risk analyst at the
same time, writes its plan once a person approves the write, and stores a memory. With no model
provider configured every turn replays the bundled demo recording (each answer says it is one).
The run waits for a person twice: its question and its approval show on the dashboard's
"Needs you", in the approvals inbox and on the run's monitor page.

Running the command again while the scenario's run is still open starts nothing: it prints that
run's links again.
"""

from __future__ import annotations

from django.core.management.base import CommandError

from agents_app.execution.errors import RunError
from agents_app.execution.runs import run_start
from agents_app.management.commands.run_agent import Command as RunAgentCommand
from agents_app.models import Agent, Run
from agents_app.models.runs import FINISHED_RUN_STATUSES

AGENT = "launch-lead"
TASK = ("Plan the launch note of MAS's beta: who it is for, the three messages it carries, and the risks of the "
        "launch with what the team does about each.")


class Command(RunAgentCommand):
    help = ("Start the demo's second scenario (the launch lead: a question, two specialists at once, an approval, "
            "files and a memory) unless its run is still open; print where to answer it.")

    def add_arguments(self, parser):
        parser.add_argument("--team", default="demo", help="team slug (default: demo)")
        parser.add_argument("--base-url", default="",
                            help="where the server answers (e.g. http://127.0.0.1:8000), for the links")
        parser.add_argument("--worker-wait", type=float, default=3.0,
                            help="seconds to wait for a Celery worker to answer (default 3)")

    def handle(self, *args, team: str, base_url: str, worker_wait: float, **options):
        team_row = self._team(team)
        if not Agent.objects.filter(team=team_row, slug=AGENT).exists():
            raise CommandError(f"team {team_row.slug} has no agent {AGENT!r} (it comes with defs/: "
                               "`manage.py setup_demo` loads it)")
        run = (Run.objects.filter(team=team_row, agent=AGENT, is_eval=False)
               .exclude(status__in=FINISHED_RUN_STATUSES).order_by("-created_at").first())
        if run is None:
            self._check_worker(worker_wait)
            try:
                run = run_start(team=team_row, agent=AGENT, input=TASK)
            except RunError as error:
                raise CommandError(str(error)) from None
            self.stdout.write(f"The launch scenario started: run {run.id} of agent {AGENT} in team {team_row.slug}.")
        else:
            self.stdout.write(f"The launch scenario's run {run.id} is still {run.status}: nothing started.")
        base = base_url.rstrip("/")
        self.stdout.write("  It asks you a question, then waits for your approval of its plan. Answer both under")
        self.stdout.write(f"  \"Needs you\" on the dashboard {base}/admin/ or on its monitor page {base}/runs/{run.id}/")
