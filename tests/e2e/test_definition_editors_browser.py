"""The definition editors in Chromium: an agent's prompt with its markdown preview, a workflow edited by form
beside its step graph.

The preview renders markdown with the monitor's renderer, so a <script> or a javascript: link in a prompt
shows as text and never runs. The workflow's graph follows the step rows as they are edited, before any
save; the save makes a new version; an error shows under the cell it is about; the form fits a 390 px screen.
"""

from __future__ import annotations

import random

import pytest
from django.urls import reverse

from agents_app.kinds import AGENT
from workflows_app.kinds import WORKFLOW
from agents_app.models import DefinitionVersion
from tests.e2e.test_admin_browser import ARTIFACTS, admin_sign_in, asgi_server, console, save, width  # noqa: F401
from tests.e2e.test_monitor_browser import chromium  # noqa: F401 (a fixture)
from workflows_app.engine.dag import topological_levels
from workflows_app.models import Workflow

pytestmark = [pytest.mark.django_db(transaction=True)]

PROMPT = ("# Reviewer\n\nYou **review** drafts.\n\n<script>window.pwned = 1</script>\n"
          "<img src=x onerror=\"window.pwned = 2\">\n\n[a link](javascript:window.pwned=3) [docs](https://example.org/)")
FLOW = ("---\nname: Three steps\ninputs:\n- topic\nsteps:\n- id: draft\n  agent: writer\n  prompt: Draft {topic}\n"
        "- id: check\n  agent: writer\n  prompt: Check\n- id: publish\n  agent: writer\n  prompt: Publish\n"
        "  depends_on:\n  - draft\n---\n")

NODES = "gs => gs.map(g => [g.dataset.step, Number(g.dataset.level)])"
EDGES = "ps => ps.map(p => [p.dataset.from, p.dataset.to])"


@pytest.fixture
def flow(console, team_a):
    save(team_a, AGENT, "---\nname: Reviewer\ndescription: Reviews\n---\n\nYou review.\n")
    return save(team_a, WORKFLOW, FLOW)


def test_the_agent_prompt_is_previewed_as_markdown_that_runs_no_html(console, asgi_server, chromium):  # noqa: F811
    server, writer = asgi_server.url, console["writer"]
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    admin_sign_in(page, server, console["user"].username)
    page.goto(f"{server}{reverse('admin:agents_app_agent_change', args=[writer.pk])}")
    assert page.is_visible("textarea[name=prompt]") and not page.is_visible(".mas-md-preview")
    page.fill("textarea[name=prompt]", PROMPT)
    page.click(".mas-md-tab[data-mode=preview]")
    assert not page.is_visible("textarea[name=prompt]") and page.is_visible(".mas-md-preview")
    assert page.text_content(".mas-md-preview h1") == "Reviewer"
    assert page.text_content(".mas-md-preview strong") == "review"
    assert page.eval_on_selector_all(".mas-md-preview script, .mas-md-preview img", "els => els.length") == 0
    assert "<script>window.pwned = 1</script>" in page.text_content(".mas-md-preview")
    assert page.eval_on_selector_all(".mas-md-preview a", "as => as.map(a => [a.textContent, a.getAttribute('href')])"
                                     ) == [["docs", "https://example.org/"]]
    assert "[a link](javascript:window.pwned=3)" in page.text_content(".mas-md-preview")
    assert page.evaluate("window.pwned") is None
    # Side by side: both, the preview following the text as it is typed.
    page.click(".mas-md-tab[data-mode=both]")
    assert page.is_visible("textarea[name=prompt]") and page.is_visible(".mas-md-preview")
    page.fill("textarea[name=prompt]", "## Second thoughts\n\n- one\n- two")
    assert page.text_content(".mas-md-preview h2") == "Second thoughts"
    assert page.eval_on_selector_all(".mas-md-preview li", "lis => lis.map(li => li.textContent)") == ["one", "two"]
    box = page.eval_on_selector_all("textarea[name=prompt], .mas-md-preview",
                                    "els => els.map(e => Math.round(e.getBoundingClientRect().top))")
    assert box[0] == box[1]  # beside each other
    page.screenshot(path=str(ARTIFACTS / "admin-agent-preview-1400.png"), full_page=False)
    page.click("input[name=_continue] >> nth=-1")
    page.wait_for_selector(".messagelist", timeout=90_000)
    writer.refresh_from_db()
    assert (writer.version, writer.body) == (13, "## Second thoughts\n\n- one\n- two")
    assert page.evaluate("window.pwned") is None
    page.close()


def test_editing_a_workflows_steps_redraws_its_graph_before_the_save(flow, console, asgi_server, chromium):  # noqa: F811
    server = asgi_server.url
    url = f"{server}{reverse('admin:workflows_app_workflow_change', args=[flow.pk])}"
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    admin_sign_in(page, server, console["user"].username)
    page.goto(url)
    assert page.is_visible("fieldset.mas-fields-editor") and not page.is_visible("fieldset.mas-markdown-editor")
    # The graph drawn: the levels of topological_levels, an edge a dependency.
    edges = {step["id"]: step.get("depends_on", []) for step in flow.spec["steps"]}
    levels = {step: n for n, level in enumerate(topological_levels(edges)) for step in level}
    assert levels == {"draft": 0, "check": 0, "publish": 1}
    page.wait_for_selector("#mas-step-graph g.node")
    assert dict(page.eval_on_selector_all("#mas-step-graph g.node", NODES)) == levels
    assert page.eval_on_selector_all("#mas-step-graph path.edge", EDGES) == [["draft", "publish"]]
    # The graph is beside the steps.
    graph, rows = (page.eval_on_selector(selector, "e => e.getBoundingClientRect().toJSON()")
                   for selector in ("#mas-step-graph", ".mas-rows[data-name=steps]"))
    assert graph["left"] >= rows["right"] and graph["top"] < rows["bottom"]

    # "check" now depends on "draft", and a step is added after "check": redrawn at once, nothing saved yet.
    page.fill("input[name=steps-1-depends_on]", "draft")
    page.wait_for_function("document.querySelectorAll('#mas-step-graph path.edge').length === 2")
    page.click(".mas-rows[data-name=steps] .mas-row-add")
    page.fill("input[name=steps-3-id]", "announce")
    page.fill("input[name=steps-3-agent]", "reviewer")
    page.fill("input[name=steps-3-depends_on]", "check, publish")
    # Drawn as each field changes: the new node shows with its id, its edges (and level) once its dependencies do.
    page.wait_for_function("document.querySelectorAll('#mas-step-graph path.edge').length === 4")
    assert dict(page.eval_on_selector_all("#mas-step-graph g.node", NODES)) == {
        "draft": 0, "check": 1, "publish": 1, "announce": 2}
    assert sorted(page.eval_on_selector_all("#mas-step-graph path.edge", EDGES)) == [
        ["check", "announce"], ["draft", "check"], ["draft", "publish"], ["publish", "announce"]]
    assert page.text_content("#mas-step-graph g.node[data-step=announce] text.sub") == "reviewer"
    assert Workflow.objects.get(pk=flow.pk).version == 1
    # A step taken out leaves the graph too.
    page.click(".mas-row[data-index='2'] .mas-row-remove")
    page.wait_for_function("!document.querySelector('#mas-step-graph g.node[data-step=publish]')")
    page.fill("input[name=steps-3-depends_on]", "check")
    page.screenshot(path=str(ARTIFACTS / "admin-workflow-form-1400.png"), full_page=True)

    page.click("input[name=_continue] >> nth=-1")
    page.wait_for_selector(".messagelist", timeout=90_000)
    flow.refresh_from_db()
    assert flow.version == 2
    assert flow.spec["steps"] == [
        {"id": "draft", "agent": "writer", "prompt": "Draft {topic}"},
        {"id": "check", "agent": "writer", "prompt": "Check", "depends_on": ["draft"]},
        {"id": "announce", "agent": "reviewer", "depends_on": ["check"]}]
    version = DefinitionVersion.objects.get(team=flow.team, kind="workflow", slug=flow.slug, number=2)
    assert (version.content, version.source) == (flow.content, "admin")
    # Drawn again from the saved workflow (by the page's script, which may run after the message is in the DOM).
    page.wait_for_function("document.querySelectorAll('#mas-step-graph g.node').length === 3")
    assert dict(page.eval_on_selector_all("#mas-step-graph g.node", NODES)) == {"draft": 0, "check": 1, "announce": 2}
    page.close()


def test_a_workflow_error_shows_on_its_cell_and_the_form_fits_a_phone(flow, console, asgi_server, chromium):  # noqa: F811
    server = asgi_server.url
    url = f"{server}{reverse('admin:workflows_app_workflow_change', args=[flow.pk])}"
    page = chromium.new_page(viewport={"width": 390, "height": 900})
    admin_sign_in(page, server, console["user"].username)
    page.goto(url)
    assert width(page) == [390, 390]
    page.fill("input[name=steps-2-agent]", "ghost")
    page.fill("input[name=steps-0-depends_on]", "publish")  # a cycle: drawn as such before the save
    page.wait_for_selector("#mas-step-graph g.node.blocked[data-step=draft]")
    assert page.text_content("#mas-step-graph-note") == "On a cycle, or after one (these cannot run): draft, publish"
    page.click("input[name=_save] >> nth=0")
    # Both errors of the graph check, each under the cell it is about.
    page.wait_for_selector(".mas-row[data-index='2'] .mas-cell-agent .errorlist", timeout=90_000)
    assert page.inner_text(".mas-row[data-index='2'] .mas-cell-agent .errorlist") == \
        "agent 'ghost' does not exist in this team"
    assert page.inner_text(".mas-row[data-index='0'] .mas-cell-depends_on .errorlist") == \
        "cycle: draft → publish → draft"
    assert page.eval_on_selector_all(".field-steps .errorlist", "uls => uls.length") == 3  # with the summary
    assert page.get_attribute("input[name=steps-2-agent]", "aria-invalid") == "true"
    assert page.input_value("input[name=steps-2-agent]") == "ghost"
    assert width(page) == [390, 390]
    page.screenshot(path=str(ARTIFACTS / "admin-workflow-form-390.png"), full_page=True)
    assert Workflow.objects.get(pk=flow.pk).version == 1
    # The add page, with a template's steps, fits too.
    page.goto(f"{server}{reverse('admin:workflows_app_workflow_add')}?template=review-loop")
    page.wait_for_selector("#mas-step-graph g.node")
    assert width(page) == [390, 390]
    page.close()


def test_the_graphs_levels_are_topological_levels(flow, console, asgi_server, chromium):  # noqa: F811
    """monitor/dag.js's levels against workflows_app.engine.dag's, on 200 graphs (some with cycles)."""
    rng = random.Random(16)
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    admin_sign_in(page, asgi_server.url, console["user"].username)
    page.goto(f"{asgi_server.url}{reverse('admin:workflows_app_workflow_change', args=[flow.pk])}")
    page.wait_for_selector("#mas-step-graph g.node")
    for _ in range(200):
        ids = [f"s{n}" for n in range(rng.randint(1, 9))]
        edges = {step: rng.sample(ids, rng.randint(0, min(3, len(ids)))) for step in ids}
        for step in ids:  # a self-dependency is an error of its own, not a cycle: the graph ignores it
            edges[step] = [dep for dep in edges[step] if dep != step]
        drawn = page.evaluate("steps => { const r = workflowGraph.levels(steps); return [r.levels, [...r.blocked]]; }",
                              [{"id": step, "agent": "writer", "depends_on": deps} for step, deps in edges.items()])
        try:
            assert drawn == [topological_levels(edges), []], edges
        except ValueError:  # a cycle: the levels that could run, then what could not
            blocked = set(drawn[1])
            # The rest runs in topological_levels' levels (it would raise if one of them needed a blocked step) …
            runnable = topological_levels({s: d for s, d in edges.items() if s not in blocked})
            assert drawn[0] == [*runnable, drawn[1]], edges
            # … and no blocked step could run: each waits for another blocked one.
            assert blocked and all(any(d in blocked for d in edges[s]) for s in blocked), edges
    page.close()
