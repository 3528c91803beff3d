"""What a newcomer sees first, in a real browser (Debian's Chromium, Playwright) at a desk's and a phone's width.

The run monitor's controls are readable (Fork from here, the fork panel's close: link-coloured, not white on
white) and leave no gap in a phone's event rows; an approval's "Edit arguments" opens and closes its editor,
whose text takes the card's width on a phone; the model's output is drawn as markdown that cannot inject HTML,
a turn apart from the next; a suspended session says what it waits for. The approvals inbox shows every column
at a desk and decides from the list (through the request's page: its permission check, its CSRF token, the
same service), with styled buttons on a request's page. A diff between versions has one line per line. Every
page links an icon and /favicon.ico answers. No page is wider than a 390 px screen.

Runs are started through the API on daphne (scripted provider, a real Celery worker); the scripted model's
``expect`` proves what reached it. Screenshots go to ``var/artifacts/``.
"""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from agents_app.kinds import AGENT
from agents_app.models import Agent, ApprovalRequest, Event, Run, WorkspaceFile
from tests.e2e.test_admin_browser import admin_sign_in, save
from tests.e2e.test_approvals_browser import settle, start
from tests.e2e.test_monitor_browser import ARTIFACTS, asgi_server, chromium, sign_in  # noqa: F401 (fixtures)
from tests.agents_app.test_approvals import pending
from tests.runs import agent, call, finish

WIDTHS = (1400, 390)

# The WCAG contrast ratio of an element's text against the first background behind it that is not transparent.
CONTRAST = """el => {
  const rgb = (c) => c.match(/[\\d.]+/g).map(Number);
  let bg = [255, 255, 255];
  for (let n = el; n; n = n.parentElement) {
    const c = rgb(getComputedStyle(n).backgroundColor);
    if (c.length < 4 || c[3] > 0) { bg = c.slice(0, 3); break; }
  }
  const lum = (v) => v.map((x) => { x /= 255; return x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4; })
                      .reduce((sum, x, i) => sum + x * [0.2126, 0.7152, 0.0722][i], 0);
  const fg = rgb(getComputedStyle(el).color).slice(0, 3);
  const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
  return (hi + 0.05) / (lo + 0.05);
}"""
BOX = "el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }"


def page_width(page) -> tuple[int, int]:
    return tuple(page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]"))


def line(page, event_type: str) -> str:
    return page.text_content(f"#events tr[data-type={event_type}] summary")


# -- the run monitor -----------------------------------------------------------------------------------

TURN_1 = 'Let me **check** the <img src=x onerror="window.pwned=1"> notes.'
TURN_2 = "# Done\n\n- one\n- two\n\n<script>window.pwned=2</script> and `code`"


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_the_monitor_reads_well_at_a_desk_and_on_a_phone(
        team_a, make_member, make_token, celery_worker_process, asgi_server, chromium):  # noqa: F811
    agent(team_a, "Lead")
    agent(team_a, "Helper")
    olga = make_member(team_a, role="operator", username="olga")
    run_id = start(asgi_server.url, make_token(team_a, olga), "lead", {
        "lead": [{"text": TURN_1, **call("delegate", agent="helper", task="Check the notes")},
                 {"text": TURN_2, "expect": "Checked."}],
        # The helper's turn takes a while: the lead suspends before its child settles, so it waits for it (a
        # child settled first leaves the lead nothing to wait for, and its event says so).
        "helper": [{"text": "Checked.", "latency_ms": 1500}]})
    run = finish(Run.objects.get(pk=run_id))
    assert (run.status, run.result) == ("succeeded", TURN_2)
    steps = [e.data["step"] for e in Event.objects.filter(run=run, agent="lead", type="llm_request").order_by("seq")]
    assert steps == [1, 2]
    tool_result = Event.objects.get(run=run, type="tool_result").seq

    for screen in WIDTHS:
        context = chromium.new_context(viewport={"width": screen, "height": 900})
        try:
            page = context.new_page()
            sign_in(page, asgi_server.url, "olga", f"/runs/{run_id}/")
            page.wait_for_selector("#events tr[data-type=run_complete] button.fork-here", timeout=15_000)
            page.wait_for_selector("#streams .stream .turn >> nth=2", state="attached", timeout=10_000)

            # The lead's one session: two turns, each its own part, drawn as markdown and set apart.
            blocks = page.eval_on_selector_all("#streams .stream", "ss => ss.map(s => [s.querySelector('b').textContent,"
                                                                   " s.querySelectorAll('.turn').length])")
            assert blocks == [["lead", 2], ["helper", 1]]
            first, second = ("#streams .stream >> nth=0 >> .turn >> nth=0", "#streams .stream >> nth=0 >> .turn >> nth=1")
            assert page.text_content(first) == 'Let me check the <img src=x onerror="window.pwned=1"> notes.'
            assert page.text_content(f"{first} >> strong") == "check"
            assert page.text_content(f"{second} >> h1") == "Done"
            assert page.eval_on_selector_all("#streams .stream >> nth=0 >> .turn >> nth=1 >> li",
                                             "ls => ls.map(l => l.textContent)") == ["one", "two"]
            assert page.text_content(f"{second} >> p >> nth=-1") == "<script>window.pwned=2</script> and code"
            assert page.text_content(f"{second} >> code") == "code"
            # Nothing the model wrote became an element or ran.
            assert page.eval_on_selector_all("#streams img, #streams script", "els => els.length") == 0
            assert page.evaluate("window.pwned") is None
            top1, bottom1 = page.eval_on_selector(first, BOX)[1::2]
            top2 = page.eval_on_selector(second, BOX)[1]
            assert top2 >= bottom1 > top1
            rule = page.eval_on_selector(second, "el => { const s = getComputedStyle(el); "
                                                 "return [s.borderTopStyle, parseFloat(s.borderTopWidth)]; }")
            assert rule == ["dashed", 1]
            labels = [page.eval_on_selector(turn, "el => getComputedStyle(el, '::before').content")
                      for turn in (first, second)]
            assert labels == ['"step 1"', '"step 2"']
            assert page.eval_on_selector("#streams .stream >> nth=1 >> .turn",
                                         "el => getComputedStyle(el, '::before').content") == "none"

            # What the suspended lead waited for, in words.
            assert line(page, "session_suspended") == "lead suspended: waits for its child"

            # Fork from here: on every event, readable on the card; the panel's close too, and it closes.
            rows = page.query_selector_all("#events tr")
            assert len(rows) == run.next_seq
            for row in rows:
                button = row.query_selector(".fork-here")
                assert button.is_visible() and button.evaluate(CONTRAST) >= 4.5, row.get_attribute("data-type")
            assert page.is_hidden("#fork-form")
            page.click(f"#events tr[data-seq='{tool_result}'] .fork-here")
            assert page.is_visible("#fork-form") and page.text_content("#fork-seq") == f"#{tool_result} (tool_result)"
            assert page.is_visible("#fork-close") and page.eval_on_selector("#fork-close", CONTRAST) >= 4.5
            page.click("#fork-close")
            assert page.is_hidden("#fork-form")

            if screen == 390:
                # A phone's event row: the number, its "Fork from here", time, type and agent on lines of one
                # height — the number's cell no taller than the others (no empty line beside them).
                heights = page.eval_on_selector_all("#events tr", "rs => rs.map(r => [...r.cells].slice(0, 4).map("
                                                                  "c => c.getBoundingClientRect().height))")
                assert all(max(h) - min(h) <= 1 for h in heights), heights
                fork, number = page.eval_on_selector("#events tr >> nth=0 >> .fork-here", BOX), page.eval_on_selector(
                    "#events tr >> nth=0 >> td >> nth=0", BOX)
                assert number[1] <= fork[1] and fork[3] <= number[3]  # beside the number, on its line
            assert page_width(page) == (screen, screen)
            page.screenshot(path=str(ARTIFACTS / f"monitor-newcomer-{screen}.png"), full_page=True)
        finally:
            context.close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_edit_arguments_opens_its_editor_at_a_desk_and_on_a_phone_and_the_edited_call_runs(
        team_a, make_member, make_token, celery_worker_process, asgi_server, chromium):  # noqa: F811
    agent(team_a, "Writer", "tools:\n- vfs_write\napproval:\n- vfs_write\n")
    olga = make_member(team_a, role="operator", username="olga")
    run_id = start(asgi_server.url, make_token(team_a, olga), "writer", {"writer": [
        call("vfs_write", path="notes.md", content="draft"),
        {"latency_ms": 500, "expect": "notes.md", "text": "Saved."}]})
    card = ".approval[data-kind=approval]"
    try:
        for screen in WIDTHS:
            context = chromium.new_context(viewport={"width": screen, "height": 900})
            page = context.new_page()
            sign_in(page, asgi_server.url, "olga", f"/runs/{run_id}/")
            page.wait_for_selector(f"{card}[data-status=pending] button.edit", timeout=30_000)
            page.wait_for_selector("#events tr[data-type=session_suspended]", timeout=10_000)
            assert line(page, "session_suspended") == "writer suspended: waits for an approval"

            # Closed at first; "Edit arguments" opens it, and closes it again.
            assert page.is_hidden(f"{card} .editor") and page.is_hidden(f"{card} textarea.edit-arguments")
            assert page.get_attribute(f"{card} button.edit", "aria-expanded") == "false"
            page.click(f"{card} button.edit")
            assert page.is_visible(f"{card} textarea.edit-arguments")
            assert page.get_attribute(f"{card} button.edit", "aria-expanded") == "true"
            text = page.eval_on_selector(f"{card} textarea.edit-arguments", BOX)
            inner = page.eval_on_selector(card, "el => { const r = el.getBoundingClientRect(), s = getComputedStyle(el);"
                                                " return [r.left + parseFloat(s.borderLeftWidth) + parseFloat(s.paddingLeft),"
                                                " r.right - parseFloat(s.paddingRight)]; }")
            width, room = text[2] - text[0], inner[1] - inner[0]
            # On a phone the text takes the card's whole width (its button goes below); at a desk most of it.
            assert width >= (room - 1 if screen == 390 else room * 0.6), (width, room)
            assert page.is_visible(f"{card} button.approve-edited")
            page.click(f"{card} button.edit")
            assert page.is_hidden(f"{card} .editor")
            assert page_width(page) == (screen, screen)
            if screen == 390:
                page.click(f"{card} button.edit")
                page.screenshot(path=str(ARTIFACTS / "monitor-approval-editor-390.png"), full_page=True)
                page.fill(f"{card} textarea.edit-arguments", json.dumps({"path": "notes.md", "content": "edited"}))
                page.click(f"{card} button.approve-edited")
                page.wait_for_selector(f"{card}[data-status=approved]", timeout=10_000)
                assert page.text_content(f"{card} .outcome") == "Approved by olga with edited arguments."
                page.wait_for_selector("#status.succeeded", timeout=30_000)
            context.close()
    finally:
        settle(run_id)
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.result) == ("succeeded", "Saved.")
    assert WorkspaceFile.objects.get(run=run, path="notes.md").content == "edited"
    request = ApprovalRequest.objects.get(run=run)
    assert (request.status, request.decided_by, request.decision) == (
        "approved", olga, {"decision": "approve", "message": "", "arguments": {"path": "notes.md", "content": "edited"}})


# -- the approvals inbox and a request's page -------------------------------------------------------------

INBOX = reverse("admin:agents_app_approvalrequest_changelist")


def resolved(page, selector: str, variable: str) -> bool:
    """Whether the element's background is the admin's colour ``variable``, as the page resolves it."""
    return page.eval_on_selector(selector, f"""el => {{
        const probe = document.createElement("span"); probe.style.background = "var({variable})";
        document.body.appendChild(probe); const want = getComputedStyle(probe).backgroundColor; probe.remove();
        return [getComputedStyle(el).backgroundColor, want]; }}""")


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_the_approvals_inbox_shows_every_column_and_decides_from_the_list(
        team_a, make_member, make_token, celery_worker_process, asgi_server, chromium):  # noqa: F811
    agent(team_a, "Writer", "tools:\n- vfs_write\napproval:\n- vfs_write\n")
    agent(team_a, "Planner", "tools:\n- ask_human\n")
    olga = make_member(team_a, role="operator", username="olga")
    make_member(team_a, role="viewer", username="vic")
    token = make_token(team_a, olga)
    long_path = "reports/" + "quarterly-summary-" * 6 + "draft.md"

    writers = [start(asgi_server.url, token, "writer", {"writer": [
        call("vfs_write", path=long_path, content=f"text {n}"), {"text": "Done."}]}) for n in range(3)]
    question_id = start(asgi_server.url, token, "planner", {"planner": [
        call("ask_human", question="Which region?", choices=["eu-west", "us-east"]), {"text": "ok"}]})
    ids = (*writers, question_id)
    requests = {run_id: pending(Run.objects.get(pk=run_id)) for run_id in ids}

    def row(run_id: str) -> str:
        return f"#result_list tr:has(a[href='/runs/{run_id}/'])"

    first = "#result_list tbody tr:first-child"
    try:
        # At a desk: every column within the list's box, nothing to scroll to; the buttons in the last one.
        context = chromium.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        admin_sign_in(page, asgi_server.url, "olga")
        page.goto(f"{asgi_server.url}{INBOX}")
        assert page.eval_on_selector(".results", "el => el.scrollWidth <= el.clientWidth")
        right = page.eval_on_selector(".results", BOX)[2]
        for column in ("due", "decided", "decide"):
            assert page.eval_on_selector(f"#result_list thead th.column-{column}", BOX)[2] <= right, column
        assert page.text_content(f"{row(question_id)} .field-decide a") == "Answer…"
        assert page.get_attribute(f"{row(question_id)} .field-decide a", "href") == reverse(
            "admin:agents_app_approvalrequest_change", args=[requests[question_id].pk])
        page.screenshot(path=str(ARTIFACTS / "admin-approvals-inbox-1400.png"), full_page=True)

        # Approve from the list, on its first row: back on the same list, the request decided, the run going on.
        page.goto(f"{asgi_server.url}{INBOX}?kind=approval")
        order = page.eval_on_selector_all("#result_list tbody tr .field-run_link a",
                                          "links => links.map(a => a.getAttribute('href').split('/')[2])")
        assert sorted(order) == sorted(writers)
        approved_id, rejected_id, kept_id = order
        assert page.eval_on_selector_all(f"{first} .field-decide button", "bs => bs.map(b => [b.textContent, b.value])"
                                         ) == [["Approve", "approve"], ["Reject", "reject"]]
        for selector, variable in ((f"{first} .field-decide button[value=approve]", "--default-button-bg"),
                                   (f"{first} .field-decide button[value=reject]", "--delete-button-bg")):
            colour, want = resolved(page, selector, variable)
            assert colour == want and page.eval_on_selector(selector, CONTRAST) >= 4.5, (selector, colour, want)
        page.click(f"{first} .field-decide button[value=approve]")
        page.wait_for_url(f"{asgi_server.url}{INBOX}?kind=approval")
        assert page.text_content(".messagelist").strip() == "Vfs_write by writer: approved."  # the admin's capfirst
        assert page.query_selector(row(approved_id)) is None
        assert page.eval_on_selector(f"{first} .field-run_link a", "a => a.getAttribute('href')") == f"/runs/{rejected_id}/"
        page.click(f"{first} .field-decide button[value=reject]")
        page.wait_for_url(f"{asgi_server.url}{INBOX}?kind=approval")
        assert page.text_content(".messagelist").strip() == "Vfs_write by writer: rejected."
        approved, rejected = finish(Run.objects.get(pk=approved_id)), finish(Run.objects.get(pk=rejected_id))
        assert (approved.status, approved.result, rejected.status, rejected.result) == (
            "succeeded", "Done.", "succeeded", "Done.")
        assert WorkspaceFile.objects.get(run=approved, path=long_path).content == \
            requests[approved_id].arguments["content"]
        assert not WorkspaceFile.objects.filter(run=rejected).exists()
        assert Event.objects.get(run=rejected, type="tool_result").data["content"] == (
            "vfs_write was not run: olga rejected it.")
        decided = {run_id: ApprovalRequest.objects.get(pk=requests[run_id].pk) for run_id in (approved_id, rejected_id)}
        assert [(r.status, r.decided_by, r.decision) for r in decided.values()] == [
            ("approved", olga, {"decision": "approve", "message": ""}),
            ("rejected", olga, {"decision": "reject", "message": ""})]
        assert {str(run) for run in ApprovalRequest.objects.filter(status="pending").values_list("run_id", flat=True)
                } == {kept_id, question_id}

        # All of them, the decided ones with who and when: still every column in sight.
        page.goto(f"{asgi_server.url}{INBOX}?status=all")
        assert page.eval_on_selector(".results", "el => el.scrollWidth <= el.clientWidth")
        assert page.text_content(f"{row(approved_id)} .field-decided") == (
            f"olga, {decided[approved_id].decided_at:%Y-%m-%d %H:%M}")
        assert page.eval_on_selector(f"{row(approved_id)} .field-decided", BOX)[2] <= right
        assert page.text_content(f"{row(approved_id)} .field-decide") == "—"

        # A request's page: the admin's buttons, coloured and sized as its submit buttons.
        page.goto(f"{asgi_server.url}{reverse('admin:agents_app_approvalrequest_change', args=[requests[kept_id].pk])}")
        for selector, variable in (("#approve", "--default-button-bg"), ("#approve-edited", "--button-bg"),
                                   ("#reject", "--delete-button-bg")):
            colour, want = resolved(page, selector, variable)
            assert colour == want and page.eval_on_selector(selector, CONTRAST) >= 4.5, (selector, colour, want)
            assert page.eval_on_selector(selector, "el => getComputedStyle(el).padding") == "10px 15px"
        page.screenshot(path=str(ARTIFACTS / "admin-approval-request-1400.png"), full_page=True)
        context.close()

        # A viewer sees the list without buttons.
        context = chromium.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        admin_sign_in(page, asgi_server.url, "vic")
        page.goto(f"{asgi_server.url}{INBOX}")
        assert page.eval_on_selector_all("#result_list .field-decide", "cs => cs.map(c => c.textContent)") == ["—"] * 2
        context.close()

        # On a phone: a card per request, labelled; no page wider than the screen.
        context = chromium.new_context(viewport={"width": 390, "height": 900})
        page = context.new_page()
        admin_sign_in(page, asgi_server.url, "olga")
        page.goto(f"{asgi_server.url}{INBOX}?status=all")
        assert page_width(page) == (390, 390)
        for field in ("due", "decided", "decide"):
            box = page.eval_on_selector(f"{row(kept_id)} .field-{field}", BOX)
            assert 0 <= box[0] and box[2] <= 390, (field, box)
        assert page.eval_on_selector(f"{row(kept_id)} .field-due", "el => getComputedStyle(el, '::before')"
                                                                         ".content") == '"Deadline: "'
        page.screenshot(path=str(ARTIFACTS / "admin-approvals-inbox-390.png"), full_page=True)
        for run_id in (kept_id, question_id):
            page.goto(f"{asgi_server.url}{reverse('admin:agents_app_approvalrequest_change', args=[requests[run_id].pk])}")
            assert page_width(page) == (390, 390)
            for textarea in page.query_selector_all("textarea"):
                assert textarea.evaluate(BOX)[2] <= 390
        page.screenshot(path=str(ARTIFACTS / "admin-approval-question-390.png"), full_page=True)
        # The question's run on the monitor: what its session waits for, in words.
        page.goto(f"{asgi_server.url}/runs/{question_id}/")
        page.wait_for_selector("#events tr[data-type=session_suspended]", timeout=15_000)
        assert line(page, "session_suspended") == "planner suspended: waits for a person's answer"
        page.wait_for_selector(".approval[data-kind=question][data-status=pending]", timeout=10_000)
        assert page_width(page) == (390, 390)
        context.close()
    finally:
        for run_id in ids:
            settle(run_id)


# -- versions ---------------------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_a_diff_between_versions_has_one_line_per_line(team_a, make_member, asgi_server, chromium):  # noqa: F811
    for n in (1, 2, 3):
        save(team_a, AGENT, f"---\nname: Writer\ndescription: Draft {n}\n---\n\nLine one.\n\nLine two.\nLine three {n}.\n")
    user = make_member(team_a, "admin", username="ada")
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    writer = Agent.objects.get(team=team_a, slug="writer")
    diff = reverse("admin:agents_app_agent_diff", args=[writer.pk]) + "?old=2&new=3"
    for screen in WIDTHS:
        page = chromium.new_page(viewport={"width": screen, "height": 900})
        admin_sign_in(page, asgi_server.url, "ada")
        page.goto(f"{asgi_server.url}{diff}")
        assert page.inner_text("#mas-diff").split("\n") == [
            "--- v2", "+++ v3", "@@ -1,9 +1,9 @@", " ---", " name: Writer", "-description: Draft 2",
            "+description: Draft 3", " ---", " ", " Line one.", " ", " Line two.", "-Line three 2.", "+Line three 3."]
        tops = page.eval_on_selector_all("#mas-diff span", "ss => ss.map(s => s.getBoundingClientRect().top)")
        assert len(tops) == 14 and tops == sorted(set(tops))  # each line below the one before
        assert page_width(page) == (screen, screen)
        page.screenshot(path=str(ARTIFACTS / f"admin-version-diff-{screen}.png"), full_page=True)
        page.goto(f"{asgi_server.url}{reverse('admin:agents_app_agent_history', args=[writer.pk])}")
        assert page_width(page) == (screen, screen)
        page.close()


# -- the icon ---------------------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_every_page_links_the_icon_and_favicon_ico_answers(team_a, make_member, asgi_server, chromium):  # noqa: F811
    user = make_member(team_a, "admin", username="ada")
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    run = Run.objects.create(team=team_a, agent="lead", input="tides", status="succeeded", result="Done.")
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    failed = []
    page.on("response", lambda response: failed.append((response.status, response.url)) if response.status >= 400
            else None)
    try:
        answer = page.request.get(f"{asgi_server.url}/favicon.ico")
        assert (answer.status, answer.headers["content-type"]) == (200, "image/svg+xml")
        assert answer.text().startswith("<svg ")
        icon = answer.url
        sign_in(page, asgi_server.url, "ada", "/runs/")
        for path in ("/", "/runs/", f"/runs/{run.id}/", "/admin/", INBOX):
            page.goto(f"{asgi_server.url}{path}")
            assert page.eval_on_selector("link[rel=icon]", "l => l.href") == icon, path
            assert page.request.get(icon).status == 200
        assert failed == []
    finally:
        page.close()
