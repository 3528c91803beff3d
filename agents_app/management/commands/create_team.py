"""Create a team and its first admin: ``create_team <slug> --admin <username> [--name …]``.

No superuser is needed afterwards: the team's admin adds people, changes
roles, removes members and revokes tokens in the admin. A user that does not
exist yet is created without a password, and the command prints the one-time
link where its owner sets one. Running it again changes nothing already done.
``--allow-stdio`` grants the team stdio MCP servers (a command run on the
server, in the sandbox), ``--deny-stdio`` takes the grant back: the operator's
decision, never implied by the admin role.
"""

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.core.validators import validate_slug
from django.db import transaction

from agents_app.models import Team
from mas_core.teams import membership_set, password_link_create, team_create, user_create


class Command(BaseCommand):
    help = "Create a team and make a user (created when missing, with a one-time set-password link) its admin."

    def add_arguments(self, parser):
        parser.add_argument("slug", help="the team's slug (letters, digits, - and _)")
        parser.add_argument("--admin", required=True, help="username of the team's admin; created when missing")
        parser.add_argument("--name", default="", help="the team's display name (default: its slug)")
        grant = parser.add_mutually_exclusive_group()
        grant.add_argument("--allow-stdio", action="store_true",
                           help="let the team's admins create stdio MCP servers (commands run in the sandbox)")
        grant.add_argument("--deny-stdio", action="store_true", help="take that grant back")
        parser.add_argument(
            "--site", default="http://127.0.0.1:8000",
            help="address of this server, to print the set-password link in full (default: %(default)s)",
        )

    def handle(self, *args, slug: str, admin: str, name: str, site: str, allow_stdio: bool, deny_stdio: bool,
               **options):
        User = get_user_model()
        try:
            validate_slug(slug)
            if len(slug) > Team._meta.get_field("slug").max_length:
                raise ValidationError("too long")
            User.username_validator(admin)
        except ValidationError as error:
            raise CommandError(f"not a valid slug or username: {' '.join(error.messages)}") from None
        with transaction.atomic():
            existed = Team.objects.filter(slug=slug).exists()
            team = team_create(slug=slug, name=name[:200],
                               stdio_mcp_allowed=True if allow_stdio else False if deny_stdio else None)
            user = User.objects.filter(username=admin).first()
            link = ""
            if user is None:
                user = user_create(username=admin)
                link = password_link_create(user=user)
            membership_set(team=team, user=user, role="admin")
        self.stdout.write(f"Team {team.slug} ({'existed' if existed else 'created'}); admin: {user.username}; "
                          f"stdio MCP servers {'allowed' if team.stdio_mcp_allowed else 'not allowed'}.")
        if link:
            self.stdout.write(
                f"New user {user.username}: set its password once at this link (it works until the password is set):"
            )
            self.stdout.write(site.rstrip("/") + link)
        else:
            self.stdout.write(f"{user.username} already had an account: they sign in with their password.")
