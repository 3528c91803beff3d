"""The page of a one-time set-password link (``mas_core.teams.password_link_create``): Django's password reset
confirmation, saying whose account it is and in which teams.

This server sends no mail, so there is no "forgot my password" form: a team
admin makes a new link (Memberships, "New set-password link") and hands it
over. A link that no longer works says so, and who to ask.
"""

from __future__ import annotations

from django.contrib.auth.views import PasswordResetConfirmView

from mas_core.permissions import memberships
from mas_core.teams import set_password_links


class SetPasswordView(PasswordResetConfirmView):
    token_generator = set_password_links

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        # Only a link that works names its account: a dead one must not tell who an id belongs to.
        if context.get("validlink"):
            context["account"] = self.user
            context["memberships"] = sorted(memberships(self.user), key=lambda m: m.team.slug)
        return context
