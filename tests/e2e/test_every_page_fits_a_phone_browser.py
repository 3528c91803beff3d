"""No page is wider than a phone (390 px): one sweep of every page a team's admin reaches.

The admin's index and app lists, every registered model's list, its add page and the change page of the list's
first row (found by clicking through, as a person would); the monitor's pages (home, runs, a run, the start form);
the API's interactive docs; the sign-in page. Measured as the document's scroll width against the window's.
Screenshots of what is too wide are saved in ``var/artifacts/`` to see why.
"""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import NoReverseMatch, reverse

from agents_app.models import ApprovalRequest
from tests.e2e.test_admin_browser import admin_sign_in, asgi_server, console, width  # noqa: F401 (fixtures)
from tests.e2e.test_dashboard_and_start_browser import overflowing
from tests.e2e.test_monitor_browser import ARTIFACTS, chromium  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.django_db(transaction=True)]

SCREEN = 390


def admin_pages() -> list[str]:
    """The admin's index, each app's list and each model's list and add page (reversed from the registry)."""
    pages = ["/admin/"]
    for model in admin.site._registry:
        meta = model._meta
        app_list = reverse("admin:app_list", args=[meta.app_label])
        if app_list not in pages:
            pages.append(app_list)
        pages.append(reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"))
        try:
            pages.append(reverse(f"admin:{meta.app_label}_{meta.model_name}_add"))
        except NoReverseMatch:
            pass
    return pages


def test_no_page_a_team_admin_reaches_is_wider_than_a_phone(console, asgi_server, chromium):  # noqa: F811
    server, run = asgi_server.url, console["runs"][2]
    session = run.sessions.get()
    ApprovalRequest.objects.create(team=run.team, run=run, session=session, agent="writer", call_id="c1",
                                   kind="approval", tool="vfs_write", arguments={"path": "notes/a-long-name.md",
                                                                                  "content": "word " * 200},
                                   deadline=run.created_at)
    context = chromium.new_context(viewport={"width": SCREEN, "height": 900})
    page = context.new_page()
    too_wide, seen = {}, []

    def measure(path: str) -> None:
        response = page.goto(f"{server}{path}")
        if response.status in {403, 404}:  # not this admin's to see (a superuser's page, an add page none may use)
            return
        assert response.status == 200, (path, response.status)
        seen.append(path)
        found = width(page)
        if found != [SCREEN, SCREEN]:
            too_wide[path] = (found, overflowing(page, SCREEN)[:5])
            name = path.strip("/").replace("/", "-") or "index"
            page.screenshot(path=str(ARTIFACTS / f"too-wide-{name}.png"), full_page=True)

    try:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        for path in ["/accounts/login/", "/admin/login/"]:
            measure(path)
        admin_sign_in(page, server, console["user"].username)
        for path in admin_pages():
            measure(path)
            if path.endswith("/") and path.count("/") == 4 and not path.endswith("/add/"):  # a model's list
                first = page.query_selector("#result_list tbody tr a[href]")
                if first is not None and first.get_attribute("href").startswith(path):
                    measure(first.get_attribute("href"))
        for path in ["/", "/runs/", f"/runs/{run.pk}/", "/runs/start/", "/api/docs"]:
            measure(path)
    finally:
        context.close()
    assert too_wide == {}
    # The sweep saw the pages it is about: every model's list, change pages, the monitor and the docs.
    assert len([p for p in seen if p.endswith("/change/")]) >= 8, seen
    assert {"/accounts/login/", "/admin/login/", "/admin/", "/runs/", f"/runs/{run.pk}/", "/runs/start/", "/api/docs"} <= set(seen)
