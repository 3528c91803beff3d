"""The admin in a real browser (Debian's Chromium, Playwright) at a desk's and a phone's width.

A team admin signs in, reads the dashboard and opens a run's live monitor in one click, edits an agent
with the form (a field error shows on its field), compares and restores a version, is warned about a
definition that others use — and no page is wider than the screen at 1400 or 390 px. Screenshots are
saved in ``var/artifacts/``.
"""

from __future__ import annotations

import subprocess
from decimal import Decimal

import pytest
from django.urls import reverse

from agents_app.kinds import AGENT, PROVIDER

from tools_app.kinds import TOOL

from workflows_app.kinds import WORKFLOW
from mas_core.definitions.services import definition_parse, definition_save
from agents_app.models import Activation, Agent, Run, Session
from tests.e2e.test_monitor_browser import ARTIFACTS, Server, chromium  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.django_db(transaction=True)]

WIDTHS = (1400, 390)


@pytest.fixture(scope="module")
def asgi_server(django_db_setup, django_db_blocker):
    """daphne for the module's tests (the flush between tests keeps the content types whose ids the admin's log
    entries name: tests/conftest.py); stopped even while a monitor page's websocket keeps it busy."""
    server = Server()
    server.start()
    yield server
    server.process.terminate()
    try:
        server.process.wait(10)
    except subprocess.TimeoutExpired:  # a websocket of the monitor page may keep it busy
        server.process.kill()
        server.process.wait(10)
LONG_PROMPT = "You write careful, well-sourced drafts. " * 40 + "\n\n" + "A-very-long-unbroken-token-" * 12


def save(team, kind, text: str):
    return definition_save(kind=kind, team=team, parsed=definition_parse(kind=kind, team=team, text=text)).row


@pytest.fixture
def console(team_a, make_member):
    save(team_a, PROVIDER, "---\nname: local\ntype: openai\nbase_url: http://127.0.0.1:9/v1\nmodels:\n"
                           "- name: a-model-with-a-rather-long-name-for-a-narrow-screen\n  tier: small\n---\n")
    save(team_a, TOOL, "---\nname: shout\ndescription: Shouts a text back, loudly, for everyone in the room.\n"
                       "parameters:\n  text:\n    type: string\nprompt: Shout {{text}}\n---\n")
    for n in range(1, 13):
        save(team_a, AGENT, f"---\nname: Writer\ndescription: Draft number {n} of a writer\ntools: [vfs_read, shout]\n"
                            f"---\n\n{LONG_PROMPT}{n}\n")
    save(team_a, WORKFLOW, "---\nname: Pipeline\nsteps:\n- id: draft\n  agent: writer\n  prompt: Draft.\n---\n")
    runs = []
    for status, cost in (("running", "0.25"), ("queued", "0"), ("failed", "1.5"), ("succeeded", "0.000001")):
        run = Run.objects.create(team=team_a, agent="writer", status=status, input="a task " * 50,
                                 cost_usd=Decimal(cost))
        Session.objects.create(run=run, activation=Activation.objects.create(run=run, agent="writer"),
                               agent="writer", cost_usd=Decimal(cost))
        runs.append(run)
    user = make_member(team_a, "admin", username="team-admin-with-a-long-name")
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    return {"user": user, "runs": runs, "writer": Agent.objects.get(team=team_a, slug="writer")}


def admin_sign_in(page, server: str, username: str) -> None:
    page.goto(f"{server}/admin/login/?next=/admin/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", "pw-for-tests-1")
    page.click("input[type=submit]")
    page.wait_for_url(f"{server}/admin/")


def width(page) -> tuple[int, int]:
    return page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")


def test_no_admin_page_is_wider_than_the_screen(console, asgi_server, chromium):  # noqa: F811
    server = asgi_server.url
    writer, run = console["writer"], console["runs"][2]
    pages = {
        "index": "/admin/",
        "agent": reverse("admin:agents_app_agent_change", args=[writer.pk]),
        "agent-add": reverse("admin:agents_app_agent_add"),
        "agents": reverse("admin:agents_app_agent_changelist"),
        "history": reverse("admin:agents_app_agent_history", args=[writer.pk]),
        "diff": reverse("admin:agents_app_agent_diff", args=[writer.pk]) + "?old=1&new=12",
        "delete": reverse("admin:agents_app_agent_delete", args=[writer.pk]),
        "runs": reverse("admin:agents_app_run_changelist"),
        "run": reverse("admin:agents_app_run_change", args=[run.pk]),
        "tokens": reverse("admin:agents_app_apitoken_changelist"),
    }
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    measured = {}
    for screen in WIDTHS:
        context = chromium.new_context(viewport={"width": screen, "height": 900})
        page = context.new_page()
        admin_sign_in(page, server, console["user"].username)
        for name, path in pages.items():
            response = page.goto(f"{server}{path}")
            assert response.status == 200, (name, response.status)
            measured[(screen, name)] = width(page)
            if name in {"index", "agent"}:
                page.screenshot(path=str(ARTIFACTS / f"admin-{name}-{screen}.png"), full_page=True)
        context.close()
    too_wide = {key: value for key, value in measured.items() if value[0] > value[1]}
    assert too_wide == {}
    assert {value[1] for (screen, _), value in measured.items() if screen == 390} == {390}


def test_dashboard_to_monitor_in_one_click(console, asgi_server, chromium):  # noqa: F811
    server = asgi_server.url
    page = chromium.new_page(viewport={"width": 390, "height": 800})
    admin_sign_in(page, server, console["user"].username)
    figures = {el.get_attribute("data-figure"): el.inner_text() for el in page.query_selector_all(".mas-figure")}
    assert figures == {"running": "1\nrunning", "waiting": "0\nwaiting", "queued": "1\nqueued",
                       "failed_today": "1\nfailed today"}
    assert page.inner_text("[data-period=today] tfoot td") == "$1.750001"
    failed = console["runs"][2]
    page.click(f"tr[data-run='{failed.pk}'] a.mas-monitor-link")
    page.wait_for_url(f"{server}/runs/{failed.pk}/", timeout=90_000)
    page.close()


def test_editing_an_agent_with_the_form_a_field_error_then_a_save(console, asgi_server, chromium):  # noqa: F811
    server = asgi_server.url
    writer = console["writer"]
    page = chromium.new_page(viewport={"width": 390, "height": 900})
    admin_sign_in(page, server, console["user"].username)
    page.goto(f"{server}{reverse('admin:agents_app_agent_change', args=[writer.pk])}")
    # The form is shown, the markdown one click away.
    assert page.is_visible("fieldset.mas-fields-editor") and not page.is_visible("fieldset.mas-markdown-editor")
    page.check("input[name=editor][value=markdown]")
    page.wait_for_selector("fieldset.mas-markdown-editor", state="visible")  # the server composes it first
    assert page.is_visible("fieldset.mas-markdown-editor") and not page.is_visible("fieldset.mas-fields-editor")
    page.check("input[name=editor][value=fields]")
    page.wait_for_selector("fieldset.mas-fields-editor", state="visible")

    page.fill("input[name=escalation]", "large, small")
    with page.expect_response(lambda response: response.request.method == "POST", timeout=90_000):
        page.click("input[name=_save] >> nth=0")  # Save on top
    page.wait_for_selector(".field-escalation .errorlist")
    error = page.inner_text(".field-escalation .errorlist")
    assert error == "small comes after large: a ladder never steps down"
    assert width(page)[0] <= 390

    page.fill("input[name=escalation]", "")
    page.check("input[name=tools][value=web_fetch]")
    page.click("input[name=_save] >> nth=-1")
    page.wait_for_url(f"{server}{reverse('admin:agents_app_agent_changelist')}", timeout=90_000)
    writer.refresh_from_db()
    assert (writer.version, writer.spec["tools"]) == (13, ["vfs_read", "web_fetch", "shout"])


def test_compare_restore_and_the_dependents_warning(console, asgi_server, chromium):  # noqa: F811
    server = asgi_server.url
    writer = console["writer"]
    page = chromium.new_page(viewport={"width": 390, "height": 900})
    admin_sign_in(page, server, console["user"].username)
    page.goto(f"{server}{reverse('admin:agents_app_agent_change', args=[writer.pk])}")
    page.fill("input[name=old][form=mas-compare-form]", "2")
    page.click("button[form=mas-compare-form]")
    page.wait_for_url("**/versions/diff/?old=2&new=12", timeout=90_000)
    assert page.inner_text("#mas-diff .mas-del >> nth=0") == "-description: Draft number 2 of a writer"
    page.click("text=Restore v2…")
    page.wait_for_url("**/versions/restore/?version=2", timeout=90_000)
    page.click("input[value='Restore v2']")
    page.wait_for_url(f"{server}{reverse('admin:agents_app_agent_change', args=[writer.pk])}", timeout=90_000)
    assert "Restored v2 as v13." in page.inner_text(".messagelist")
    writer.refresh_from_db()
    assert (writer.version, writer.description) == (13, "Draft number 2 of a writer")

    page.goto(f"{server}{reverse('admin:agents_app_agent_delete', args=[writer.pk])}")
    assert "Agent writer is used by workflow pipeline (step draft)." in page.inner_text("#mas-dependents")
    page.click("input[value='Yes, delete it anyway']")  # the checkbox is required: the browser refuses
    assert Agent.objects.filter(pk=writer.pk).exists()
    page.check("input[name=force]")
    page.click("input[value='Yes, delete it anyway']")
    page.wait_for_url(f"{server}{reverse('admin:agents_app_agent_changelist')}", timeout=90_000)
    assert not Agent.objects.filter(pk=writer.pk).exists()
