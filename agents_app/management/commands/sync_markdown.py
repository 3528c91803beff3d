"""`manage.py sync_markdown`: the markdown mirror from a terminal (rules in definitions/sync.py)."""

from django.core.management.base import BaseCommand, CommandError

from mas_core.definitions.sync import markdown_sync
from agents_app.models import Team


class Command(BaseCommand):
    help = (
        "Import definitions changed on disk and export rows changed in the database, for one team. "
        "A definition changed on both sides since the last sync is a conflict: reported, nothing overwritten. "
        "A file deleted on disk keeps its row (reported); --export writes it again. "
        "--team is required unless exactly one team exists. "
        "Exits with status 1 on conflicts, invalid files or files deleted on disk, and with --check also "
        "when anything would change."
    )

    def add_arguments(self, parser):
        modes = parser.add_mutually_exclusive_group()
        modes.add_argument(
            "--import", dest="mode", action="store_const", const="import", help="only import files changed on disk"
        )
        modes.add_argument(
            "--export",
            dest="mode",
            action="store_const",
            const="export",
            help="only export rows changed in the database (also writes files deleted on disk again)",
        )
        modes.add_argument(
            "--check", dest="mode", action="store_const", const="check", help="write nothing; report what would change"
        )
        parser.add_argument("--team", help="slug of the team (required when there is more than one team)")

    def handle(self, *args, mode: str | None, team: str | None, **options):
        report = markdown_sync(team=self._team(team), mode=mode or "both")
        self.stdout.write(report.render())
        if report.unresolved:
            raise CommandError(
                f"{len(report.conflicts)} conflict(s), {len(report.errors)} invalid file(s), "
                f"{len(report.deleted_on_disk)} file(s) deleted on disk: see the report above"
            )
        if report.dry_run and not report.in_sync:
            raise CommandError("out of sync: run `manage.py sync_markdown` to import and export the changes above")

    def _team(self, slug: str | None) -> Team:
        if slug:
            team = Team.objects.filter(slug=slug).first()
            if team is None:
                raise CommandError(f"no team with slug {slug!r}")
            return team
        teams = list(Team.objects.order_by("slug")[:21])
        if len(teams) == 1:
            return teams[0]
        if not teams:
            raise CommandError("there is no team yet: create one (e.g. `manage.py setup_demo`) first")
        names = ", ".join(team.slug for team in teams[:20])
        raise CommandError(
            f"--team is required: there are {len(teams)}{'+' if len(teams) > 20 else ''} teams ({names})"
        )
