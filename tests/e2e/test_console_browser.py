"""The monitor and the runs list as a new user meets them, in Chromium at 1400 and 390 px.

The same daphne, real worker and Chromium as ``test_monitor_browser``: a run's
clock ticks while it goes on and stops at its end, its files appear as agents
write them and open in the page, its result is rendered markdown that runs no
HTML, each event reads as one line, cancel asks first and leaves no agent
"running"; the runs list filters, searches, pages, archives and deletes; and
no page is wider than a 390 px screen.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from workflows_app.kinds import WORKFLOW
from mas_core.definitions.services import definition_parse, definition_save
from tests.e2e.test_monitor_browser import (  # noqa: F401 - fixtures
    ARTIFACTS,
    asgi_server,
    chromium,
    define_agents,
    in_thread,
    sign_in,
    start_run,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

RESULT = ("# Tides\n\nThe **moon** pulls the sea: `F = G m1 m2 / r^2`.\n\n- high tide\n- low tide\n\n"
          "<script>window.pwned = 1</script> <img src=x onerror=\"window.pwned = 2\"> "
          "[a link](javascript:window.pwned=3) [docs](https://example.org/tides)")
LIVE = {"lead": [
    {"latency_ms": 2500, "tool_calls": [{"name": "vfs_write", "arguments": {"path": "notes/plan.md",
                                                                            "content": "plan: é"}}]},
    {"latency_ms": 2500, "text": RESULT},
]}


def test_a_run_drawn_queued_reads_running_once_it_starts(
        team_a, make_member, make_token, celery_worker_process, asgi_server, chromium):
    """The page of a run waiting for its team's one slot says "queued", then "running" when the run starts (its
    run_start event), without a reload; the status stayed "queued" until the run's end before."""
    from agents_app.models import Run
    from tests.runs import wait_until

    team_a.max_sessions = 1
    team_a.save(update_fields=["max_sessions"])
    define_agents(team_a, "Lead")
    olga = make_member(team_a, role="operator", username="olga")
    token = make_token(team_a, olga)
    server = asgi_server.url
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    try:
        sign_in(page, server, "olga", "/runs/")
        first = start_run(server, token, script={"lead": [{"latency_ms": 6000, "text": "First."}]})
        wait_until(lambda: Run.objects.filter(pk=first, status="running").exists(), 15, "the first run to start")
        second = start_run(server, token, script={"lead": [{"latency_ms": 1500, "text": "Second."}]})
        page.goto(f"{server}/runs/{second}/")
        page.wait_for_selector("#live:not(.off)", timeout=10_000)
        assert (page.text_content("#status"), Run.objects.get(pk=second).status) == ("queued", "queued")
        page.wait_for_function("document.getElementById('status').textContent === 'running'", timeout=20_000)
        page.wait_for_function("document.getElementById('status').textContent === 'succeeded'", timeout=20_000)
    finally:
        page.close()


def scroll_width(page) -> tuple[int, int]:
    return page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")


def test_the_clock_ticks_files_appear_and_the_result_renders_without_running_html(
        team_a, make_member, make_token, celery_worker_process, asgi_server, chromium):
    from agents_app.models import Run

    define_agents(team_a, "Lead")
    olga = make_member(team_a, role="operator", username="olga")
    server = asgi_server.url
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    try:
        sign_in(page, server, "olga", "/runs/")  # first: the run lasts 5 s from its start
        run_id = start_run(server, make_token(team_a, olga), script=LIVE)
        page.goto(f"{server}/runs/{run_id}/")
        page.wait_for_selector("#live:not(.off)", timeout=10_000)
        page.wait_for_selector("#events tr[data-type=session_start]", timeout=10_000)
        first = float(page.text_content("#t-duration").split()[0])
        page.wait_for_timeout(1200)
        second = float(page.text_content("#t-duration").split()[0])
        assert Run.objects.get(pk=run_id).status == "running"
        assert second - first >= 1.0, (first, second)  # it ticks while the run goes on
        # The file appears when the agent writes it, before the run ends.
        page.wait_for_selector('#file-list li[data-path="notes/plan.md"]', timeout=15_000)
        assert page.text_content("#status") == "running"
        assert page.text_content('#file-list li[data-path="notes/plan.md"] .size') == "8 B"
        assert page.text_content("#file-count") == "1"
        page.click('#file-list li[data-path="notes/plan.md"] button.view')
        page.wait_for_function("document.getElementById('file-view-content').textContent === 'plan: é'")
        assert page.text_content("#file-view-path") == "notes/plan.md"
        href = page.get_attribute('#file-list li[data-path="notes/plan.md"] a.download', "href")
        assert href == f"/runs/{run_id}/files/notes/plan.md?download=1"
        download = page.request.get(f"{server}{href}")
        assert (download.status, download.text()) == (200, "plan: é")
        assert download.headers["content-disposition"] == 'attachment; filename="plan.md"'
        # One line per event.
        summaries = dict(page.eval_on_selector_all(
            "#events tr", "rows => rows.map(r => [r.dataset.type, r.querySelector('summary').textContent])"))
        assert summaries["tool_call"] == "lead called vfs_write notes/plan.md (8 B)"
        assert summaries["file_change"] == "lead created notes/plan.md (8 B)"
        assert summaries["run_start"] == "run started with lead: “Plan the trip”"
        assert summaries["tool_result"].startswith("vfs_write → ")
        page.wait_for_selector("#status.succeeded", timeout=30_000)
        stopped = page.text_content("#t-duration")
        page.wait_for_timeout(600)
        assert page.text_content("#t-duration") == stopped  # stopped at the end
        duration = Run.objects.get(pk=run_id)
        # The page shows the run_complete event's duration (rounded to ms) to one decimal: the row's own
        # duration, give or take the rounding of each (5.0503 s is sent as 5.05, which JavaScript shows as 5.0).
        seconds = (duration.finished_at - duration.started_at).total_seconds()
        assert stopped.endswith(" s") and abs(float(stopped[:-2]) - seconds) <= 0.051, (stopped, seconds)
        rows = page.eval_on_selector_all("#events tr", "rows => rows.map(r => r.dataset.type)")
        summary = page.eval_on_selector_all("#events tr[data-type=llm_response] summary", "s => s.map(e => e.textContent)")
        from agents_app.models import Event

        usage = Event.objects.filter(run_id=run_id, type="llm_response").order_by("seq").first().data["usage"]
        assert summary[0] == (f"scripted answered lead: calls vfs_write · {usage['prompt_tokens']} + "
                              f"{usage['completion_tokens']} tokens, $0")
        assert rows[-1] == "run_complete"
        # The result, as markdown; its HTML shown as text, never run.
        assert page.text_content("#result h1") == "Tides"
        assert page.text_content("#result strong") == "moon"
        assert page.text_content("#result code") == "F = G m1 m2 / r^2"
        assert page.eval_on_selector_all("#result li", "lis => lis.map(li => li.textContent)") == ["high tide",
                                                                                                     "low tide"]
        assert page.eval_on_selector_all("#result script, #result img", "els => els.length") == 0
        assert page.evaluate("window.pwned") is None
        assert "<script>window.pwned = 1</script>" in page.text_content("#result")
        assert page.eval_on_selector_all("#result a", "as => as.map(a => [a.textContent, a.getAttribute('href')])") == [
            ["docs", "https://example.org/tides"]]
        assert "[a link](javascript:window.pwned=3)" in page.text_content("#result")
        # Drawn again by the server (a reload): the same.
        page.reload()
        page.wait_for_selector("#result h1")
        assert page.evaluate("window.pwned") is None
        assert page.text_content("#t-duration") == stopped
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "monitor-result.png"), full_page=True)
    finally:
        page.close()


DELEGATING = {
    "lead": [{"latency_ms": 300, "tool_calls": [{"name": "delegate", "arguments": {"agent": "helper",
                                                                                    "task": "Check"}}]},
             {"latency_ms": 300, "text": "never"}],
    "helper": [{"latency_ms": 60_000, "text": "late"}],
}


def test_cancel_asks_first_and_leaves_no_agent_running(team_a, make_member, make_token, celery_worker_process,
                                                       asgi_server, chromium):
    from agents_app.models import Run

    define_agents(team_a, "Lead", "Helper")
    otto = make_member(team_a, role="operator", username="otto")
    server = asgi_server.url
    run_id = start_run(server, make_token(team_a, otto), script=DELEGATING)
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    try:
        sign_in(page, server, "otto", f"/runs/{run_id}/")
        page.wait_for_selector("#tree g.node[data-agent=helper][data-status=running]", timeout=15_000)
        questions = []
        page.once("dialog", lambda dialog: (questions.append(dialog.message), dialog.dismiss()))
        page.click("#cancel-form button")
        page.wait_for_timeout(500)
        assert questions == ["Cancel this run? Its agents stop at their next step; this cannot be undone."]
        assert Run.objects.get(pk=run_id).status == "running"  # dismissed: nothing sent
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#cancel-form button")
        page.wait_for_selector("#status.cancelled", timeout=10_000)
        page.wait_for_selector("#events tr[data-type=run_complete]", timeout=10_000)
        page.wait_for_function("(n => n.length === 2 && n.every(g => g.dataset.status === 'cancelled'))("
                               "[...document.querySelectorAll('#tree g.node')])", timeout=10_000)
        cards = page.eval_on_selector_all("#tree g.node", "gs => gs.map(g => [g.dataset.agent, g.dataset.status, "
                                                          "g.querySelectorAll('text')[1].textContent])")
        assert sorted(cards) == [["helper", "cancelled", "cancelled · medium"], ["lead", "cancelled", "cancelled · medium"]]
        assert page.query_selector("#cancel-form") is None
    finally:
        page.close()
    assert Run.objects.get(pk=run_id).status == "cancelled"


def test_the_runs_list_filters_pages_archives_and_deletes(team_a, make_member, asgi_server, chromium):
    from agents_app.models import Run

    make_member(team_a, role="operator", username="opal")
    start = timezone.now() - timedelta(hours=2)
    runs = []
    for n in range(30):
        run = Run.objects.create(team=team_a, agent="lead" if n % 3 else "writer", status="succeeded",
                                 input=f"task number {n}" + (" about tides" if n % 5 == 0 else ""))
        Run.objects.filter(pk=run.pk).update(created_at=start + timedelta(minutes=n))
        runs.append(run)
    newest = [str(r.id) for r in reversed(runs)]
    server = asgi_server.url
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    listed = "rows => rows.map(r => r.dataset.run)"
    try:
        sign_in(page, server, "opal", "/runs/")
        assert page.eval_on_selector_all("#runs tr", listed) == newest[:25]
        assert page.text_content("#page-info") == "Page 1 of 2 · 30 runs"
        page.click("#pager a[rel=next]")
        page.wait_for_url(f"{server}/runs/?page=2")
        assert page.eval_on_selector_all("#runs tr", listed) == newest[25:]
        page.fill("#id_q", "tides")
        page.select_option("#id_agent", "writer")
        page.click("#filters button[type=submit]")
        page.wait_for_selector("#clear-filters")
        tides_by_writer = [str(r.id) for r in reversed(runs) if "tides" in r.input and r.agent == "writer"]
        assert page.eval_on_selector_all("#runs tr", listed) == tides_by_writer == [str(runs[15].id), str(runs[0].id)]
        # Archive one: it leaves the list, and shows under "archived only".
        target = tides_by_writer[0]
        page.click(f'#runs tr[data-run="{target}"] form.archive button')
        page.wait_for_selector(f'#runs tr[data-run="{target}"]', state="detached")
        assert page.eval_on_selector_all("#runs tr", listed) == tides_by_writer[1:]
        page.select_option("#id_archived", "only")
        page.click("#filters button[type=submit]")
        page.wait_for_selector(f'#runs tr[data-run="{target}"].archived')
        # Delete it: asked first; dismissed, nothing happens.
        questions = []
        page.once("dialog", lambda dialog: (questions.append(dialog.message), dialog.dismiss()))
        page.click(f'#runs tr[data-run="{target}"] form.delete button')
        page.wait_for_timeout(300)
        assert questions == ["Delete this run with its events and files? This cannot be undone."]
        assert Run.objects.filter(pk=target).exists()
        page.once("dialog", lambda dialog: dialog.accept())
        page.click(f'#runs tr[data-run="{target}"] form.delete button')
        page.wait_for_selector(f'#runs tr[data-run="{target}"]', state="detached")
        assert f"Deleted run {target} with 0 events and 0 files." in page.text_content(".messages")
        assert not Run.objects.filter(pk=target).exists() and Run.objects.count() == 29
    finally:
        page.close()


FLOW = """---
name: Research chain
inputs: [topic, audience]
steps:
  - id: research
    agent: lead
  - id: review
    agent: lead
    depends_on: [research]
  - id: summary
    agent: lead
    depends_on: [research, review]
---
"""


@pytest.mark.parametrize("width", [390, 1400])
def test_no_page_is_wider_than_the_screen(team_a, make_member, asgi_server, chromium, width):
    from mas_core.events import event_emit
    from agents_app.models import Run, WorkspaceFile

    define_agents(team_a, "Lead")
    definition_save(kind=WORKFLOW, team=team_a, parsed=definition_parse(kind=WORKFLOW, team=team_a, text=FLOW))
    from workflows_app.models import Workflow

    workflow = Workflow.objects.get(team=team_a, slug="research-chain")
    make_member(team_a, role="operator", username="pia")
    long_word = "x" * 300
    run = Run.objects.create(team=team_a, workflow="research-chain", input=f"topic: {long_word}", status="succeeded",
                             result=f"# Report\n\n{long_word}\n\n```\n{long_word}\n```\n\n| a | b |\n|---|---|\n| {long_word} | 2 |")
    for n in range(12):
        Run.objects.create(team=team_a, agent="lead", input=f"a rather long task description {n} " + long_word,
                           status="failed")
    WorkspaceFile.objects.create(run=run, path=f"out/{'deep/' * 20}{long_word[:80]}.md", content="x", author="lead")

    def emit():
        from django.db import transaction

        with transaction.atomic():
            event_emit(run_id=run.id, type="run_start", agent="", data={"workflow": "research-chain",
                                                                        "input": long_word})
            for step in ("research", "review", "summary"):
                event_emit(run_id=run.id, type="step_start", agent="lead", data={"step": step})
                event_emit(run_id=run.id, type="tool_call", agent="lead",
                           data={"name": "vfs_write", "arguments": {"path": long_word, "content": long_word}})
                event_emit(run_id=run.id, type="step_complete", agent="lead", data={"step": step})

    in_thread(emit)
    page = chromium.new_page(viewport={"width": width, "height": 900})
    try:
        sign_in(page, asgi_server.url, "pia", f"/runs/{run.id}/")
        page.wait_for_selector("#events tr[data-type=step_complete]", timeout=10_000)
        page.click("#events tr[data-type=tool_call] summary")  # an open payload too
        assert scroll_width(page) == [width, width] or scroll_width(page)[0] <= width, ("monitor", scroll_width(page))
        page.screenshot(path=str(ARTIFACTS / f"width-{width}-monitor.png"), full_page=True)
        page.goto(f"{asgi_server.url}/runs/")
        page.wait_for_selector("#runs tr")
        assert scroll_width(page)[0] <= width, ("runs", scroll_width(page))
        page.screenshot(path=str(ARTIFACTS / f"width-{width}-runs.png"), full_page=True)
        page.goto(f"{asgi_server.url}/admin/workflows_app/workflow/{workflow.pk}/run/")  # to the start form
        page.wait_for_selector("textarea[name='wf:research-chain:topic']")
        assert scroll_width(page)[0] <= width, ("run form", scroll_width(page))
        box = page.eval_on_selector("textarea[name='wf:research-chain:topic']", "t => t.getBoundingClientRect().right")
        assert box <= width
        page.screenshot(path=str(ARTIFACTS / f"width-{width}-run-form.png"), full_page=True)
        page.goto(f"{asgi_server.url}/")
        assert scroll_width(page)[0] <= width, ("home", scroll_width(page))
    finally:
        page.close()


EVENTS = [
    ({"type": "llm_request", "agent": "lead", "data": {"model": "gpt-4.1", "messages": 3, "tools": 5, "step": 2}},
     "lead asked gpt-4.1: 3 messages, 5 tools, step 2"),
    ({"type": "llm_response", "agent": "lead", "data": {"model": "gpt-4.1", "text": "Tides come from the moon.",
                                                         "tool_calls": [], "cost_usd": "0E-8",
                                                         "usage": {"prompt_tokens": 1200, "completion_tokens": 34}}},
     "gpt-4.1 answered lead: “Tides come from the moon.” · 1,200 + 34 tokens, $0"),
    ({"type": "llm_response", "agent": "lead", "data": {"model": "m", "text": "", "cost_usd": "0.0123",
                                                         "tool_calls": [{"name": "web_fetch"}, {"name": "vfs_write"}],
                                                         "usage": {"prompt_tokens": 1, "completion_tokens": 2}}},
     "m answered lead: calls web_fetch, vfs_write · 1 + 2 tokens, $0.0123"),
    ({"type": "tool_call", "agent": "researcher", "data": {"name": "vfs_write",
                                                            "arguments": {"path": "notes.md", "content": "x" * 121}}},
     "researcher called vfs_write notes.md (121 B)"),
    ({"type": "tool_call", "agent": "a", "data": {"name": "web_fetch", "arguments": {"url": "https://example.org/"}}},
     "a called web_fetch https://example.org/"),
    ({"type": "tool_result", "agent": "a", "data": {"name": "web_fetch", "ok": False, "error_kind": "timeout",
                                                     "content": "no answer in 10 s"}},
     "web_fetch failed (timeout): no answer in 10 s"),
    ({"type": "delegate", "agent": "lead", "data": {"from": "lead", "to": "helper", "task": "Check the plan"}},
     "lead delegated to helper: “Check the plan”"),
    ({"type": "escalation", "agent": "lead", "data": {"from": "small", "to": "large", "to_model": "gpt-4.1"}},
     "lead escalated from small to large (gpt-4.1)"),
    ({"type": "run_complete", "agent": "", "data": {"status": "failed", "duration_s": 12.34, "prompt_tokens": 10,
                                                     "completion_tokens": 5, "cost_usd": "0.5",
                                                     "error": "budget spent"}},
     "run failed in 12.3 s, 10 + 5 tokens, $0.5000 — budget spent"),
    ({"type": "run_status", "agent": "", "data": {"status": "running"}}, "run is running"),
    ({"type": "guardrail_triggered", "agent": "a", "data": {"guardrail": "no-cards", "where": "tool_result",
                                                             "action": "redact", "tool": "web_fetch",
                                                             "excerpt": "pay with [card] now"}},
     "guardrail no-cards redacted the tool result of web_fetch: pay with [card] now"),
    ({"type": "guardrail_triggered", "agent": "a", "data": {"guardrail": "keep-secrets", "where": "model_answer",
                                                             "action": "block", "excerpt": "the key is [declared]"}},
     "guardrail keep-secrets blocked the model answer: the key is [declared]"),
    ({"type": "guardrail_triggered", "agent": "", "data": {"guardrail": "no-cards-out", "where": "outgoing",
                                                            "action": "redact", "event": "run_end",
                                                            "excerpt": "Charge [card] today."}},
     "guardrail no-cards-out redacted the outgoing notification (run_end): Charge [card] today."),
    ({"type": "something_new", "agent": "lead", "data": {"count": 3, "nested": {"a": 1}}},
     "lead · something new: count 3"),
]


def test_each_event_type_reads_as_one_line_and_markdown_keeps_to_text(team_a, make_member, asgi_server, chromium):
    from agents_app.models import Run

    make_member(team_a, role="viewer", username="val")
    run = Run.objects.create(team=team_a, agent="lead", input="x", status="succeeded")
    page = chromium.new_page(viewport={"width": 1200, "height": 800})
    try:
        sign_in(page, asgi_server.url, "val", f"/runs/{run.id}/")
        lines = page.evaluate("events => events.map(describeEvent)", [event for event, _ in EVENTS])
        assert lines == [line for _, line in EVENTS]
        html = page.evaluate("""text => { const d = document.createElement('div'); renderMarkdown(d, text);
                                          return d.innerHTML; }""",
                             "## Hi <b>x</b>\n\n1. one\n2. *two*\n\n> quoted\n\n[x](data:text/html,hi) snake_case_name")
        assert html == ("<h2>Hi &lt;b&gt;x&lt;/b&gt;</h2><ol><li>one</li><li><em>two</em></li></ol>"
                        "<blockquote><p>quoted</p></blockquote><p>[x](data:text/html,hi) snake_case_name</p>")
    finally:
        page.close()
