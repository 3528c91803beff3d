"""The run page's people-in-the-loop part: who gets the decide buttons, and the script that draws them.

The buttons themselves are exercised in a browser (tests/e2e/test_approvals_browser.py).
"""

import pytest
from django.templatetags.static import static
from django.test import Client

from agents_app.models import Run

pytestmark = pytest.mark.django_db


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def approvals_section(page: str) -> str:
    start = page.index('<section id="approvals"')
    return page[start:page.index(">", start) + 1]


def test_operators_get_the_decide_buttons_viewers_only_see_the_requests(team_a, make_member):
    run = Run.objects.create(team=team_a, agent="coder", input="x", status="waiting")
    operator = browser(make_member(team_a, role="operator"))
    page = operator.get(f"/runs/{run.id}/").content.decode()
    section = approvals_section(page)
    csrf = operator.cookies["csrftoken"].value
    assert 'data-can-decide="1"' in section and 'data-team="alpha"' in section
    assert 'data-csrf="' in section and len(section.split('data-csrf="')[1].split('"')[0]) == 64
    assert csrf  # the page set the cookie its token goes with
    # approvals.js is loaded before run.js, whose events it listens to.
    assert page.index(static("monitor/approvals.js")) < page.index(static("monitor/run.js"))
    assert static("monitor/approvals.css") in page
    assert 'id="cancel-form"' in page  # a waiting run can be cancelled

    viewer = browser(make_member(team_a, role="viewer"))
    section = approvals_section(viewer.get(f"/runs/{run.id}/").content.decode())
    assert 'data-can-decide="0"' in section and "data-csrf" not in section


def test_the_monitor_scripts_are_served(team_a, make_member, settings):
    settings.WHITENOISE_USE_FINDERS = True  # as under DEBUG; production serves collectstatic's copy
    client = Client()
    script = b"".join(client.get(static("monitor/approvals.js")).streaming_content).decode()
    assert 'fetch(`/api/approvals/${requestId}`' in script
    assert '"X-CSRFToken": csrf, "X-MAS-Team": team' in script
    assert 'document.addEventListener("monitor:event"' in script
    run_js = b"".join(client.get(static("monitor/run.js")).streaming_content).decode()
    assert 'document.dispatchEvent(new CustomEvent("monitor:event", { detail: e }))' in run_js
    response = client.get(static("monitor/approvals.css"))
    assert response.status_code == 200 and response["Content-Type"].startswith("text/css")
