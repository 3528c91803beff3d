"""Prepare the demo: team `demo` on ./defs, user `demo` (password printed once)."""

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from agents_app.definitions.sync import markdown_sync
from agents_app.services import membership_set, team_create


class Command(BaseCommand):
    help = "Create team `demo` (definitions in ./defs), an admin user `demo`, and import the definitions."

    def add_arguments(self, parser):
        parser.add_argument("--defs-dir", default="defs", help="folder of the demo team's markdown (default: defs)")

    def handle(self, *args, defs_dir: str, **options):
        User = get_user_model()
        with transaction.atomic():
            team = team_create(slug="demo", name="Demo", defs_dir=defs_dir)
            user = User.objects.filter(username="demo").first()
            password = None
            if user is None:
                password = secrets.token_urlsafe(12)
                user = User.objects.create_user(username="demo", password=password)
            membership_set(team=team, user=user, role="admin")
        report = markdown_sync(team=team, mode="import", author=user)
        self.stdout.write(report.render() if hasattr(report, "render") else str(report))
        if report.errors or report.conflicts:
            raise CommandError("the demo definitions did not import cleanly (see above)")
        if password:
            self.stdout.write(self.style.SUCCESS(f"Created admin user demo with password: {password}"))
            self.stdout.write("  (printed only this once; change it with `python manage.py changepassword demo`)")
        else:
            self.stdout.write("Admin user demo exists (its password was printed when it was created).")
