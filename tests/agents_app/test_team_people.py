"""A team and its people without a superuser: ``create_team``, team admins adding accounts, set-password links."""

from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from agents_app.models import ApiToken, Membership, Team
from mas_core.models import PasswordLinkNonce
from mas_core.teams import (
    api_token_authenticate,
    api_token_create,
    membership_add,
    membership_set,
    password_link_create,
    password_link_pending,
    user_create,
)
from tests.agents_app.test_admin_teams import group_names, url
from tests.agents_app.test_admin_definitions import client_for

User = get_user_model()
LINK_RE = re.compile(r"/accounts/reset/([A-Za-z0-9_-]+)/([a-z0-9]+-[a-f0-9]+)/")
NEW_PASSWORD = "tide-pools-at-dawn-42"


def set_password(link: str, password: str = NEW_PASSWORD) -> Client:
    """Follow a one-time link as its owner would: open it, then post the new password twice."""
    client = Client()
    opened = client.get(link)
    # Django swaps the token for a session marker and redirects to .../set-password/.
    assert opened.status_code == 302, opened.status_code
    form_url = opened["Location"]
    assert form_url.endswith("/set-password/")
    done = client.post(form_url, {"new_password1": password, "new_password2": password})
    assert done.status_code == 302 and done["Location"] == reverse("password_reset_complete"), done.status_code
    return client


# -- services ------------------------------------------------------------------------


def test_membership_add_new_account_has_no_password_until_the_link_is_used(team_a, team_b):
    added = membership_add(team=team_a, username="carol", role="viewer", new_account=True)
    carol = User.objects.get(username="carol")
    assert (added.membership.team, added.membership.user, added.membership.role) == (team_a, carol, "viewer")
    assert not carol.has_usable_password() and carol.is_staff and carol.is_active
    assert group_names(carol) == {"MAS viewer"}
    assert not Membership.objects.filter(team=team_b).exists()
    match = LINK_RE.fullmatch(added.password_link)
    assert match is not None, added.password_link
    set_password(added.password_link)
    carol.refresh_from_db()
    assert carol.check_password(NEW_PASSWORD)
    # One time only: the same link now leads to "invalid link", and the password stays.
    again = Client().get(added.password_link, follow=True)
    assert again.context["validlink"] is False
    carol.refresh_from_db()
    assert carol.check_password(NEW_PASSWORD)


def test_membership_add_existing_user_keeps_their_password_and_gets_no_link(team_a, team_b, make_member):
    dave = make_member(team_b, "editor", username="dave")
    added = membership_add(team=team_a, username="dave", role="operator")
    assert added.password_link == ""
    dave.refresh_from_db()
    assert dave.check_password("pw-for-tests-1")
    assert dict(Membership.objects.filter(user=dave).values_list("team__slug", "role")) == {
        "alpha": "operator", "beta": "editor"}


@pytest.mark.parametrize(("username", "role", "new_account", "message"), [
    ("nobody", "viewer", False, "no user nobody"),
    ("erin", "viewer", True, "a user erin already exists; add them as an existing user"),
    ("erin", "viewer", False, "erin is already a member of alpha; change their role instead"),
    ("frank", "owner", True, "unknown role 'owner'"),
])
def test_membership_add_refusals_change_nothing(team_a, make_member, username, role, new_account, message):
    make_member(team_a, "editor", username="erin")
    users_before = set(User.objects.values_list("username", flat=True))
    with pytest.raises(ValueError) as error:
        membership_add(team=team_a, username=username, role=role, new_account=new_account)
    assert str(error.value) == message
    assert set(User.objects.values_list("username", flat=True)) == users_before
    assert list(Membership.objects.filter(team=team_a).values_list("user__username", "role")) == [("erin", "editor")]


def test_a_password_link_of_a_user_with_a_password_stops_once_it_changes(db):
    user = user_create(username="gina", password="pw-for-tests-1")
    link = password_link_create(user=user)
    user.set_password("another-pw-for-tests-2")
    user.save()
    assert Client().get(link, follow=True).context["validlink"] is False


# -- the admin: a team admin adds people -----------------------------------------------


def superuser_client() -> Client:
    return client_for(User.objects.create_superuser("root", password="pw-for-tests-1"))


def test_a_superuser_adds_a_new_account_and_sees_its_link_once(team_a, team_b):
    client = superuser_client()
    response = client.post(url("membership", "add"),
                           {"team": team_a.pk, "username": "hana", "new_account": "on", "role": "editor"}, follow=True)
    assert response.status_code == 200
    body = response.content.decode()
    [(uidb64, token)] = LINK_RE.findall(body)
    hana = User.objects.get(username="hana")
    assert f"http://testserver/accounts/reset/{uidb64}/{token}/" in body
    assert Membership.objects.get(user=hana).team == team_a and Membership.objects.get(user=hana).role == "editor"
    assert not Membership.objects.filter(team=team_b).exists()
    # Not on the list; on the member's page (for the admins of the team) until it is used (issue 27, point 3).
    membership = Membership.objects.get(user=hana)
    assert token not in client.get(url("membership", "changelist")).content.decode()
    assert LINK_RE.findall(client.get(url("membership", "change", membership.pk)).content.decode()) == [
        (uidb64, token)]
    member = set_password(f"/accounts/reset/{uidb64}/{token}/")
    assert LINK_RE.findall(client.get(url("membership", "change", membership.pk)).content.decode()) == []
    assert member.post("/admin/login/", {"username": "hana", "password": NEW_PASSWORD}).status_code == 302
    assert member.get(reverse("admin:agents_app_agent_add")).status_code == 200  # an editor adds agents


def test_a_superuser_adding_an_existing_user_shows_no_link(team_a):
    user_create(username="ivan", password="pw-for-tests-1")
    client = superuser_client()
    response = client.post(url("membership", "add"), {"team": team_a.pk, "username": "ivan", "role": "viewer"},
                           follow=True)
    assert response.status_code == 200
    assert LINK_RE.findall(response.content.decode()) == []
    assert Membership.objects.get(team=team_a, user__username="ivan").role == "viewer"
    assert User.objects.get(username="ivan").check_password("pw-for-tests-1")


@pytest.mark.parametrize(("username", "error"), [
    ("jack", "A user jack already exists: untick New account to add them."),
    ("no spaces please", "Enter a valid username. This value may contain only letters, numbers, and @/./+/-/_ "
                         "characters."),
])
def test_new_account_form_errors(team_a, username, error):
    user_create(username="jack", password="pw-for-tests-1")
    client = superuser_client()
    users_before = User.objects.count()
    response = client.post(url("membership", "add"),
                           {"team": team_a.pk, "username": username, "new_account": "on", "role": "viewer"})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["username"] == [error]
    assert User.objects.count() == users_before
    assert not Membership.objects.filter(user__username=username).exists()


@pytest.mark.parametrize("role", ["viewer", "editor", "operator", "admin"])
def test_a_member_who_is_not_a_superuser_cannot_add_accounts_by_username(team_a, make_member, role):
    client = client_for(make_member(team_a, role))
    response = client.post(url("membership", "add"),
                           {"team": team_a.pk, "username": "lena", "new_account": "on", "role": "admin"})
    assert response.status_code == 403
    assert not User.objects.filter(username="lena").exists()


def test_team_admin_revokes_own_teams_tokens_only(team_a, team_b, make_member):
    colleague = make_member(team_a, "editor")
    outsider = make_member(team_b, "editor")
    ours = api_token_create(user=colleague, team=team_a)
    theirs = api_token_create(user=outsider, team=team_b)
    client = client_for(make_member(team_a, "admin"))
    response = client.post(url("apitoken", "changelist"),
                           {"action": "revoke", "_selected_action": [ours.row.pk, theirs.row.pk]})
    assert response.status_code == 302
    assert api_token_authenticate(ours.token) is None
    assert api_token_authenticate(theirs.token).pk == theirs.row.pk
    assert ApiToken.objects.get(pk=theirs.row.pk).revoked_at is None


# -- create_team ---------------------------------------------------------------------------


def run_command(*argv: str) -> list[str]:
    out = StringIO()
    call_command(*argv, stdout=out)
    return out.getvalue().splitlines()


def test_create_team_with_a_new_admin_prints_a_link_that_signs_them_in(db):
    lines = run_command("create_team", "research", "--admin", "alice", "--name", "Research",
                        "--site", "http://mas.example:8000/")
    assert lines[:2] == ["Team research (created); admin: alice; stdio MCP servers not allowed.",
                         "New user alice: set its password once at this link (it works until the password is set):"]
    assert len(lines) == 3 and lines[2].startswith("http://mas.example:8000/accounts/reset/")
    team = Team.objects.get(slug="research")
    alice = User.objects.get(username="alice")
    assert (team.name, list(Membership.objects.filter(team=team).values_list("user__username", "role"))) == (
        "Research", [("alice", "admin")])
    assert not alice.has_usable_password() and not alice.is_superuser and alice.is_staff
    set_password(lines[2].removeprefix("http://mas.example:8000"))
    client = Client()
    assert client.post("/admin/login/", {"username": "alice", "password": NEW_PASSWORD}).status_code == 302
    assert client.get(url("invitation", "add")).status_code == 200  # she invites people herself
    # Again: nothing changes, no new link, her password stays.
    assert run_command("create_team", "research", "--admin", "alice") == [
        "Team research (existed); admin: alice; stdio MCP servers not allowed.",
        "alice already had an account: they sign in with their password."]
    alice.refresh_from_db()
    assert alice.check_password(NEW_PASSWORD)
    assert Team.objects.get(slug="research").name == "Research"
    assert Membership.objects.filter(team=team).count() == 1


def test_create_team_makes_an_existing_user_admin_of_the_new_team_only(team_a, make_member):
    bob = make_member(team_a, "viewer", username="bob")
    assert run_command("create_team", "ops", "--admin", "bob") == [
        "Team ops (created); admin: bob; stdio MCP servers not allowed.",
        "bob already had an account: they sign in with their password."]
    assert dict(Membership.objects.filter(user=bob).values_list("team__slug", "role")) == {
        "alpha": "viewer", "ops": "admin"}
    bob.refresh_from_db()
    assert bob.check_password("pw-for-tests-1")
    assert Team.objects.get(slug="ops").name == "ops"


@pytest.mark.parametrize("argv", [("no spaces", "--admin", "x"), ("ok", "--admin", "bad name"),
                                  ("x" * 65, "--admin", "x")])
def test_create_team_refuses_bad_names(db, argv):
    with pytest.raises(CommandError, match="^not a valid slug or username: "):
        call_command("create_team", *argv, stdout=StringIO())
    assert not Team.objects.exists() and not User.objects.exists()


# -- a new link when the first one expired ------------------------------------------------------


def reissue(client, *memberships):
    return client.post(url("membership", "changelist"), {
        "action": "reissue_password_link", "_selected_action": [m.pk for m in memberships]}, follow=True)


def test_team_admin_reissues_a_link_only_for_own_accounts_without_a_password(team_a, team_b, make_member):
    admin_user = make_member(team_a, "admin")
    client = client_for(admin_user)
    fresh = membership_add(team=team_a, username="mona", role="viewer", new_account=True).membership
    with_password = Membership.objects.get(user=make_member(team_a, "editor", username="ned"))
    shared = membership_add(team=team_b, username="olga", role="viewer", new_account=True).membership
    in_both = membership_add(team=team_a, username="olga", role="viewer").membership
    outsider = membership_add(team=team_b, username="pia", role="viewer", new_account=True).membership
    response = reissue(client, fresh, with_password, in_both, outsider)
    assert response.status_code == 200
    shown = [str(message) for message in response.context["messages"]]
    [link] = [message for message in shown if message.startswith("One-time link for mona to set a password: ")]
    assert sorted(message for message in shown if message != link) == [
        "No link for ned: ned has set a password; they change it themselves.",
        "No link for olga: olga is not a member of alpha alone."]
    [(uidb64, token)] = LINK_RE.findall(link)
    set_password(f"/accounts/reset/{uidb64}/{token}/")
    assert User.objects.get(username="mona").check_password(NEW_PASSWORD)
    for untouched in ("olga", "pia"):
        assert not User.objects.get(username=untouched).has_usable_password()
    assert User.objects.get(username="ned").check_password("pw-for-tests-1")
    assert shared.pk != in_both.pk


def test_reissue_is_for_team_admins_only(team_a, team_b, make_member):
    fresh = membership_add(team=team_a, username="quinn", role="viewer", new_account=True).membership
    # An admin of another team who is a viewer here: the action skips this team's members.
    elsewhere = make_member(team_b, "admin")
    membership_add(team=team_a, username=elsewhere.username, role="viewer")
    response = reissue(client_for(elsewhere), fresh)
    assert LINK_RE.findall(response.content.decode()) == []
    # A plain member does not even get the action.
    viewer = client_for(make_member(team_a, "viewer"))
    response = viewer.post(url("membership", "changelist"),
                           {"action": "reissue_password_link", "_selected_action": [fresh.pk]}, follow=True)
    assert LINK_RE.findall(response.content.decode()) == []
    assert "reissue_password_link" not in viewer.get(url("membership", "changelist")).content.decode()


# -- only the newest set-password link works (issue 23, point 6) ---------------------------------------


def test_a_new_set_password_link_revokes_the_older_ones_even_within_the_same_second(team_a):
    fresh = membership_add(team=team_a, username="rosa", role="viewer", new_account=True)
    links = [fresh.password_link] + [password_link_create(user=fresh.membership.user) for _ in range(2)]
    assert len(set(links)) == 3  # issued within the same second, yet three different links
    for older in links[:2]:
        assert Client().get(older, follow=True).context["validlink"] is False
    set_password(links[2])
    rosa = User.objects.get(username="rosa")
    assert rosa.check_password(NEW_PASSWORD)
    # Used: it stops working too, and no older link came back to life.
    for link in links:
        assert Client().get(link, follow=True).context["validlink"] is False
    rosa.refresh_from_db()
    assert rosa.check_password(NEW_PASSWORD)


def test_reissuing_in_the_admin_revokes_the_link_handed_out_first(team_a, make_member):
    first = membership_add(team=team_a, username="sven", role="viewer", new_account=True).password_link
    response = reissue(client_for(make_member(team_a, "admin")), Membership.objects.get(user__username="sven"))
    [(uidb64, token)] = LINK_RE.findall(response.content.decode())
    assert Client().get(first, follow=True).context["validlink"] is False
    set_password(f"/accounts/reset/{uidb64}/{token}/")
    assert User.objects.get(username="sven").check_password(NEW_PASSWORD)


# -- invitations: a team admin never learns which usernames exist (issue 23, point 8) -------------------

INVITE_RE = re.compile(r"http://testserver(/accounts/invitations/(inv_[A-Za-z0-9_-]+)/)")


def test_adding_by_username_answers_a_team_admin_the_same_whether_or_not_the_user_exists(team_a, team_b,
                                                                                          make_member):
    elsewhere = make_member(team_b, "viewer", username="taken-name")
    client = client_for(make_member(team_a, "admin"))
    answers = {}
    for username in ("taken-name", "no-such-name"):
        for new_account in ("on", ""):
            form = {"team": team_a.pk, "username": username, "new_account": new_account, "role": "viewer"}
            response = client.post(url("membership", "add"), form)
            answers[(username, new_account)] = (response.status_code, response.content)
    assert answers[("taken-name", "on")] == answers[("no-such-name", "on")]
    assert answers[("taken-name", "")] == answers[("no-such-name", "")]
    assert {status for status, _ in answers.values()} == {403}
    assert client.get(url("membership", "add")).status_code == 403
    assert not Membership.objects.filter(team=team_a, user=elsewhere).exists()
    assert not User.objects.filter(username="no-such-name").exists()


def invite(client, team, role) -> tuple[str, str]:
    response = client.post(url("invitation", "add"), {"team": team.pk, "role": role}, follow=True)
    assert response.status_code == 200
    [(path, token)] = INVITE_RE.findall(response.content.decode())
    return path, token


def test_an_invitation_makes_a_signed_in_user_a_member_once(team_a, team_b, make_member):
    from agents_app.models import Invitation

    admin_user = make_member(team_a, "admin")
    path, token = invite(client_for(admin_user), team_a, "editor")
    invitation = Invitation.objects.get()
    assert (invitation.team, invitation.role, invitation.created_by, invitation.accepted_at) == (
        team_a, "editor", admin_user, None)
    assert token not in invitation.token_hash
    # Not shown again.
    assert token not in client_for(admin_user).get(url("invitation", "changelist")).content.decode()
    guest = make_member(team_b, "viewer", username="uma")
    guest_client = client_for(guest)
    page = guest_client.get(path)
    assert page.status_code == 200 and "as <strong>editor</strong>" in page.content.decode()
    joined = guest_client.post(path)
    assert (joined.status_code, joined["Location"]) == (302, "/admin/")
    assert Membership.objects.get(team=team_a, user=guest).role == "editor"
    invitation.refresh_from_db()
    assert invitation.accepted_by == guest and invitation.accepted_at is not None
    # Once: for anyone else it is gone, and nothing changes.
    other = make_member(team_b, "viewer", username="vic")
    again = client_for(other).post(path)
    assert again.status_code == 404
    assert "this invitation link is not valid" in again.content.decode().lower()
    assert not Membership.objects.filter(team=team_a, user=other).exists()
    assert client_for(guest).get(path).status_code == 404


def test_an_invitation_lets_a_newcomer_create_an_account_and_join(team_a, make_member):
    path, _ = invite(client_for(make_member(team_a, "admin")), team_a, "viewer")
    newcomer = Client()
    refused = newcomer.post(path, {"username": "wes", "password1": NEW_PASSWORD, "password2": "other-" + NEW_PASSWORD})
    assert refused.status_code == 200 and not User.objects.filter(username="wes").exists()
    done = newcomer.post(path, {"username": "wes", "password1": NEW_PASSWORD, "password2": NEW_PASSWORD})
    assert (done.status_code, done["Location"]) == (302, "/admin/")
    wes = User.objects.get(username="wes")
    assert wes.check_password(NEW_PASSWORD) and wes.is_staff
    assert list(Membership.objects.filter(user=wes).values_list("team__slug", "role")) == [("alpha", "viewer")]
    assert newcomer.get(reverse("admin:agents_app_agent_changelist")).status_code == 200  # signed in
    assert Client().post(path, {"username": "xena", "password1": NEW_PASSWORD,
                                "password2": NEW_PASSWORD}).status_code == 404
    assert not User.objects.filter(username="xena").exists()


def test_an_invitation_never_changes_a_members_role_and_stays_usable(team_a, make_member):
    path, _ = invite(client_for(make_member(team_a, "admin")), team_a, "admin")
    member = make_member(team_a, "viewer")
    answer = client_for(member).post(path)
    assert answer.status_code == 400 and "already a member of alpha" in answer.content.decode()
    assert Membership.objects.get(team=team_a, user=member).role == "viewer"
    assert client_for(member).get(path).status_code == 200


def test_an_expired_invitation_is_refused(team_a, make_member):
    from django.utils import timezone

    from agents_app.models import Invitation

    path, _ = invite(client_for(make_member(team_a, "admin")), team_a, "viewer")
    Invitation.objects.update(expires_at=timezone.now())
    assert Client().get(path).status_code == 404


@pytest.mark.parametrize("role", ["viewer", "editor", "operator"])
def test_only_team_admins_invite_and_only_to_their_own_teams(team_a, team_b, make_member, role):
    assert client_for(make_member(team_a, role)).get(url("invitation", "add")).status_code == 403
    admin_client = client_for(make_member(team_a, "admin"))
    response = admin_client.post(url("invitation", "add"), {"team": team_b.pk, "role": "admin"})
    assert response.status_code == 200 and "team" in response.context["adminform"].form.errors
    from agents_app.models import Invitation

    assert not Invitation.objects.exists()


# -- the set-password page says whose account; a dead link says whom to ask; the link stays on the member's page
# (issue 27, point 3) -------------------------------------------------------------------------------------------


def test_the_set_password_page_names_the_account_and_its_teams(team_a, team_b):
    link = membership_add(team=team_a, username="uma", role="editor", new_account=True).password_link
    membership_add(team=team_b, username="uma", role="viewer")
    client = Client()
    form_page = client.get(client.get(link)["Location"])
    html = form_page.content.decode()
    assert "<h1>Set a password for uma</h1>" in html
    assert ("The account <strong>uma</strong> is a member of\n  <strong>Alpha</strong> (editor), "
            "<strong>Beta</strong> (viewer).") in html
    assert '<input type="submit" value="Set my password">' in html


def test_a_link_that_no_longer_works_says_whom_to_ask_and_names_nobody(team_a):
    link = membership_add(team=team_a, username="vera", role="viewer", new_account=True).password_link
    set_password(link)
    client = Client()
    dead = client.get(link, follow=True)
    assert dead.status_code == 200 and dead.context["validlink"] is False
    html = dead.content.decode()
    assert "<h1>This link does not work</h1>" in html
    assert ("Ask an admin of your team for a new link: they make one in the team console\n"
            "  (Memberships, “New set-password link”).") in html
    assert "vera" not in html and "Alpha" not in html  # a dead link does not tell whose account it was
    assert "password_reset" not in html and "request a new password reset" not in html
    # Every link of the page leads somewhere (there is no "forgot my password" page to send people to).
    hrefs = set(re.findall(r'href="(/[^"]*)"', html)) - {"/static/"}
    assert "/accounts/login/" in hrefs
    for href in hrefs:
        if not href.startswith("/static/"):
            assert client.get(href, follow=True).status_code == 200, href
    assert client.get("/accounts/password_reset/").status_code == 404


def test_the_pending_link_is_the_one_handed_out_until_it_is_used_replaced_or_expired(team_a, team_b, settings):
    added = membership_add(team=team_a, username="wim", role="viewer", new_account=True)
    wim = added.membership.user
    pending = password_link_pending(team=team_a, user=wim)
    assert pending.path == added.password_link
    issued = PasswordLinkNonce.objects.get(user=wim).issued_at
    assert pending.expires_at == issued + timedelta(seconds=settings.PASSWORD_RESET_TIMEOUT)
    assert password_link_pending(team=team_b, user=wim) is None  # not a member there
    newer = password_link_create(user=wim)
    assert newer != added.password_link and password_link_pending(team=team_a, user=wim).path == newer
    # Expired: issued longer ago than PASSWORD_RESET_TIMEOUT.
    PasswordLinkNonce.objects.filter(user=wim).update(
        issued_at=issued - timedelta(seconds=settings.PASSWORD_RESET_TIMEOUT + 5))
    assert password_link_pending(team=team_a, user=wim) is None
    # A fresh one, then the account joins another team: not shown to either team's admins.
    fresh = password_link_create(user=wim)
    assert password_link_pending(team=team_a, user=wim).path == fresh
    membership_set(team=team_b, user=wim, role="viewer")
    assert password_link_pending(team=team_a, user=wim) is None and password_link_pending(team=team_b, user=wim) is None
    # Used: gone.
    Membership.objects.filter(team=team_b, user=wim).delete()
    set_password(password_link_pending(team=team_a, user=wim).path)
    wim.refresh_from_db()
    assert password_link_pending(team=team_a, user=wim) is None


def test_the_link_shows_on_the_members_page_for_the_teams_admins_only(team_a, team_b, make_member):
    added = membership_add(team=team_a, username="xena", role="viewer", new_account=True)
    page = url("membership", "change", added.membership.pk)
    admin_user = make_member(team_a, "admin")
    shown = client_for(admin_user).get(page).content.decode()
    assert f"<code class='mas-password-link'>http://testserver{added.password_link}</code>" in shown
    assert "xena has not set a password yet: give them this link." in shown
    # The team's other members see the member, not the link; another team's admin does not see the member.
    for role in ("viewer", "editor", "operator"):
        response = client_for(make_member(team_a, role)).get(page)
        assert response.status_code == 200 and LINK_RE.findall(response.content.decode()) == [], role
    assert client_for(make_member(team_b, "admin")).get(page).status_code == 404
    # An admin of team_a who is a viewer in team_b: a member of team_b's page shows no link to them either.
    other = membership_add(team=team_b, username="yann", role="viewer", new_account=True).membership
    membership_add(team=team_b, username=admin_user.username, role="viewer")
    response = client_for(admin_user).get(url("membership", "change", other.pk))
    assert response.status_code == 200 and LINK_RE.findall(response.content.decode()) == []
