"""The page of an invitation link (``mas_core.teams.invitation_create``): join the team, signed in or with a
new account chosen there.

A team admin hands the link over; whoever opens it joins with the invitation's
role, once. Signed in: one button. Not signed in: sign in first (the sign-in
page comes back here), or choose a username and password for a new account —
the account and the membership are made together or not at all.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.forms import UserCreationForm
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters

from mas_core.teams import (
    INVALID_INVITATION,
    InvitationError,
    invitation_accept,
    invitation_accept_new_account,
    invitation_pending,
)


@never_cache
@sensitive_post_parameters("password1", "password2")
def invitation_view(request, token: str):
    invitation = invitation_pending(token)
    if invitation is None:
        return render(request, "registration/invitation.html", {"error": INVALID_INVITATION}, status=404)
    form = UserCreationForm(request.POST or None) if not request.user.is_authenticated else None
    error = ""
    if request.method == "POST":
        try:
            if form is None:
                membership = invitation_accept(token=token, user=request.user)
            elif form.is_valid():
                user = invitation_accept_new_account(token=token, username=form.cleaned_data["username"],
                                                     password=form.cleaned_data["password1"])
                login(request, user, backend="django.contrib.auth.backends.ModelBackend")
                membership = user.mas_memberships.get(team=invitation.team)
            else:
                membership = None
        except InvitationError as refused:
            error = str(refused)
        else:
            if membership is not None:
                messages.success(request, f"You joined {membership.team.name} as {membership.role}.")
                return redirect("/admin/")
    return render(request, "registration/invitation.html", {
        "invitation": invitation, "form": form, "error": error,
        "sign_in": f"{reverse('login')}?next={request.path}",
    }, status=400 if error else 200)
