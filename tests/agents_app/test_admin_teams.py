"""Teams, memberships, API tokens and saved versions in the admin: scoped to the user's teams."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from agents_app.kinds import AGENT
from agents_app.models import ApiToken, DefinitionVersion, Membership, Team
from mas_core.teams import api_token_authenticate, api_token_create, membership_set, user_create
from tests.agents_app.test_admin_definitions import client_for, sample, save_definition


def url(model: str, view: str, *args) -> str:
    return reverse(f"admin:agents_app_{model}_{view}", args=args)


# -- teams -------------------------------------------------------------------------


def test_team_list_shows_only_own_teams(team_a, team_b, make_member):
    client = client_for(make_member(team_a, "viewer"))
    response = client.get(url("team", "changelist"))
    assert [team.slug for team in response.context["cl"].result_list] == ["alpha"]
    assert client.get(url("team", "change", team_b.pk)).status_code == 404
    assert client.get(url("team", "history", team_b.pk)).status_code == 404
    assert client.get(url("team", "add")).status_code == 403


def test_team_admin_renames_team_but_not_its_folder(team_a, make_member):
    folder = team_a.defs_dir
    client = client_for(make_member(team_a, "admin"))
    response = client.post(url("team", "change", team_a.pk), {"name": "Alpha Squad", "defs_dir": "/etc"})
    assert response.status_code == 302
    team_a.refresh_from_db()
    assert (team_a.name, team_a.defs_dir) == ("Alpha Squad", folder)
    assert client.post(url("team", "delete", team_a.pk), {"post": "yes"}).status_code == 403


def test_editor_cannot_change_team(team_a, make_member):
    client = client_for(make_member(team_a, "editor"))
    assert client.post(url("team", "change", team_a.pk), {"name": "Taken"}).status_code == 403
    team_a.refresh_from_db()
    assert team_a.name == "Alpha"


def test_superuser_creates_and_deletes_teams(team_a):
    save_definition(AGENT, team_a, sample("agent", "researcher"))
    root = get_user_model().objects.create_superuser("root", password="pw-for-tests-1")
    client = client_for(root)
    response = client.post(url("team", "add"), {"slug": "delta", "name": "Delta", "defs_dir": ""})
    assert response.status_code == 302
    assert Team.objects.filter(slug="delta").exists()
    # Deleting a team takes its versions along: allowed for a superuser.
    assert client.post(url("team", "delete", team_a.pk), {"post": "yes"}).status_code == 302
    assert not Team.objects.filter(pk=team_a.pk).exists()
    assert not DefinitionVersion.objects.filter(team_id=team_a.pk).exists()


# -- memberships -------------------------------------------------------------------


def group_names(user) -> set[str]:
    return set(user.groups.values_list("name", flat=True))


def test_an_invited_member_gets_the_role_and_groups_follow(team_a, make_member):
    from mas_core.teams import invitation_accept, invitation_create

    client = client_for(make_member(team_a, "admin"))
    newcomer = user_create(username="newcomer", password="pw-for-tests-1")
    link = invitation_create(team=team_a, role="editor").link
    invitation_accept(token=link.rstrip("/").rsplit("/", 1)[1], user=newcomer)
    membership = Membership.objects.get(team=team_a, user=newcomer)
    assert membership.role == "editor"
    newcomer.refresh_from_db()
    assert newcomer.is_staff
    assert group_names(newcomer) == {"MAS editor"}
    response = client.post(url("membership", "change", membership.pk), {"role": "viewer"})
    assert response.status_code == 302
    assert group_names(newcomer) == {"MAS viewer"}
    assert client.post(url("membership", "delete", membership.pk), {"post": "yes"}).status_code == 302
    assert not Membership.objects.filter(pk=membership.pk).exists()
    assert group_names(newcomer) == set()


def test_removing_one_membership_keeps_groups_of_the_others(team_a, team_b, make_member):
    client = client_for(make_member(team_a, "admin"))
    user = make_member(team_a, "admin")
    membership_set(team=team_b, user=user, role="viewer")
    membership = Membership.objects.get(team=team_a, user=user)
    assert client.post(url("membership", "delete", membership.pk), {"post": "yes"}).status_code == 302
    assert group_names(user) == {"MAS viewer"}


def test_membership_form_errors(team_a, make_member):
    # Adding by username is the superuser's (a team admin invites: tests/agents_app/test_team_people.py).
    admin_user = make_member(team_a, "admin")
    client = client_for(get_user_model().objects.create_superuser("root", password="pw-for-tests-1"))
    missing = client.post(url("membership", "add"), {"team": team_a.pk, "username": "nobody", "role": "editor"})
    assert missing.context["adminform"].form.errors["username"] == ["No user with this username."]
    again = client.post(
        url("membership", "add"), {"team": team_a.pk, "username": admin_user.username, "role": "viewer"}
    )
    assert "username" in again.context["adminform"].form.errors
    assert Membership.objects.get(team=team_a, user=admin_user).role == "admin"


def test_memberships_of_other_teams_are_invisible(team_a, team_b, make_member):
    make_member(team_b, "editor", username="beta-person")
    theirs = Membership.objects.get(team=team_b)
    client = client_for(make_member(team_a, "admin"))
    body = client.get(url("membership", "changelist")).content.decode()
    assert "beta-person" not in body
    assert client.get(url("membership", "change", theirs.pk)).status_code == 404
    assert client.post(url("membership", "change", theirs.pk), {"role": "admin"}).status_code == 404
    assert client.post(url("membership", "delete", theirs.pk), {"post": "yes"}).status_code == 404
    newcomer = user_create(username="newcomer", password="pw-for-tests-1")
    response = client.post(url("membership", "add"), {"team": team_b.pk, "username": "newcomer", "role": "admin"})
    assert response.status_code == 403
    assert not Membership.objects.filter(user=newcomer).exists()
    assert Membership.objects.get(pk=theirs.pk).role == "editor"


@pytest.mark.parametrize("role", ["viewer", "editor", "operator"])
def test_only_team_admins_manage_members(team_a, make_member, role):
    client = client_for(make_member(team_a, role))
    other = make_member(team_a, "viewer")
    membership = Membership.objects.get(team=team_a, user=other)
    assert client.get(url("membership", "changelist")).status_code == 200
    assert client.get(url("membership", "add")).status_code == 403
    assert client.post(url("membership", "change", membership.pk), {"role": "admin"}).status_code == 403
    assert client.post(url("membership", "delete", membership.pk), {"post": "yes"}).status_code == 403
    assert Membership.objects.get(pk=membership.pk).role == "viewer"


# -- API tokens --------------------------------------------------------------------


TOKEN_RE = re.compile(r"mas_[A-Za-z0-9_-]{20,}")


def test_token_created_in_admin_is_shown_once(team_a, make_member):
    admin_user = make_member(team_a, "admin")
    member = make_member(team_a, "editor")
    client = client_for(admin_user)
    response = client.post(
        url("apitoken", "add"), {"team": team_a.pk, "user": member.pk, "role": "viewer", "name": "ci"}, follow=True
    )
    assert response.status_code == 200
    [token] = TOKEN_RE.findall(response.content.decode())
    row = ApiToken.objects.get(team=team_a, user=member)
    assert (row.role, row.name, row.prefix) == ("viewer", "ci", token[:12])
    assert api_token_authenticate(token).pk == row.pk
    pages = (url("apitoken", "changelist"), url("apitoken", "change", row.pk), url("apitoken", "history", row.pk))
    for page in pages:
        body = client.get(page).content.decode()
        assert token not in body, page
        assert row.token_hash not in body, page
        assert row.prefix in body, page


def test_token_role_cannot_exceed_membership(team_a, make_member):
    client = client_for(make_member(team_a, "admin"))
    member = make_member(team_a, "viewer")
    response = client.post(url("apitoken", "add"), {"team": team_a.pk, "user": member.pk, "role": "editor"})
    assert response.status_code == 200
    assert "role" in response.context["adminform"].form.errors
    assert not ApiToken.objects.exists()


def test_member_sees_and_issues_only_own_tokens(team_a, make_member):
    me = make_member(team_a, "editor")
    colleague = make_member(team_a, "editor")
    theirs = api_token_create(user=colleague, team=team_a).row
    mine = api_token_create(user=me, team=team_a).row
    client = client_for(me)
    listed = client.get(url("apitoken", "changelist")).context["cl"].result_list
    assert [t.pk for t in listed] == [mine.pk]
    assert client.get(url("apitoken", "change", theirs.pk)).status_code == 404
    assert client.post(url("apitoken", "delete", theirs.pk), {"post": "yes"}).status_code == 404
    # Issuing one for a colleague: the user choice does not even offer them.
    response = client.post(url("apitoken", "add"), {"team": team_a.pk, "user": colleague.pk, "role": "viewer"})
    assert "user" in response.context["adminform"].form.errors
    assert ApiToken.objects.filter(user=colleague).count() == 1
    # For themselves it works.
    ok = client.post(url("apitoken", "add"), {"team": team_a.pk, "user": me.pk, "role": "viewer"})
    assert ok.status_code == 302
    assert ApiToken.objects.filter(user=me).count() == 2


def test_tokens_are_immutable_and_revocable(team_a, make_member):
    me = make_member(team_a, "editor")
    issued = api_token_create(user=me, team=team_a)
    client = client_for(me)
    assert client.post(url("apitoken", "change", issued.row.pk), {"role": "editor"}).status_code == 403
    response = client.post(
        url("apitoken", "changelist"), {"action": "revoke", "_selected_action": [issued.row.pk]}
    )
    assert response.status_code == 302
    issued.row.refresh_from_db()
    assert issued.row.revoked_at is not None
    assert api_token_authenticate(issued.token) is None


def test_team_admin_sees_team_tokens_not_other_teams(team_a, team_b, make_member):
    colleague = make_member(team_a, "editor")
    outsider = make_member(team_b, "admin")
    ours = api_token_create(user=colleague, team=team_a).row
    theirs = api_token_create(user=outsider, team=team_b).row
    client = client_for(make_member(team_a, "admin"))
    listed = client.get(url("apitoken", "changelist")).context["cl"].result_list
    assert [t.pk for t in listed] == [ours.pk]
    assert client.get(url("apitoken", "change", theirs.pk)).status_code == 404
    assert client.post(url("apitoken", "delete", ours.pk), {"post": "yes"}).status_code == 302
    assert not ApiToken.objects.filter(pk=ours.pk).exists()
    # The user choice offers the admin's team members only.
    form = client.get(url("apitoken", "add")).context["adminform"].form
    assert outsider not in form.fields["user"].queryset


# -- saved versions ----------------------------------------------------------------


def test_versions_are_read_only_and_scoped(team_a, team_b, make_member):
    save_definition(AGENT, team_a, sample("agent", "alpha-item"))
    save_definition(AGENT, team_b, sample("agent", "beta-item"))
    ours = DefinitionVersion.objects.get(team=team_a)
    theirs = DefinitionVersion.objects.get(team=team_b)
    client = client_for(make_member(team_a, "editor"))
    listed = client.get(url("definitionversion", "changelist")).context["cl"].result_list
    assert [v.pk for v in listed] == [ours.pk]
    page = client.get(url("definitionversion", "change", ours.pk))
    assert page.status_code == 200
    assert "You research." in page.content.decode()
    assert 'name="_save"' not in page.content.decode()
    assert client.get(url("definitionversion", "add")).status_code == 403
    assert client.post(url("definitionversion", "change", ours.pk), {"content": "x"}).status_code == 403
    assert client.post(url("definitionversion", "delete", ours.pk), {"post": "yes"}).status_code == 403
    assert client.get(url("definitionversion", "change", theirs.pk)).status_code == 404
    ours.refresh_from_db()
    assert ours.content == sample("agent", "alpha-item")


def test_admin_index_lists_only_what_the_role_allows(team_a, make_member):
    viewer = client_for(make_member(team_a, "viewer")).get(reverse("admin:index"))
    models = {m["object_name"]: m for app in viewer.context["app_list"] for m in app["models"]}
    assert {"Agent", "CustomTool", "MCPServer", "Workflow", "Skill", "ModelProvider"} <= set(models)
    assert not models["Agent"]["perms"]["add"]
    editor = client_for(make_member(team_a, "editor")).get(reverse("admin:index"))
    models = {m["object_name"]: m for app in editor.context["app_list"] for m in app["models"]}
    assert models["Workflow"]["perms"]["add"] and not models["Team"]["perms"]["change"]


def test_outsider_sees_nothing(team_a):
    save_definition(AGENT, team_a, sample("agent", "alpha-item"))
    outsider = user_create(username="outsider", password="pw-for-tests-1")
    outsider.is_staff = True
    outsider.save()
    client = client_for(outsider)
    assert client.get(reverse("admin:index")).context["app_list"] == []
    assert client.get(reverse("admin:agents_app_agent_changelist")).status_code == 403


def test_role_groups_cover_every_definition_model(db):
    """The admin shows a model to a role only if the role's group holds its permissions."""
    from django.contrib.auth.models import Group

    def codenames(group: str) -> set[str]:
        return set(Group.objects.get(name=group).permissions.values_list("codename", flat=True))

    for model in ("agent", "skill", "modelprovider", "guardrail", "customtool", "mcpserver", "workflow"):
        assert f"view_{model}" in codenames("MAS viewer"), model
        assert {f"add_{model}", f"change_{model}", f"delete_{model}"} <= codenames("MAS editor"), model
    # The stdio right is per team (the admin role), never a global group permission.
    assert "manage_stdio_mcpserver" not in codenames("MAS admin")
    assert "manage_stdio_mcpserver" not in codenames("MAS editor")
