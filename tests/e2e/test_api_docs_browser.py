"""The API docs (/api/docs, django-ninja's Swagger UI) in Chromium with a signed-in browser (issue 27, point 2).

"Try it out" works with the session: a POST is not refused for CSRF (the page sends the token; a request
without it still is), GET /api/me answers for a member of one team, and a member of two acts in the team
chosen at the top of the page (the API itself still asks for the header by name). "Authorize" offers the
bearer token only. The page has a viewport and is no wider than a phone's screen.
"""

from __future__ import annotations

import json

import pytest

from agents_app.models import Agent
from mas_core.teams import membership_set
from tests.e2e.test_admin_browser import ARTIFACTS, admin_sign_in, asgi_server  # noqa: F401 (a fixture)
from tests.e2e.test_monitor_browser import chromium  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.django_db(transaction=True)]

PHONE = {"is_mobile": True, "has_touch": True, "device_scale_factor": 2}  # a phone's browser: meta viewport obeyed
# The elements wider than the screen, to say what overflows when something does.
OVERFLOW = """() => [...document.querySelectorAll('body *')]
    .filter(el => el.getBoundingClientRect().right > window.innerWidth + 0.5 && el.getClientRects().length)
    .slice(0, 8).map(el => el.tagName + '.' + [...el.classList].join('.') + ' ' + Math.round(el.getBoundingClientRect().right))"""


def fits(page, screen: int) -> None:
    assert page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]") == [screen, screen], \
        page.evaluate(OVERFLOW)


def open_docs(chromium, server: str, username: str, screen: int):  # noqa: F811
    context = chromium.new_context(viewport={"width": screen, "height": 900}, **(PHONE if screen < 600 else {}))
    page = context.new_page()
    admin_sign_in(page, server, username)
    page.goto(f"{server}/api/docs")
    page.wait_for_selector("#operations-me-me")
    return context, page


def try_it(page, operation: str, body: dict | None = None) -> tuple[int, dict, dict]:
    """Open ``operation``, Try it out, (type the body,) Execute: the answer and the request's headers."""
    block = f"#{operation}"
    if not page.is_visible(f"{block} .try-out__btn"):
        page.click(f"{block} .opblock-summary-control")
    if page.inner_text(f"{block} .try-out__btn") == "Try it out":
        page.click(f"{block} .try-out__btn")
    if body is not None:
        page.fill(f"{block} textarea.body-param__text", json.dumps(body))
    with page.expect_response(lambda r: "/api/" in r.url and r.request.resource_type == "fetch",
                              timeout=90_000) as info:
        page.click(f"{block} .execute")
    response = info.value
    page.wait_for_selector(f"{block} .live-responses-table .response-col_status")
    return response.status, response.json(), response.request.all_headers()


@pytest.mark.parametrize("screen", [1400, 390])
def test_try_it_out_works_with_the_session_of_a_member_of_one_team(team_a, make_member, asgi_server, chromium,  # noqa: F811
                                                                   screen):
    user = make_member(team_a, "editor", username="docs-reader")
    context, page = open_docs(chromium, asgi_server.url, user.username, screen)
    assert page.get_attribute("meta[name=viewport]", "content") == "width=device-width, initial-scale=1"
    assert page.evaluate("window.innerWidth") == screen  # 980 at 390 before: no viewport meta
    assert page.get_attribute("link[rel=icon]", "href") == "/static/mas/favicon.svg"  # MAS's, as every page
    assert page.inner_text("#mas-docs-bar") == (
        "Signed in as docs-reader: “Try it out” uses this session.\nTeam: alpha")
    fits(page, screen)

    # Authorize offers the bearer token, not a sessionid cookie field.
    page.click(".auth-wrapper .authorize")
    page.wait_for_selector(".auth-container")
    assert page.eval_on_selector_all(".auth-container h4", "hs => hs.map(h => h.textContent)") == [
        "TokenAuth\xa0 (http, Bearer)"]
    assert "sessionid" not in page.inner_text(".modal-ux")
    page.click(".modal-ux .close-modal")

    status, answer, headers = try_it(page, "operations-me-me")
    assert (status, answer["user"]["username"], answer["team"]["slug"], answer["auth"]) == (
        200, "docs-reader", "alpha", "session")
    status, answer, headers = try_it(page, "operations-agents-agent_create", {"name": "Scout"})
    assert status == 201, answer
    assert answer["slug"] == "scout" and headers["x-csrftoken"]
    assert list(Agent.objects.filter(team=team_a).values_list("slug", flat=True)) == ["scout"]
    fits(page, screen)
    page.screenshot(path=str(ARTIFACTS / f"api-docs-{screen}.png"), full_page=False)

    # The API's CSRF check is the same as before for anything else: the session without the token is refused.
    refused = page.request.post(f"{asgi_server.url}/api/agents", data=json.dumps({"name": "Forged"}),
                                headers={"Content-Type": "application/json"})
    assert (refused.status, refused.json()) == (
        403, {"detail": "CSRF check failed: send the csrftoken cookie's value in X-CSRFToken"})
    assert list(Agent.objects.filter(team=team_a).values_list("slug", flat=True)) == ["scout"]
    context.close()


def test_a_member_of_two_teams_acts_in_the_team_chosen_on_the_page(team_a, team_b, make_member, asgi_server,  # noqa: F811
                                                                   chromium):
    user = make_member(team_a, "viewer", username="two-teams")
    membership_set(team=team_b, user=user, role="editor")
    context, page = open_docs(chromium, asgi_server.url, user.username, 390)
    assert page.eval_on_selector_all("#mas-docs-team option", "os => os.map(o => [o.value, o.selected])") == [
        ["alpha", True], ["beta", False]]
    status, answer, headers = try_it(page, "operations-me-me")
    assert (status, answer["team"]["slug"], answer["role"], headers["x-mas-team"]) == (200, "alpha", "viewer", "alpha")
    page.select_option("#mas-docs-team", "beta")
    status, answer, _ = try_it(page, "operations-me-me")
    assert (status, answer["team"]["slug"], answer["role"]) == (200, "beta", "editor")
    # The operation's own X-MAS-Team field wins over the page's choice.
    page.fill("#operations-me-me tr[data-param-name=X-MAS-Team] input", "alpha")
    status, answer, _ = try_it(page, "operations-me-me")
    assert (status, answer["team"]["slug"]) == (200, "alpha")
    fits(page, 390)
    # Outside the page the session's requests still have to name the team, and are told so.
    plain = page.request.get(f"{asgi_server.url}/api/me")
    assert (plain.status, plain.json()) == (
        400, {"detail": "you are in several teams (alpha, beta): name one in the X-MAS-Team header"})
    context.close()
