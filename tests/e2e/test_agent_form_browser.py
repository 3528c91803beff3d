"""The agent form in Chromium (issue 27, points 1 and 4), at a desk's and a phone's width.

Switching between the form and the markdown carries what was typed and not saved, both ways, and saves
nothing; a field that cannot be composed keeps the form shown and says why. Approval rules are rows of the
form. The tool checklist spreads over the form's width in columns, so the page is far shorter than the
one-column list it was; no admin page is wider than a phone's screen.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents_app.models import Agent, DefinitionVersion
from mas_core.definitions.storage import team_defs_dir
from tests.e2e.test_admin_browser import ARTIFACTS, admin_sign_in, asgi_server, console, width  # noqa: F401
from tests.e2e.test_monitor_browser import chromium  # noqa: F401 (a fixture)
from tools_app.catalog import BUILTIN_TOOLS

pytestmark = [pytest.mark.django_db(transaction=True)]

FORM = "fieldset.mas-fields-editor"
MARKDOWN = "fieldset.mas-markdown-editor"
PHONE = {"is_mobile": True, "has_touch": True, "device_scale_factor": 2}  # a phone's browser: meta viewport obeyed

COMPOSED = (
    "---\nname: Writer\ndescription: Edited in the form\ntier: large\ntemperature: 0.3\ntools:\n- vfs_read\n"
    "- web_fetch\n- shout\napproval:\n- tool: web_fetch\n  default: reject\n---\n\nShort prompt.\n"
)
EDITED = (
    "---\nname: Writer\ndescription: Edited in the form\ntier: small\nmax_tokens: 500\ntools:\n- vfs_read\n"
    "- shout\napproval:\n- tool: web_fetch\n  default: reject\n- tool: mcp__*\n  deadline_s: 120\n"
    "colour: teal\n---\n\nEdited in the markdown.\n"
)


def new_page(chromium, screen: int):  # noqa: F811
    context = chromium.new_context(viewport={"width": screen, "height": 900}, **(PHONE if screen < 600 else {}))
    return context, context.new_page()


def saved_state(agent: Agent) -> tuple:
    agent.refresh_from_db()
    file = team_defs_dir(agent.team) / "agents" / f"{agent.slug}.md"
    return (agent.version, agent.content, file.read_text(),
            DefinitionVersion.objects.filter(team=agent.team, kind="agent", slug=agent.slug).count())


def rows(page) -> list[dict]:
    return page.eval_on_selector_all(
        ".mas-rows[data-name=approval] > .mas-row-list > .mas-row",
        "rows => rows.map(r => Object.fromEntries([...r.querySelectorAll('[name]')]"
        ".filter(e => !e.name.endsWith('-was')).map(e => [e.name.split('-').pop(), e.value])))")


@pytest.mark.parametrize("screen", [1400, 390])
def test_switching_views_carries_unsaved_edits_both_ways_and_saves_nothing(console, asgi_server, chromium,  # noqa: F811
                                                                           screen):
    server, writer = asgi_server.url, console["writer"]
    before = saved_state(writer)
    context, page = new_page(chromium, screen)
    admin_sign_in(page, server, console["user"].username)
    page.goto(f"{server}{reverse('admin:agents_app_agent_change', args=[writer.pk])}")
    assert page.is_visible(FORM) and not page.is_visible(MARKDOWN)

    # Edited in the form, not saved: a description, a tier, a temperature, a tool, an approval rule, the prompt.
    page.fill("textarea[name=agent_description]", "Edited in the form")
    page.select_option("select[name=agent_tier]", "large")
    page.fill("input[name=temperature]", "0.3")
    page.check("input[name=tools][value=web_fetch]")
    page.click(".mas-rows[data-name=approval] .mas-row-add")
    page.fill("input[name=approval-0-tool]", "web_fetch")
    page.select_option("select[name=approval-0-default]", "reject")
    page.fill("textarea[name=prompt]", "Short prompt.")

    # A field that cannot be composed: the form stays, and says why.
    page.fill("input[name=max_tokens]", "0")
    # A click, not check(): the refused switch puts the choice back, maybe before check() would look at it.
    page.click("input[name=editor][value=markdown]")
    page.wait_for_selector("#mas-switch-errors:not([hidden])")
    assert page.inner_text("#mas-switch-errors p") == "Not switched: fix these in the form first."
    assert page.eval_on_selector_all("#mas-switch-errors li", "els => els.map(e => e.textContent)") == [
        "Max tokens: Ensure this value is greater than or equal to 1."]
    assert page.is_visible(FORM) and not page.is_visible(MARKDOWN)
    assert page.is_checked("input[name=editor][value=fields]")
    page.fill("input[name=max_tokens]", "")

    # To the markdown: the form's unsaved values, as the save would write them.
    page.check("input[name=editor][value=markdown]")
    page.wait_for_selector(MARKDOWN, state="visible")
    assert not page.is_visible(FORM) and not page.is_visible("#mas-switch-errors")
    assert page.input_value("textarea[name=markdown]") == COMPOSED
    assert saved_state(writer) == before
    assert width(page)[0] <= screen

    # Edited in the markdown (a key the form has no field for among the edits), back to the form: all of it shows.
    page.fill("textarea[name=markdown]", EDITED)
    page.check("input[name=editor][value=fields]")
    page.wait_for_selector(FORM, state="visible")
    assert not page.is_visible(MARKDOWN)
    assert page.input_value("select[name=agent_tier]") == "small"
    assert page.input_value("input[name=max_tokens]") == "500"
    assert page.input_value("input[name=temperature]") == ""
    assert page.input_value("textarea[name=agent_description]") == "Edited in the form"
    assert page.eval_on_selector_all("input[name=tools]:checked", "els => els.map(e => e.value)") == [
        "vfs_read", "shout"]
    assert rows(page) == [{"tool": "web_fetch", "deadline_s": "", "default": "reject", "reason": ""},
                          {"tool": "mcp__*", "deadline_s": "120", "default": "", "reason": ""}]
    assert page.eval_on_selector_all(".mas-rows[data-name=approval] .mas-row-number",
                                     "els => els.map(e => e.textContent)") == ["1", "2"]
    assert page.input_value("textarea[name=prompt]") == "Edited in the markdown."
    assert saved_state(writer) == before
    assert width(page)[0] <= screen
    page.screenshot(path=str(ARTIFACTS / f"admin-agent-switched-{screen}.png"), full_page=True)

    # Saved from the form: the fields, with the markdown's key that has no field kept.
    page.click("input[name=_continue] >> nth=-1")
    page.wait_for_selector(".messagelist", timeout=90_000)
    version, content, file_text, versions = saved_state(writer)
    assert (version, content, file_text, versions) == (before[0] + 1, EDITED, EDITED, before[3] + 1)
    context.close()


@pytest.mark.parametrize(("screen", "columns", "height_below"), [(1400, 4, 2200), (390, 1, 4700)])
def test_the_tool_checklist_spreads_over_the_form_and_the_page_fits(console, asgi_server, chromium,  # noqa: F811
                                                                    screen, columns, height_below):
    context, page = new_page(chromium, screen)
    admin_sign_in(page, asgi_server.url, console["user"].username)
    page.goto(f"{asgi_server.url}{reverse('admin:agents_app_agent_add')}")
    layout = page.evaluate("""() => {
        const list = document.getElementById('id_tools'), row = list.closest('.form-row');
        const items = [...list.children].map(el => el.getBoundingClientRect());
        const box = list.getBoundingClientRect(), rowBox = row.getBoundingClientRect();
        const style = getComputedStyle(row);
        return {count: items.length, columns: new Set(items.map(r => Math.round(r.left))).size,
                width: box.width, inner: rowBox.width - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight),
                height: document.documentElement.scrollHeight};
    }""")
    assert layout["count"] == len(BUILTIN_TOOLS) + 1 == 25  # the built-ins and the team's custom tool
    assert layout["columns"] == columns
    # The list is as wide as its form row (it was a ~160 px column beside the label).
    assert layout["inner"] - 1 <= layout["width"] <= layout["inner"] + 1
    # 4,372 px at 1400 (about half of it now) and 5,270 at 390 with the list in a 160 px column.
    assert layout["height"] < height_below
    assert page.is_visible(".field-approval .mas-row-add")  # approval rules have their field
    assert width(page) == [screen, screen]
    page.screenshot(path=str(ARTIFACTS / f"admin-agent-add-{screen}.png"), full_page=True)
    context.close()


def test_the_admin_index_and_the_agent_add_page_fit_a_phone(console, asgi_server, chromium):  # noqa: F811
    context, page = new_page(chromium, 390)
    admin_sign_in(page, asgi_server.url, console["user"].username)
    for path in ("/admin/", reverse("admin:agents_app_agent_add")):
        page.goto(f"{asgi_server.url}{path}")
        assert page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]") == [390, 390], path
    context.close()
