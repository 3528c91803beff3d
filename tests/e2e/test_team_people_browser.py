"""A team admin invites a person in a real browser (Debian's Chromium, Playwright); the person follows the
single-use link, creates their account there, is signed in and finds what their role allows — at a desk's
and a phone's width."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from agents_app.kinds import AGENT
from agents_app.models import Membership
from mas_core.teams import membership_add
from tests.e2e.test_admin_browser import admin_sign_in, asgi_server, save, width  # noqa: F401 (a fixture)
from tests.e2e.test_monitor_browser import ARTIFACTS, chromium  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.django_db(transaction=True)]

NEW_PASSWORD = "tide-pools-at-dawn-42"


@pytest.mark.parametrize(("screen", "role", "can_add"), [(1400, "viewer", False), (390, "editor", True)])
def test_a_team_admin_invites_a_person_who_creates_an_account_and_signs_in(team_a, team_b, make_member, asgi_server,
                                                                           chromium, screen, role, can_add):  # noqa: F811
    server = asgi_server.url
    save(team_a, AGENT, "---\nname: Writer\n---\n\nYou write.\n")
    boss = make_member(team_a, "admin", username="boss")
    make_member(team_b, "admin", username="other-admin")

    admin_page = chromium.new_page(viewport={"width": screen, "height": 900})
    admin_sign_in(admin_page, server, boss.username)
    admin_page.goto(f"{server}{reverse('admin:agents_app_invitation_add')}")
    # Their only team is preselected, and the only one offered.
    assert admin_page.input_value("select[name=team]") == str(team_a.pk)
    assert admin_page.eval_on_selector_all("select[name=team] option", "os => os.map(o => o.value)") == [
        "", str(team_a.pk)]
    admin_page.select_option("select[name=role]", role)
    admin_page.click("input[name=_save]")
    admin_page.wait_for_url(f"{server}{reverse('admin:agents_app_invitation_changelist')}", timeout=90_000)
    link = admin_page.inner_text(".messagelist code.mas-invitation-link")
    assert link.startswith(f"{server}/accounts/invitations/inv_") and link.endswith("/")
    assert width(admin_page)[0] <= screen
    admin_page.screenshot(path=str(ARTIFACTS / f"team-admin-invited-{screen}.png"), full_page=True)
    admin_page.close()

    # The newcomer, in a browser of their own, chooses a username and a password.
    context = chromium.new_context(viewport={"width": screen, "height": 900})
    page = context.new_page()
    page.goto(link)
    page.fill("input[name=username]", "newcomer")
    page.fill("input[name=password1]", NEW_PASSWORD)
    page.fill("input[name=password2]", NEW_PASSWORD)
    assert width(page)[0] <= screen
    page.click("form.invitation-account button[type=submit]")
    page.wait_for_url(f"{server}/admin/", timeout=90_000)
    newcomer = get_user_model().objects.get(username="newcomer")
    assert newcomer.check_password(NEW_PASSWORD)
    assert list(Membership.objects.filter(user=newcomer).values_list("team__slug", "role")) == [("alpha", role)]
    # The link was for once.
    page.goto(link)
    assert "This invitation link is not valid" in page.inner_text("body")

    page.goto(f"{server}{reverse('admin:agents_app_agent_changelist')}")
    assert page.inner_text("#result_list tbody").count("writer") >= 1
    assert page.locator(".object-tools a.addlink").count() == (1 if can_add else 0)
    # Nobody but a team admin manages people.
    page.goto(f"{server}{reverse('admin:agents_app_membership_changelist')}")
    assert page.locator(".object-tools a.addlink").count() == 0
    assert "other-admin" not in page.inner_text("body")
    page.screenshot(path=str(ARTIFACTS / f"team-newcomer-{role}-{screen}.png"), full_page=True)
    context.close()


@pytest.mark.parametrize("screen", [1400, 390])
def test_a_set_password_link_stays_on_the_members_page_and_says_whose_account_it_is(team_a, make_member, asgi_server,
                                                                                  chromium, screen):  # noqa: F811
    """Issue 27, point 3: the link is on the member's page (for the team's admins) until it is used; the page it
    opens names the account and its team; used, it says whom to ask for a new one."""
    server = asgi_server.url
    boss = make_member(team_a, "admin", username="boss")
    mona = membership_add(team=team_a, username="mona", role="viewer", new_account=True).membership
    member_page = f"{server}{reverse('admin:agents_app_membership_change', args=[mona.pk])}"

    admin_page = chromium.new_page(viewport={"width": screen, "height": 900})
    admin_sign_in(admin_page, server, boss.username)
    # A new link from the list's action: shown in the message, and kept on the member's page.
    admin_page.goto(f"{server}{reverse('admin:agents_app_membership_changelist')}")
    admin_page.check(f"input[name=_selected_action][value='{mona.pk}']")
    admin_page.select_option("select[name=action]", "reissue_password_link")
    admin_page.click("button[name=index]")
    admin_page.wait_for_selector(".messagelist code.mas-password-link", timeout=90_000)
    link = admin_page.inner_text(".messagelist code.mas-password-link")
    assert link.startswith(f"{server}/accounts/reset/") and link.endswith("/")
    admin_page.click(".messagelist a:text('their membership page')")
    admin_page.wait_for_url(member_page, timeout=90_000)
    assert admin_page.inner_text(".field-password_link code.mas-password-link") == link
    assert "mona has not set a password yet: give them this link." in admin_page.inner_text(".field-password_link")
    assert width(admin_page)[0] <= screen
    admin_page.screenshot(path=str(ARTIFACTS / f"team-member-link-{screen}.png"), full_page=True)

    # The owner opens it: whose account, in which team.
    context = chromium.new_context(viewport={"width": screen, "height": 900})
    page = context.new_page()
    page.goto(link)
    assert page.inner_text("h1") == "Set a password for mona"
    assert page.inner_text(".mas-account") == (
        "The account mona is a member of Alpha (viewer). Choose its password: then this link stops working, and "
        "you sign in with the username and this password.")
    assert width(page)[0] <= screen
    page.fill("input[name=new_password1]", NEW_PASSWORD)
    page.fill("input[name=new_password2]", NEW_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{server}{reverse('password_reset_complete')}", timeout=90_000)
    assert get_user_model().objects.get(username="mona").check_password(NEW_PASSWORD)

    # Used: the link says so, and whom to ask; nothing on the page leads to a missing page.
    page.goto(link)
    assert page.inner_text("h1") == "This link does not work"
    assert page.inner_text(".mas-link-next") == (
        "Ask an admin of your team for a new link: they make one in the team console (Memberships, “New "
        "set-password link”). If you set your password already, sign in.")
    assert "password reset" not in page.inner_text("body").lower()
    for href in page.eval_on_selector_all("#content a", "as => as.map(a => a.href)"):
        assert page.request.get(href).status == 200, href
    assert width(page)[0] <= screen
    page.screenshot(path=str(ARTIFACTS / f"set-password-used-{screen}.png"), full_page=True)
    context.close()

    # And the member's page no longer shows it.
    admin_page.goto(member_page)
    assert admin_page.locator(".field-password_link").count() == 0
    assert "/accounts/reset/" not in admin_page.content()
    admin_page.close()
