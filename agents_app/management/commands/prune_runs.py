"""``manage.py prune_runs [--older-than-days N]``: drop events, checkpoints and files of old finished runs."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from agents_app.retention import runs_prune


class Command(BaseCommand):
    help = ("Delete the events, session checkpoints and workspace files of runs that finished more than N days "
            "ago (default MAS_RETENTION_DAYS); the runs and their sessions' outcomes stay.")

    def add_arguments(self, parser):
        parser.add_argument("--older-than-days", type=float, default=None)

    def handle(self, *args, older_than_days=None, **options):
        days = settings.MAS_RETENTION_DAYS if older_than_days is None else older_than_days
        if days <= 0:
            raise CommandError("--older-than-days must be more than 0")
        pruned = runs_prune(older_than_days=days)
        self.stdout.write(f"Pruned {pruned.runs} run(s) finished more than {days:g} day(s) ago: {pruned.events} "
                          f"event(s), {pruned.checkpoints} checkpoint(s), {pruned.files} file(s) deleted.")
