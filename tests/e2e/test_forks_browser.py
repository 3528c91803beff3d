"""Forks in a real browser: on a failed run's monitor (offered on every event, while it runs too),
"Fork from here" on a tool's result with another result opens the fork's monitor, which links back to its
parent; the parent's monitor lists the fork.

The run is started through the API on daphne (scripted provider, a real Celery worker); the scripted
model's ``expect`` proves the fork's model got the edited result. A screenshot goes to ``var/artifacts/``.
"""

from __future__ import annotations

import re

import pytest

from agents_app.models import Event, Run
from tests.e2e.test_approvals_browser import settle, start
from tests.e2e.test_monitor_browser import ARTIFACTS, asgi_server, chromium, sign_in  # noqa: F401
from tests.runs import agent, call, finish

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def test_fork_from_here_opens_the_fork_which_links_back_and_the_parent_lists_it(
        team_a, make_member, make_token, celery_worker_process, asgi_server, chromium):  # noqa: F811
    agent(team_a, "Lead")
    olga = make_member(team_a, role="operator", username="olga")
    page = chromium.new_page(viewport={"width": 1300, "height": 1000})
    run_id = None
    try:
        sign_in(page, asgi_server.url, "olga", "/runs/")  # first: the run's first turn lasts 4 s from its start
        run_id = start(asgi_server.url, make_token(team_a, olga), "lead", {"lead": [
            {**call("vfs_read", path="answer.txt"), "latency_ms": 4000},
            {"text": "The answer is 42.", "expect": ["42"]}]})
        page.goto(f"{asgi_server.url}/runs/{run_id}/")
        # While the run works, its events offer a fork already (from its committed history), and so do the
        # events the page hears later.
        page.wait_for_selector("#events tr[data-type=llm_request] button.fork-here", timeout=10_000)
        assert page.text_content("#status") in {"queued", "running"}
        page.wait_for_selector("#status.failed", timeout=30_000)
        run = finish(Run.objects.get(pk=run_id))
        point = Event.objects.get(run_id=run_id, type="tool_result")
        row = f"#events tr[data-seq='{point.seq}']"
        page.wait_for_selector(f"{row} button.fork-here", timeout=15_000)
        assert page.eval_on_selector_all("#events tr", "rows => rows.every(r => r.querySelector('.fork-here'))")
        assert run.next_seq == len(page.query_selector_all("#events tr"))
        assert page.is_hidden("#fork-form")
        page.click(f"{row} button.fork-here")
        assert page.text_content("#fork-seq") == f"#{point.seq} (tool_result)"
        page.check("#fork-form input[name=edit]")
        page.fill("#fork-form textarea[name=tool_result]", "answer.txt holds 42")
        page.click("#fork-form button[type=submit]")

        page.wait_for_url(re.compile(r".*/runs/[0-9a-f-]{36}/$"), timeout=15_000)
        fork = Run.objects.get(forked_from_id=run_id)
        assert page.url == f"{asgi_server.url}/runs/{fork.id}/"
        assert page.text_content("#fork-parent") == f"Forked from run {run_id[:8]} at event #{point.seq}"
        assert page.get_attribute("#fork-parent a", "href") == f"/runs/{run_id}/"
        page.wait_for_selector("#status.succeeded", timeout=30_000)
        assert page.text_content("#events tr[data-type=run_start] summary") == (
            f"run started with lead: “Do the job” — forked from event #{point.seq} of run {run_id[:8]}")
        assert page.text_content("#events tr[data-type=activation_queued] summary") == (
            "lead restored (root, 5 checkpoint entries)")  # 4 messages, 1 result digest
        assert page.text_content("#result").strip() == "The answer is 42."
        page.screenshot(path=str(ARTIFACTS / "fork-monitor.png"), full_page=True)

        page.click("#fork-parent a")
        page.wait_for_url(f"{asgi_server.url}/runs/{run_id}/")
        assert page.eval_on_selector_all("#fork-list li a", "links => links.map(a => a.getAttribute('href'))") == [
            f"/runs/{fork.id}/"]
        assert " ".join(page.text_content("#fork-list li").split()) == (
            f"run {str(fork.id)[:8]} from event #{point.seq} succeeded")
    finally:
        page.close()
        if run_id:
            settle(run_id)
