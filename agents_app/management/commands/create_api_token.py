"""Issue an API token: ``create_api_token <username> --team <slug> [--role …] [--name …]``.

The token is printed once, alone on the last line of stdout, so scripts can
take it with ``tail -n 1``; only its SHA-256 is stored.
"""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agents_app.models import Membership, Role, Team
from mas_core.teams import api_token_create


class Command(BaseCommand):
    help = "Create an API token for a member of a team; prints the token once (last line of stdout)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--team", required=True, help="slug of the team the token acts in")
        parser.add_argument(
            "--role",
            choices=Role.values,
            help="role of the token (default: the user's role in the team; never more than it)",
        )
        parser.add_argument("--name", default="", help="a label to recognise the token by")

    def handle(self, *args, username: str, team: str, role: str | None, name: str, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        team_row = Team.objects.filter(slug=team).first()
        if team_row is None:
            raise CommandError(f"no team {team!r}")
        if not Membership.objects.filter(team=team_row, user=user).exists():
            raise CommandError(f"{username} is not a member of team {team}: add a membership first (admin → Memberships)")
        try:
            issued = api_token_create(user=user, team=team_row, role=role, name=name[:100])
        except ValueError as error:  # e.g. a role above the membership's
            raise CommandError(str(error)) from None
        self.stdout.write(
            f"API token for {username} in team {team} (role {issued.row.role}, starts {issued.row.prefix}). "
            "It is shown only now; store it safely:"
        )
        self.stdout.write(issued.token)
