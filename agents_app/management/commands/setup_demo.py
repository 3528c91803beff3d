"""Prepare the demo: team `demo` on a copy of ./defs, user `demo` (password printed once).

The team works on a folder of its own (MAS_DEFS_ROOT/demo, i.e. var/defs/demo
by default), seeded from the repository's defs/ when it does not exist yet or
is empty: what the team edits in the admin or the API lands there, never in
tracked files, and running the command again keeps those edits.
"""

import secrets
import shutil
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from mas_core.definitions import storage
from mas_core.definitions.sync import markdown_sync
from agents_app.models import Team
from mas_core.teams import membership_set, team_create


class Command(BaseCommand):
    help = (
        "Create team `demo` with its definitions in MAS_DEFS_ROOT/demo (seeded from ./defs when that folder "
        "does not exist yet or is empty), an admin user `demo`, and import the definitions."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--defs-dir", default="",
            help="folder of the demo team's markdown (default: MAS_DEFS_ROOT/demo); seeded from ./defs when empty",
        )

    def handle(self, *args, defs_dir: str, **options):
        User = get_user_model()
        with transaction.atomic():
            team = team_create(slug="demo", name="Demo", defs_dir=defs_dir)
            wanted = defs_dir if defs_dir else ("" if self._on_shipped(team) else team.defs_dir)
            # A demo set up before it had a copy worked on the repository's defs/ itself: moved to the copy.
            if team.defs_dir != wanted:
                Team.objects.filter(pk=team.pk).update(defs_dir=wanted)
                team.defs_dir = wanted
            root = storage.team_defs_dir(team)
            if storage.read_only_reason(root):
                raise CommandError(f"the demo team's folder would be {root}: {storage.read_only_reason(root)}")
            user = User.objects.filter(username="demo").first()
            password = None
            if user is None:
                password = secrets.token_urlsafe(12)
                user = User.objects.create_user(username="demo", password=password)
            membership_set(team=team, user=user, role="admin")
        if root.is_dir() and any(root.iterdir()):
            self.stdout.write(f"The demo team's definitions: {root} (kept as the team left them).")
        else:
            _seed(root)
            self.stdout.write(f"The demo team's definitions: {root} (copied from defs/).")
        report = markdown_sync(team=team, mode="import", author=user)
        self.stdout.write(report.render())
        if report.errors or report.conflicts:
            raise CommandError("the demo definitions did not import cleanly (see above)")
        if password:
            self.stdout.write(self.style.SUCCESS(f"Created admin user demo with password: {password}"))
            self.stdout.write("  (printed only this once; change it with `python manage.py changepassword demo`)")
        else:
            self.stdout.write("Admin user demo exists (its password was printed when it was created).")

    @staticmethod
    def _on_shipped(team: Team) -> bool:
        return storage.read_only_reason(storage.team_defs_dir(team)) is not None


def _seed(root: Path) -> None:
    """Copy the shipped examples to ``root``, whole or not at all (a half copy would be kept as the team's)."""
    staging = root.with_name(f".{root.name}.seeding")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(storage.shipped_defs_dir(), staging)
    if root.is_dir():
        root.rmdir()  # empty: checked by the caller
    staging.rename(root)
