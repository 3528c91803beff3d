"""Every API route, admin page, monitor page and websocket path keeps team A out of team B's objects.

The routes are not listed by hand: they are read from the NinjaAPI object, the
admin site's registry, the URLconf and the ASGI websocket routes. Each one
must be classified below (``API_ROUTES``, ``PAGE_ROUTES``, ``WS_ROUTES``), so
a route added later fails this test until someone says what it touches.
Every path parameter is filled with one of team B's ids or slugs; team A's
caller (a team admin, so no role stands in the way) must get a 404 (or a
403), see none of B's text, and change nothing: the rows of every MAS table
and B's markdown files are compared before and after.

Shared with ``tests/agents_app/test_api_isolation.py``, which checks the
definition endpoints word for word against a slug that exists nowhere; this
sweep covers every route, including the ones added after it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest
from django.contrib import admin
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.urls import URLPattern, URLResolver, reverse

from agents_app.kinds import AGENT
from mas_core.definitions.services import definition_parse, definition_save
from mas_project import urls as project_urls
from mas_project.api import api
from memory_app.services import memory_store
from tests.security.world import KINDS, MARK, PATCH, REPLACE, build_side, db_snapshot, files_snapshot

pytestmark = pytest.mark.django_db

# -- the API: every operation of every router -----------------------------------------


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # as ninja declares it, e.g. /runs/{run_id}/files/{path:path}
    operation_id: str

    def __str__(self) -> str:
        return f"{self.method} /api{self.path} ({self.operation_id})"


def _join(prefix: str, path: str) -> str:
    return re.sub(r"/+", "/", f"/{prefix}/{path}")


def api_routes() -> list[Route]:
    """Every path operation of ``mas_project.api.api``, nested routers included."""
    found: list[Route] = []

    def walk(router, prefix: str) -> None:
        for path, view in router.path_operations.items():
            for operation in view.operations:
                for method in operation.methods:
                    key = operation.operation_id or f"{method} {_join(prefix, path)}"
                    found.append(Route(method, _join(prefix, path), key))
        for child in router._routers:
            walk(child[1], _join(prefix, child[0]))

    for prefix, router in api._routers:
        walk(router, prefix)
    return found


DEFINITION_ACTIONS = {
    "list": "list", "create": "create", "get": "item", "replace": "item", "patch": "item", "delete": "item",
    "versions": "item", "version": "item", "markdown_get": "item", "markdown_put": "item",
}
# item: names one of B's objects in its path → 404 (or 403), nothing changes.
# list: lists the caller's team → none of B's rows. create: a body naming B's objects → refused, nothing made.
# self: about the caller only. public: no team data.
API_ROUTES: dict[str, str] = {
    **{f"{kind.name}_{action}": role for kind in KINDS.values() for action, role in DEFINITION_ACTIONS.items()},
    "GET /health": "public",
    "me": "self",
    "run_start": "create",
    "run_list": "list",
    "run_get": "item",
    "run_events": "item",
    "run_cancel": "item",
    "run_archive": "item",
    "run_unarchive": "item",
    "run_delete": "item",
    "run_script": "item",
    "run_files": "item",
    "run_file": "item",
    "run_blackboard": "item",
    "run_channels": "item",
    "orchestrate_start": "create",
    "workflow_run_start": "item",
    "workflow_templates": "public",  # built-in templates: the same for every team
    "workflow_from_template": "create",
    "mcp_test": "item",
    "mcp_approve": "item",
    "memory_search": "list",
    "memory_create": "create",
    "memory_share": "item",
    "memory_delete": "item",
    "approval_list": "list",
    "approval_get": "item",
    "approval_decide": "item",
    "team_get": "self",
    "team_update": "self",  # the caller's own team, named by nothing in the request
    "eval_run_start": "item",
    "eval_run_list": "item",
    "eval_run_get": "item",
    "run_save_as_eval_case": "item",
    "run_fork": "item",
}
PLURAL_OF_KIND = {kind.name: plural for plural, kind in KINDS.items()}
TEMPLATE = "chain"


def template_agents(slug: str) -> list[str]:
    """The agents a built-in workflow template's steps name."""
    import yaml

    from workflows_app.templates import workflow_template

    front = yaml.safe_load(workflow_template(slug).markdown.split("---", 2)[1])
    return sorted({step["agent"] for step in front["steps"]})


def fill(route: Route, b) -> str:
    """The route's URL with every path parameter naming one of team B's objects."""
    first = route.path.strip("/").split("/")[0]

    def value(match: re.Match) -> str:
        name = match.group(1).split(":")[-1] if ":" in match.group(1) else match.group(1)
        if name == "slug" and first in b.slugs:
            return b.slugs[first]
        if name == "run_id":
            return str(b.run.id)
        if name == "memory_id":
            return str(b.memory.id)
        if name == "request_id":
            return str(b.approval.id)
        if name == "eval_run_id":
            return str(b.eval_run.id)
        if name == "number":
            return "1"
        if name == "path":
            return "out/report.md"
        if name == "template":
            return TEMPLATE
        raise AssertionError(f"{route}: path parameter {{{match.group(1)}}} is not classified in fill()")

    return "/api" + re.sub(r"\{([^}]+)\}", value, route.path)


def item_body(route: Route):
    """(body, content type) of a call to an item route: valid, so a 404 comes from the lookup."""
    first = route.path.strip("/").split("/")[0]
    if route.path.endswith("/markdown") and route.method == "PUT":
        return "---\nname: hijacked\n---\n", "text/markdown"
    if first in REPLACE and route.path.endswith("{slug}"):
        if route.method == "PUT":
            return REPLACE[first], "application/json"
        if route.method == "PATCH":
            return PATCH, "application/json"
    if route.operation_id == "memory_share":
        return {"shared": False}, "application/json"
    if route.operation_id == "approval_decide":
        return {"decision": "answer", "answer": "hijacked"}, "application/json"
    if route.operation_id == "run_save_as_eval_case":
        return {"dataset": "alpha-evals"}, "application/json"
    if route.operation_id == "run_fork":
        return {"seq": 1}, "application/json"
    if route.method in {"POST", "PUT", "PATCH"}:
        return {}, "application/json"
    return None, None


def create_bodies(route: Route, a, b) -> list[dict]:
    """Bodies of a create route that name team B's objects: each must be refused."""
    op = route.operation_id
    kind = op.removesuffix("_create")
    if op.endswith("_create") and kind in PLURAL_OF_KIND:
        plural = PLURAL_OF_KIND[kind]
        if plural == "agents":
            return [{"name": "Sneaky", "tools": [b.slugs["tools"].replace("-", "_")]}]
        if plural == "workflows":  # a step names an agent or a remote agent of the team
            return [{"name": "Sneaky flow", "steps": [{"id": "s", "agent": b.slugs[theirs], "prompt": "x"}]}
                    for theirs in ("agents", "remote-agents")]
        # Nothing of B's to name: the same name as B's row makes A's own row, never touches B's.
        return []
    if op == "run_start":
        return [{"agent": b.slugs["agents"], "input": "x"},
                {"agent": a.slugs["agents"], "input": "x", "provider": b.slugs["providers"]}]
    if op == "orchestrate_start":
        return [{"planner": b.slugs["agents"], "task": "x"},
                {"planner": a.slugs["agents"], "task": "x", "synthesizer": b.slugs["agents"]},
                {"planner": a.slugs["agents"], "task": "x", "provider": b.slugs["providers"]}]
    if op == "workflow_from_template":
        return [{}, {"name": "Sneaky chain"}]  # B has the template's agents, A does not: refused
    if op == "memory_create":
        return []  # a memory is always the caller's team's; covered by the list routes afterwards
    raise AssertionError(f"{route}: say which of team B's objects its body could name (create_bodies)")


@pytest.fixture
def world(team_a, team_b, api_for):
    a = build_side(team_a, api_for(team_a, "editor"), "Alpha", "alpha's own")
    b = build_side(team_b, api_for(team_b, "editor"), "Bravo", MARK)
    return a, b


def call(client, method: str, url: str, body=None, content_type=None):
    if body is None:
        return getattr(client, method.lower())(url)
    if content_type == "application/json":
        body = json.dumps(body)
    return getattr(client, method.lower())(url, body, content_type=content_type)


def b_ids(b) -> list[str]:
    return [str(b.run.id), *(str(row.pk) for label, row in b.objects.items() if label.startswith("agents_app.run"))]


def test_every_api_route_is_classified():
    routes = api_routes()
    assert len(routes) >= 70
    unclassified = sorted(str(route) for route in routes if route.operation_id not in API_ROUTES)
    assert unclassified == [], "classify these routes in API_ROUTES (and teach fill()/create_bodies() their ids)"


def test_no_api_route_reads_or_changes_another_teams_objects(world, team_a, team_b, api_for):
    a, b = world
    for slug in template_agents(TEMPLATE):
        text = f"---\nname: {slug}\n---\n\n{MARK}\n"
        definition_save(kind=AGENT, team=team_b, parsed=definition_parse(kind=AGENT, team=team_b, text=text))
    client = api_for(team_a, "admin")
    before, b_files = db_snapshot(), files_snapshot(team_b)
    seen: dict[str, int] = {}
    for route in api_routes():
        role = API_ROUTES[route.operation_id]
        if role == "item":
            body, content_type = item_body(route)
            response = call(client, route.method, fill(route, b), body, content_type)
            assert response.status_code in {403, 404}, (str(route), response.status_code, response.content[:300])
            assert MARK not in response.content.decode(), str(route)
        elif role == "list":
            response = client.get("/api" + route.path)
            assert response.status_code == 200, (str(route), response.content[:300])
            text = response.content.decode()
            assert MARK not in text and str(b.run.id) not in text, str(route)
            assert "alpha" in text.lower(), f"{route} lists nothing of the caller's team: the check proves nothing"
        elif role == "create":
            for body in create_bodies(route, a, b):
                response = client.post(fill(route, b), body)
                assert response.status_code in {403, 404, 422}, (str(route), body, response.status_code,
                                                                  response.content[:300])
                assert MARK not in response.content.decode(), str(route)
        elif role == "self":
            response = client.get("/api" + route.path)
            assert response.status_code == 200 and MARK not in response.content.decode()
            assert team_b.slug not in response.content.decode()
        else:
            assert role == "public", route
            response = client.get("/api" + route.path)
            assert response.status_code in {200, 503} and MARK not in response.content.decode()  # 503: a part down
        seen[role] = seen.get(role, 0) + 1
    # A's own workflow cannot be started on B's provider either.
    response = client.post(f"/api/workflows/{a.slugs['workflows']}/runs", {"provider": b.slugs["providers"]})
    assert response.status_code == 422, response.content[:300]
    assert db_snapshot() == before, "a refused call changed rows"
    assert files_snapshot(team_b) == b_files
    assert seen["item"] >= 50 and seen["list"] >= 8 and seen["create"] >= 8


def test_memory_search_by_meaning_never_returns_another_teams_memory(world, team_a, api_for):
    a, b = world
    client = api_for(team_a, "viewer")
    for params in ({"q": f"memory {MARK}"}, {"q": MARK, "agent": b.slugs["agents"]}, {"q": "memory", "k": 100}):
        found = client.get("/api/memories", params).json()
        assert [m["id"] for m in found] == [a.memory.id], params


# -- the admin: every registered model's pages and actions ---------------------------------------


def admin_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def admin_pages() -> list[tuple[str, object, str]]:
    """(url name, model admin, pattern) of every URL every registered ModelAdmin adds."""
    pages = []
    for model, model_admin in admin.site._registry.items():
        for pattern in model_admin.get_urls():
            pages.append((pattern.name, model_admin, str(pattern.pattern)))
    return pages


ADMIN_VIEWS = {"changelist": "list", "add": "add", "change": "item", "history": "item", "delete": "item",
               "run": "item",  # WorkflowAdmin, EvalDatasetAdmin: start a run of the workflow, an eval run
               "case": "run-item",  # EvalDatasetAdmin: save a run (its id in the path) as an eval case
               "diff": "item", "restore": "item",  # a definition's versions: compare two, restore one
               # A definition's form: the other view (fields or markdown) of what is typed, on its page or the add page.
               "switch": "item", "addswitch": "add-switch",
               "settings": "team",  # ApprovalRequestAdmin: a team's approval settings, named by ?team=<slug>
               "slug": "team-slug"}  # EvalDatasetAdmin: a dataset named by its team's and its own slug


def test_every_admin_url_is_classified():
    for name, model_admin, pattern in admin_pages():
        if name is None:
            assert pattern == "<path:object_id>/", (model_admin, pattern)  # the old-style redirect to change/
            continue
        view = name.rsplit("_", 1)[-1]
        assert view in ADMIN_VIEWS, f"{model_admin}: classify the admin URL {name} ({pattern}) in ADMIN_VIEWS"
    models = {model._meta.label_lower for model in admin.site._registry}
    assert {"agents_app.run", "agents_app.agent", "memory_app.memory", "tools_app.mcpserver"} <= models


def _admin_url(model_admin, view: str, *args) -> str:
    meta = model_admin.model._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_{view}", args=args)


@pytest.mark.parametrize("role", ["admin", "operator", "viewer"])
def test_a_team_member_sees_and_changes_nothing_of_another_team_in_the_admin(world, team_a, team_b, make_member,
                                                                             role):
    a, b = world
    user = make_member(team_a, role)
    client = admin_client(user)
    before, b_files = db_snapshot(), files_snapshot(team_b)
    checked = 0
    for name, model_admin, pattern in admin_pages():
        label = model_admin.model._meta.label_lower
        theirs = b.objects.get(label)
        assert theirs is not None, f"the world has no row of {label}: add one to build_side()"
        view = ADMIN_VIEWS.get(name.rsplit("_", 1)[-1]) if name else "redirect"
        if view == "list":
            response = client.get(_admin_url(model_admin, "changelist"))
            if response.status_code == 200:
                rows = list(response.context["cl"].result_list)
                assert theirs.pk not in [row.pk for row in rows], label
                assert MARK not in response.content.decode(), label
                # A filter link naming B's team or run shows nothing either.
                for params in ({"team": team_b.pk}, {"team__id__exact": team_b.pk}, {"run": b.run.pk},
                               {"q": "Bravo"}):
                    filtered = client.get(_admin_url(model_admin, "changelist"), params)
                    if filtered.status_code == 200 and filtered.context and "cl" in filtered.context:
                        assert theirs.pk not in [r.pk for r in filtered.context["cl"].result_list], (label, params)
                    assert MARK not in filtered.content.decode(), (label, params)
                for action in (model_admin.get_actions(response.wsgi_request) or {}):
                    acted = client.post(_admin_url(model_admin, "changelist"),
                                        {"action": action, "_selected_action": [str(theirs.pk)], "post": "yes"})
                    assert acted.status_code in {200, 302, 403}, (label, action)
                    assert MARK not in acted.content.decode()
            else:
                assert response.status_code in {302, 403}, (label, response.status_code)
        elif view == "add":
            response = client.get(_admin_url(model_admin, "add"))
            assert response.status_code in {200, 302, 403}, label
            if response.status_code == 200 and "team" in response.context["adminform"].form.fields:
                choices = [str(pk) for pk, _ in response.context["adminform"].form.fields["team"].choices if pk]
                assert str(team_b.pk) not in choices, label
                posted = client.post(_admin_url(model_admin, "add"),
                                     {"team": team_b.pk, "markdown": f"---\nname: Sneaky\n---\n{MARK}\n",
                                      "username": user.username, "role": "viewer", "user": user.pk, "name": "x"})
                assert posted.status_code in {200, 403}, (label, posted.status_code)
        elif view == "add-switch":
            # Read against another team's definitions: refused, as that team is not one the user may choose.
            url = _admin_url(model_admin, "addswitch")
            for to in ("fields", "markdown"):
                response = client.post(url, {"team": team_b.pk, "to": to, "editor": "markdown" if to == "fields"
                                             else "fields", "markdown": f"---\nname: Sneaky\n---\n{MARK}\n"})
                # To the markdown: the blank form's own (the other team's markdown is not even read).
                assert response.status_code in ({400, 403} if to == "fields" else {200, 403}), (label, to)
                if response.status_code == 400:
                    assert response.json() == {"errors": [
                        "Choose the team first: the markdown is read against its definitions."]}, label
                assert MARK not in response.content.decode(), (label, to)
        elif view == "run-item":
            url = reverse(f"admin:{name}", args=[b.run.pk])
            for response in (client.get(url), client.post(url, {"dataset": "sneaky"})):
                assert response.status_code in {403, 404}, (label, name, response.status_code)
                assert MARK not in response.content.decode(), (label, name)
        elif view == "team-slug":
            url = reverse(f"admin:{name}", args=[team_b.slug, theirs.slug])
            response = client.get(url)
            assert response.status_code == 404 and MARK not in response.content.decode(), (label, name)
        elif view == "team":
            url = _admin_url(model_admin, name.rsplit("_", 1)[-1])
            response = client.get(url)
            assert response.status_code == 200 and MARK not in response.content.decode(), (label, name)
            assert f"?team={team_b.slug}" not in response.content.decode(), (label, name)
            assert client.get(url, {"team": team_b.slug}).status_code == 404, (label, name)
            posted = client.post(f"{url}?team={team_b.slug}", {"approval_deadline_s": "60", "approval_default": "approve",
                                                               "webhook_url": "https://example.com/hijacked"})
            assert posted.status_code == 404, (label, name, posted.status_code)
        elif view in {"item", "redirect"}:
            suffix = name.rsplit("_", 1)[-1] if name else None
            url = _admin_url(model_admin, suffix, theirs.pk) if suffix else (
                _admin_url(model_admin, "changelist") + f"{theirs.pk}/")
            response = client.get(url)
            assert response.status_code in {302, 403, 404}, (label, suffix, response.status_code)
            assert MARK not in response.content.decode(), (label, suffix)
            if suffix in {"change", "delete", "run", "restore", "switch"}:
                posted = client.post(url, {"post": "yes", "markdown": "---\nname: hijacked\n---\n", "role": "viewer",
                                           "content": "hijacked", "shared": "on", "force": "1", "version": "1"})
                assert posted.status_code in {302, 403, 404}, (label, suffix, posted.status_code)
                if posted.status_code == 302:
                    assert "/login/" in posted["Location"], (label, suffix, posted["Location"])
        checked += 1
    # "View on site" and the index pages of the admin itself.
    for label, row in b.objects.items():
        content_type = ContentType.objects.get_for_model(type(row))
        response = client.get(reverse("admin:view_on_site", args=[content_type.pk, row.pk]))
        assert response.status_code == 404, label
    # The autocomplete view, for every foreign key of every registered model.
    for model in admin.site._registry:
        for fk in [f for f in model._meta.fields if f.is_relation]:
            response = client.get(reverse("admin:autocomplete"), {
                "app_label": model._meta.app_label, "model_name": model._meta.model_name, "field_name": fk.name,
                "term": ""})
            assert response.status_code in {200, 403}, (model, fk.name)
            text = response.content.decode()
            assert MARK not in text and str(b.run.pk) not in text and f'"{team_b.pk}"' not in text, (model, fk.name)
    for url in [reverse("admin:index"), *(reverse("admin:app_list", args=[app]) for app in
                                           ("agents_app", "tools_app", "memory_app", "workflows_app"))]:
        response = client.get(url)
        assert response.status_code == 200 and MARK not in response.content.decode()
    assert db_snapshot() == before, "an admin request of team A changed rows"
    assert files_snapshot(team_b) == b_files
    assert checked >= 5 * len(admin.site._registry)


# -- monitor pages ----------------------------------------------------------------------------

# URL name → what it touches. Admin and API are swept above.
# metrics: operators' aggregate counts, no team's rows (token or local only: tests/ops/test_metrics.py).
PAGE_ROUTES = {"home": "public", "login": "public", "logout": "public", "monitor-runs": "list",
               "monitor-run": "item", "monitor-run-cancel": "item-post", "monitor-run-archive": "item-post",
               "monitor-run-delete": "item-post", "monitor-run-fork": "item-post", "monitor-run-file": "item-file",
               "metrics": "public",
               "favicon": "public",  # a redirect to the static icon
               # A new account's one-time set-password link: the token is the key, whoever calls it.
               "password_reset_confirm": "token", "password_reset_complete": "public",
               # A team admin's invitation: the token is the key; a forged one for B's team joins nothing.
               "invitation": "invitation",
               # The start form: it finds only the caller's team's agents and workflows.
               "monitor-start": "start",
               # "Try without a model": the example of one of the caller's team's agents' tools.
               "monitor-start-example": "start-example"}


def page_patterns() -> list[URLPattern]:
    found = []
    for entry in project_urls.urlpatterns:
        if isinstance(entry, URLResolver):
            assert str(entry.pattern) in {"admin/", "api/"}, f"classify the included URLconf {entry.pattern}"
            continue
        found.append(entry)
    return found


def test_every_page_is_classified_and_keeps_to_the_callers_team(world, team_a, team_b, make_member):
    a, b = world
    client = admin_client(make_member(team_a, "admin"))
    before = db_snapshot()
    for pattern in page_patterns():
        assert pattern.name in PAGE_ROUTES, f"classify the page {pattern.pattern} ({pattern.name}) in PAGE_ROUTES"
        role = PAGE_ROUTES[pattern.name]
        if role == "list":
            response = client.get(reverse(pattern.name))
            assert response.status_code == 200 and MARK not in response.content.decode()
            assert str(b.run.id) not in response.content.decode()
            for params in ({"team": team_b.slug},):
                assert client.get(reverse(pattern.name), params).status_code == 404
            assert client.post(reverse(pattern.name), {"agent": b.slugs["agents"], "input": "go"}).status_code == 405
        elif role == "start":
            page = client.get(reverse(pattern.name), {"agent": b.slugs["agents"]})
            assert page.status_code == 200 and MARK not in page.content.decode()
            assert client.get(reverse(pattern.name), {"team": team_b.slug}).status_code == 404
            for target in (f"agent:{b.slugs['agents']}", f"workflow:{b.slugs['workflows']}"):
                started = client.post(reverse(pattern.name), {"target": target, "input": "go"})
                assert started.status_code == 400 and MARK not in started.content.decode(), target
                assert client.post(f"{reverse(pattern.name)}?team={team_b.slug}",
                                   {"target": target, "input": "go"}).status_code == 404
        elif role == "start-example":
            for params in ({"agent": b.slugs["agents"], "tool": "vfs_read"},
                           {"team": team_b.slug, "agent": b.slugs["agents"], "tool": "vfs_read"}):
                response = client.get(reverse(pattern.name), params)
                assert response.status_code == 404 and MARK not in response.content.decode(), params
        elif role == "item":
            response = client.get(reverse(pattern.name, args=[b.run.id]))
            assert response.status_code == 404 and MARK not in response.content.decode()
        elif role == "item-post":
            response = client.post(reverse(pattern.name, args=[b.run.id]))
            assert response.status_code == 404
        elif role == "item-file":
            response = client.get(reverse(pattern.name, args=[b.run.id, "out/report.md"]))
            assert response.status_code == 404 and MARK not in response.content.decode()
        elif role == "token":
            # A forged link for a member of B: no form, and posting a password changes nothing.
            from django.utils.encoding import force_bytes
            from django.utils.http import urlsafe_base64_encode

            from agents_app.models import Membership

            theirs = Membership.objects.filter(team=team_b).select_related("user").first().user
            uidb64 = urlsafe_base64_encode(force_bytes(theirs.pk))
            forged = reverse(pattern.name, args=[uidb64, "c0ffee-0123456789abcdef"])
            response = client.get(forged, follow=True)
            assert response.status_code == 200 and response.context["validlink"] is False
            posted = client.post(forged, {"new_password1": "hijacked-pw-1234", "new_password2": "hijacked-pw-1234"})
            assert posted.status_code == 200 and posted.context["validlink"] is False
            assert type(theirs).objects.get(pk=theirs.pk).password == theirs.password
        elif role == "invitation":
            forged = reverse(pattern.name, args=["inv_" + "c0ffee" * 7])
            assert client.get(forged).status_code == 404 and client.post(forged).status_code == 404
    # The landing page lists the caller's runs, never B's.
    home = client.get(reverse("home")).content.decode()
    assert str(a.run.id) in home and str(b.run.id) not in home and MARK not in home
    assert db_snapshot() == before


# -- websockets ---------------------------------------------------------------------------------

WS_ROUTES = {"ws/runs/": "team-runs", "ws/runs/<str:run_id>/": "run-events", "": "no-such-socket"}


def test_every_websocket_path_is_classified():
    from mas_project.asgi import websocket_urlpatterns

    assert sorted(str(p.pattern) for p in websocket_urlpatterns) == sorted(WS_ROUTES), (
        "classify the websocket path in WS_ROUTES and test it below")


@pytest.mark.django_db(transaction=True)
def test_no_websocket_lets_team_a_follow_team_b(team_a, team_b, make_member, make_token):
    import asyncio

    from asgiref.sync import async_to_sync, sync_to_async
    from tests.sockets import Communicator
    from django.db import transaction

    from mas_core.eventlog import event_append
    from agents_app.models import Run
    from mas_project.asgi import application, websocket_urlpatterns

    ours = Run.objects.create(team=team_a, agent="lead", input="alpha's task")
    theirs = Run.objects.create(team=team_b, agent="lead", input=f"task {MARK}")
    user = make_member(team_a, "admin")
    token = make_token(team_a, user)
    browser = Client()
    browser.force_login(user)
    cookie = [(b"cookie", f"sessionid={browser.cookies['sessionid'].value}".encode()),
              (b"host", b"testserver"), (b"origin", b"http://testserver")]
    bearer = [(b"authorization", f"Bearer {token}".encode())]

    def append(run, n=1):
        with transaction.atomic():
            for i in range(n):
                event_append(run_id=run.id, type="session_start", agent="lead", data={"text": f"{run.input} {i}"})

    async def closed_with(path, headers):
        communicator = Communicator(application, path, headers=headers)
        await communicator.connect()
        output = await communicator.receive_output(timeout=5)
        await communicator.disconnect()
        return output

    async def until_ours(communicator):
        """Messages up to the first about our own run (a timeout here would cancel the socket)."""
        received = []
        while not received or received[-1].get("run", {}).get("id") != str(ours.id):
            received.append(json.loads(await communicator.receive_from(timeout=5)))
        return received

    async def go():
        for pattern in websocket_urlpatterns:
            role = WS_ROUTES[str(pattern.pattern)]
            for headers in (bearer, cookie):
                if role == "no-such-socket":
                    for path in (f"/ws/teams/{team_b.slug}/", f"/ws/runs/{theirs.id}/events/"):
                        assert await closed_with(path, headers) == {"type": "websocket.close", "code": 4404}
                    continue
                if role == "run-events":
                    for query in ("", "?after=0"):
                        assert await closed_with(f"/ws/runs/{theirs.id}/{query}", headers) == {
                            "type": "websocket.close", "code": 4404}
                    continue
                assert await closed_with(f"/ws/runs/?team={team_b.slug}", headers) == {
                    "type": "websocket.close", "code": 4404}
                communicator = Communicator(application, "/ws/runs/?since=0", headers=headers)
                assert (await communicator.connect())[0]
                first = await until_ours(communicator)
                assert first[0] == {"message": "subscribed", "team": team_a.id}
                assert [m["run"]["id"] for m in first[1:]] == [str(ours.id)]
                await sync_to_async(append)(theirs, 3)
                await sync_to_async(append)(ours)
                later = await until_ours(communicator)
                assert [m["run"]["id"] for m in later] == [str(ours.id)], later
                await sync_to_async(append)(theirs)
                assert await communicator.receive_nothing(timeout=1)
                assert MARK not in json.dumps(first + later)
                await communicator.disconnect()

    async_to_sync(go)()


# -- inside a run: the tools of team A's agents reach nothing of team B's --------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_an_agents_tools_reach_nothing_of_another_team(team_a, team_b, celery_worker_process):
    import time

    from agents_app.kinds import AGENT
    from mas_core.definitions.services import definition_parse, definition_save
    from agents_app.execution.runs import run_start
    from agents_app.models import Event, Run, WorkspaceFile
    from memory_app.models import BlackboardEntry, Channel, ChannelMessage

    def save(team, text):
        definition_save(kind=AGENT, team=team, parsed=definition_parse(kind=AGENT, team=team, text=text))

    # Team B's rows, written directly (no run of B's executes during the test).
    save(team_b, f"---\nname: Bravo Helper\n---\n\nYou help. {MARK}\n")
    from agents_app.kinds import SKILL
    from tools_app.kinds import TOOL

    for kind, text in ((SKILL, f"---\nname: Launch codes\ndescription: launch codes {MARK}\n---\n\n{MARK}\n"),
                       (TOOL, f"---\nname: launch_codes\ndescription: Find launch codes {MARK}\n"
                              f"parameters:\n  q: {{}}\nprompt: '{MARK} {{{{q}}}}'\n---\n")):
        definition_save(kind=kind, team=team_b, parsed=definition_parse(kind=kind, team=team_b, text=text))
    theirs = Run.objects.create(team=team_b, agent="bravo-helper", input=f"task {MARK}")
    WorkspaceFile.objects.create(run=theirs, path="out/report.md", content=f"report {MARK}", author="x")
    BlackboardEntry.objects.create(run=theirs, key="plan", value=f"plan {MARK}", author="x")
    ChannelMessage.objects.create(channel=Channel.objects.create(run=theirs, name="news", next_seq=1), seq=1,
                                  sender="x", content=f"news {MARK}")
    memory_store(team_id=team_b.id, content=f"The launch code is {MARK}", shared=True)
    memory_store(team_id=team_b.id, content=f"Lead remembers {MARK}", agent="lead")
    ours = memory_store(team_id=team_a.id, content="The launch code is in the blue folder", shared=True)
    before = db_snapshot()

    save(team_a, "---\nname: Lead\ntools: [knowledge_query, memory_recall, delegate, vfs_read, vfs_list, "
                 "blackboard_read, subscribe, skill_load, tool_search]\n---\n\nYou look around.\n")
    calls = [("knowledge_query", {"query": "launch code"}), ("memory_recall", {"query": "launch code"}),
             ("delegate", {"agent": "bravo-helper", "task": "help"}), ("vfs_read", {"path": "out/report.md"}),
             ("vfs_list", {}), ("blackboard_read", {"key": "plan"}), ("blackboard_read", {}),
             ("subscribe", {"channel": "news", "check": True}), ("skill_load", {"name": "launch-codes"}),
             ("skill_load", {"name": "Launch codes"}), ("tool_search", {"query": "launch codes"})]
    script = {"lead": [{"tool_calls": [{"name": n, "arguments": a} for n, a in calls]}, {"text": "done"}]}
    run = run_start(team=team_a, agent="lead", input="Find the launch code", script=script)
    deadline = time.monotonic() + 60
    while Run.objects.get(pk=run.pk).status not in {"succeeded", "failed"} and time.monotonic() < deadline:
        time.sleep(0.2)
    run = Run.objects.get(pk=run.pk)
    assert run.status == "succeeded", run.error
    results = [(e.data["name"], e.data["ok"], e.data["content"])
               for e in Event.objects.filter(run=run, type="tool_result").order_by("seq")]
    assert [name for name, _, _ in results] == [name for name, _ in calls]
    # Team A's own knowledge is found (the searches work), B's is not.
    assert "blue folder" in results[0][2] and "blue folder" in results[1][2], results[:2]
    assert results[2][1] is False and "bravo-helper" in results[2][2]  # no such agent in this team or run
    assert results[3][1] is False  # not in this run's workspace
    everything = json.dumps(list(Event.objects.filter(run=run).values_list("data", flat=True)), default=str)
    assert MARK not in everything
    # Nothing of B's was touched, not even a memory's access count.
    after = json.loads(db_snapshot())
    for label, rows in json.loads(before).items():
        if label.startswith(("memory_app.Memory", "agents_app.Run", "memory_app.Blackboard", "memory_app.Channel")):
            theirs_before = [r for r in rows if MARK in json.dumps(r) or str(theirs.id) in json.dumps(r)]
            theirs_after = [r for r in after[label] if MARK in json.dumps(r) or str(theirs.id) in json.dumps(r)]
            assert theirs_after == theirs_before, label


# -- the doors beside the API: team A's token reaches nothing of team B's ------------------------------------

DOOR_PATHS = {"/v1": "openai", "/mcp": "mcp", "/ag-ui": "ag-ui", "/a2a": "a2a"}


def test_every_door_is_classified():
    import inspect

    from mas_project import asgi

    source = inspect.getsource(asgi.http_app)
    assert sorted(set(re.findall(r'"(/[a-z0-9-]+)[/"]', source))) == sorted(DOOR_PATHS), (
        "classify the door in DOOR_PATHS and test it below")


@pytest.mark.django_db(transaction=True)
def test_no_door_lets_team_a_call_or_see_team_b(team_a, team_b, make_member, make_token):
    from asgiref.sync import async_to_sync
    from asgiref.testing import ApplicationCommunicator

    from agents_app.models import Run
    from mas_project.asgi import application

    for team, name in ((team_a, "Alpha"), (team_b, "Bravo")):
        text = f"---\nname: {name}\nexpose: true\n---\n\n{MARK if team == team_b else 'Ours.'}\n"
        definition_save(kind=AGENT, team=team, parsed=definition_parse(kind=AGENT, team=team, text=text))
    theirs = Run.objects.create(team=team_b, agent="bravo", input=f"task {MARK}", status="succeeded",
                                result=f"answer {MARK}", door_turns=[["user", f"task {MARK}"]])
    token = make_token(team_a, make_member(team_a, "admin"))
    before = Run.objects.count()

    async def call(method: str, path: str, body: dict | None = None) -> tuple[int, str]:
        headers = [(b"authorization", f"Bearer {token}".encode()), (b"host", b"testserver"),
                   (b"content-type", b"application/json"), (b"accept", b"application/json, text/event-stream")]
        data = json.dumps(body).encode() if body is not None else b""
        app = ApplicationCommunicator(application, {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "path": path,
            "raw_path": path.encode(), "query_string": b"", "headers": headers, "client": ("127.0.0.1", 1),
            "server": ("testserver", 80), "scheme": "http"})
        await app.send_input({"type": "http.request", "body": data, "more_body": False})
        start = await app.receive_output(timeout=10)
        chunks = []
        while True:
            message = await app.receive_output(timeout=10)
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        await app.wait(timeout=5)
        return start["status"], b"".join(chunks).decode()

    async def go():
        said = []
        status, body = await call("GET", "/v1/models")
        assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == ["alpha"]
        said.append(body)
        for path, payload in (("/v1/chat/completions", {"model": "bravo", "messages": [{"role": "user", "content": "x"}]}),
                              ("/v1/responses", {"model": "bravo", "input": "x"}),
                              ("/v1/responses", {"model": "alpha", "input": "x",
                                                 "previous_response_id": f"resp_{theirs.id}"})):
            status, body = await call("POST", path, payload)
            assert status == 404, body
            said.append(body)
        status, body = await call("POST", "/mcp/", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert status == 200, body
        tools = json.loads(body.split("data: ", 1)[1]) if body.startswith("event:") else json.loads(body)
        assert [tool["name"] for tool in tools["result"]["tools"]] == ["alpha"]
        status, body = await call("POST", "/mcp/", {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                                    "params": {"name": "bravo", "arguments": {"task": "x"}}})
        assert status == 200 and '"isError":true' in body.replace(" ", ""), body
        said += [body]
        status, body = await call("GET", f"/ag-ui/runs/{theirs.id}")
        assert status == 404, body
        status, body = await call("POST", "/ag-ui/agents/bravo", {
            "threadId": "t", "runId": "r", "state": {}, "tools": [], "context": [], "forwardedProps": {},
            "messages": [{"id": "m", "role": "user", "content": "x"}]})
        assert status == 404, body
        said += [body]
        status, body = await call("GET", "/a2a/bravo/.well-known/agent-card.json")
        assert status == 404, body
        said += [body]
        message = {"messageId": "m", "role": "user", "parts": [{"kind": "text", "text": "x"}]}
        status, body = await call("POST", "/a2a/bravo", {"jsonrpc": "2.0", "id": 3, "method": "message/send",
                                                         "params": {"message": message}})
        assert status == 404, body
        said += [body]
        for method, params in (("tasks/get", {"id": str(theirs.id)}), ("tasks/cancel", {"id": str(theirs.id)}),
                               ("message/send", {"message": {**message, "taskId": str(theirs.id)}})):
            status, body = await call("POST", "/a2a/alpha", {"jsonrpc": "2.0", "id": 4, "method": method,
                                                             "params": params})
            assert status == 200 and json.loads(body)["error"]["code"] == -32001, body  # task not found
            said += [body]
        assert MARK not in "".join(said)

    async_to_sync(go)()
    assert Run.objects.count() == before  # nothing started
