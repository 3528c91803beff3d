"""Finding, archiving and deleting runs: the API (filters, search, days, archive, delete) and the pages."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone as dt_timezone

import pytest
from django.test import Client
from django.utils import timezone

from agents_app.models import Activation, Event, Run, Session, SessionEntry, WorkspaceFile, WorkspaceFileVersion
from memory_app.models import BlackboardEntry

pytestmark = pytest.mark.django_db


def make_run(team, *, agent="lead", workflow="", status="succeeded", input="a task", result="", day=None, **extra):
    run = Run.objects.create(team=team, agent=agent, workflow=workflow, status=status, input=input, result=result,
                             **extra)
    if day is not None:
        Run.objects.filter(pk=run.pk).update(created_at=day)
        run.refresh_from_db()
    return run


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def ids(runs) -> list[str]:
    return [str(run.id) if hasattr(run, "id") else run["id"] for run in runs]


# -- the API --------------------------------------------------------------------------------------


def test_the_api_filters_by_status_agent_workflow_words_and_days(team_a, team_b, api_for):
    utc = dt_timezone.utc
    tides = make_run(team_a, input="How do ocean tides work?", result="The **moon** pulls.",
                     day=datetime(2026, 11, 20, 10, tzinfo=utc))
    flow = make_run(team_a, agent="", workflow="research-and-review", status="failed", input="topic: volcanoes",
                    day=datetime(2026, 11, 21, 23, 59, tzinfo=utc))
    other = make_run(team_a, agent="writer", input="Write a poem", result="Tides of ink",
                     day=datetime(2026, 11, 22, 0, 0, tzinfo=utc))
    make_run(team_b, input="How do ocean tides work? (theirs)")
    client = api_for(team_a, "viewer")

    def listed(**params):
        response = client.get("/api/runs", params)
        assert response.status_code == 200, response.content
        return [run["id"] for run in response.json()]

    assert listed() == ids([other, flow, tides])
    assert listed(status="failed") == ids([flow])
    assert listed(agent="writer") == ids([other])
    assert listed(workflow="research-and-review") == ids([flow])
    assert listed(q="tides") == ids([other, tides])  # the task of one, the result of the other
    assert listed(q="TIDES moon") == ids([tides])  # every word, any case
    assert listed(q="nothing-like-this") == []
    assert listed(created_from="2026-11-21") == ids([other, flow])
    assert listed(created_to="2026-11-21") == ids([flow, tides])  # the whole last day
    assert listed(created_from="2026-11-21", created_to="2026-11-21") == ids([flow])
    assert listed(limit=1, offset=1) == ids([flow])
    assert client.get("/api/runs", {"created_from": "21/11/2026"}).status_code == 422
    assert client.get("/api/runs", {"archived": "maybe"}).status_code == 422
    assert client.get("/api/runs", {"q": "x" * 201}).status_code == 422


def test_runs_filter_by_how_they_started(team_a, make_member, api_for):
    from workflows_app.models import WorkflowRun

    def flow(trigger, input):
        run = make_run(team_a, agent="", workflow="digest", input=input)
        WorkflowRun.objects.create(run=run, trigger=trigger, spec={}, state={})
        return run

    by_hand = make_run(team_a, input="asked by someone")
    scheduled, messaged, started = flow("schedule", "nightly"), flow("channel", "on news"), flow("manual", "clicked")
    client = api_for(team_a, "viewer")

    def listed(**params):
        response = client.get("/api/runs", params)
        assert response.status_code == 200, response.content
        return [run["id"] for run in response.json()]

    assert listed(trigger="schedule") == ids([scheduled])
    assert listed(trigger="channel") == ids([messaged])
    assert listed(trigger="manual") == ids([started, by_hand])
    assert listed() == ids([started, messaged, scheduled, by_hand])
    assert client.get("/api/runs", {"trigger": "cron"}).status_code == 422
    page = browser(make_member(team_a, role="viewer")).get("/runs/", {"trigger": "schedule"})
    html = page.content.decode()
    assert [r for r in ids([started, messaged, scheduled, by_hand]) if f'data-run="{r}"' in html] == ids([scheduled])
    assert '<option value="schedule" selected>schedule</option>' in html
    refused = browser(make_member(team_a, role="viewer", username="v2")).get("/runs/", {"trigger": "cron"})
    assert refused.status_code == 400 and "trigger: Select a valid choice." in refused.content.decode()


def test_archived_runs_leave_the_list_until_asked_for_and_come_back(team_a, api_for):
    kept, archived = make_run(team_a, input="kept"), make_run(team_a, input="archived")
    operator = api_for(team_a, "operator")
    response = operator.post(f"/api/runs/{archived.id}/archive")
    assert response.status_code == 200
    stamp = Run.objects.get(pk=archived.pk).archived_at
    assert stamp is not None and response.json()["archived_at"] is not None
    assert operator.post(f"/api/runs/{archived.id}/archive").status_code == 200
    assert Run.objects.get(pk=archived.pk).archived_at == stamp  # archiving again keeps the first date
    assert ids(operator.get("/api/runs").json()) == ids([kept])
    assert ids(operator.get("/api/runs", {"archived": "only"}).json()) == ids([archived])
    assert ids(operator.get("/api/runs", {"archived": "include"}).json()) == ids([archived, kept])
    assert operator.get(f"/api/runs/{archived.id}").status_code == 200  # still readable by id
    response = operator.post(f"/api/runs/{archived.id}/unarchive")
    assert (response.status_code, response.json()["archived_at"]) == (200, None)
    assert ids(operator.get("/api/runs").json()) == ids([archived, kept])


def test_deleting_a_finished_run_takes_its_events_files_and_tree_and_nothing_else(team_a, api_for):
    from mas_core.eventlog import event_append

    doomed, kept = make_run(team_a, input="doomed"), make_run(team_a, input="kept")
    sessions = {}
    for run in (doomed, kept):
        activation = Activation.objects.create(run=run, agent="lead")
        session = sessions[run.pk] = Session.objects.create(run=run, activation=activation, agent="lead")
        SessionEntry.objects.create(session=session, seq=1, kind="message", payload="{}")
        for n in range(3):
            event_append(run_id=run.id, type="tool_call", agent="lead", session_id=session.id, data={"n": n})
        WorkspaceFile.objects.create(run=run, path="notes.md", content="x", author="lead", session=session)
        WorkspaceFileVersion.objects.create(run=run, path="notes.md", seq=3, content="x")
        BlackboardEntry.objects.create(run=run, key="plan", value="v", author="lead")
    admin = api_for(team_a, "admin")
    response = admin.delete(f"/api/runs/{doomed.id}")
    assert response.status_code == 200, response.content
    assert response.json() == {"id": str(doomed.id), "deleted": True, "events": 3, "files": 1}
    assert not Run.objects.filter(pk=doomed.pk).exists()
    # The database checks no key of the rows a step appends (events, history entries, files, versions): the
    # deletion takes them all the same.
    for model in (Activation, Session, Event, WorkspaceFile, WorkspaceFileVersion, BlackboardEntry):
        assert not model.objects.filter(run_id=doomed.pk).exists(), model
        assert model.objects.filter(run_id=kept.pk).exists(), model
    assert not SessionEntry.objects.filter(session_id=sessions[doomed.pk].pk).exists()
    assert SessionEntry.objects.filter(session_id=sessions[kept.pk].pk).count() == 1
    assert admin.get(f"/api/runs/{doomed.id}").status_code == 404
    assert admin.delete(f"/api/runs/{doomed.id}").status_code == 404


def test_a_run_still_going_is_not_deleted(team_a, api_for):
    for status in ("queued", "running"):
        run = make_run(team_a, status=status)
        response = api_for(team_a, "operator").delete(f"/api/runs/{run.id}")
        assert response.status_code == 409
        assert response.json() == {"detail": f"the run is still {status}: cancel it before deleting it"}
        assert Run.objects.filter(pk=run.pk, status=status).exists()


@pytest.mark.parametrize("role", ["viewer", "editor"])
def test_viewers_and_editors_neither_archive_nor_delete(team_a, api_for, role):
    run = make_run(team_a)
    client = api_for(team_a, role)
    assert client.post(f"/api/runs/{run.id}/archive").status_code == 403
    assert client.post(f"/api/runs/{run.id}/unarchive").status_code == 403
    assert client.delete(f"/api/runs/{run.id}").status_code == 403
    run.refresh_from_db()
    assert run.archived_at is None


def test_another_teams_run_cannot_be_archived_or_deleted(team_a, team_b, api_for):
    theirs = make_run(team_b)
    client = api_for(team_a, "admin")
    assert client.post(f"/api/runs/{theirs.id}/archive").status_code == 404
    assert client.delete(f"/api/runs/{theirs.id}").status_code == 404
    assert Run.objects.get(pk=theirs.pk).archived_at is None


# -- the pages ------------------------------------------------------------------------------------


def test_the_runs_page_pages_by_25_and_keeps_the_filters_in_its_links(team_a, make_member):
    start = timezone.now() - timedelta(days=1)
    runs = [make_run(team_a, input=f"task {n}", status="failed" if n % 2 else "succeeded",
                     day=start + timedelta(minutes=n)) for n in range(60)]
    client = browser(make_member(team_a, role="viewer"))
    page = client.get("/runs/").content.decode()
    newest = list(reversed(runs))
    assert [r for r in ids(newest) if f'data-run="{r}"' in page] == ids(newest[:25])
    assert "Page 1 of 3 · 60 runs" in page and 'rel="next" href' not in page
    assert '<a href="?page=2" rel="next">Older ›</a>' in page
    page3 = client.get("/runs/?page=3").content.decode()
    assert [r for r in ids(newest) if f'data-run="{r}"' in page3] == ids(newest[50:])
    assert "Page 3 of 3" in page3 and "Older" not in page3
    failed = client.get("/runs/?status=failed&page=2").content.decode()
    assert "Page 2 of 2 · 30 runs" in failed
    assert [r for r in ids(newest) if f'data-run="{r}"' in failed] == ids([r for r in newest if r.status == "failed"][25:])
    assert '<a href="?status=failed&amp;page=1" rel="prev">' in failed


def test_the_runs_page_filters_searches_and_says_what_is_wrong(team_a, make_member):
    tides = make_run(team_a, input="Explain the tides", result="Moon.")
    flow = make_run(team_a, agent="", workflow="research-and-review", input="topic: lava", status="running")
    client = browser(make_member(team_a, role="viewer"))
    page = client.get("/runs/", {"q": "moon"}).content.decode()
    assert f'data-run="{tides.id}"' in page and f'data-run="{flow.id}"' not in page
    page = client.get("/runs/", {"workflow": "research-and-review"}).content.decode()
    assert f'data-run="{flow.id}"' in page and f'data-run="{tides.id}"' not in page
    assert '<option value="research-and-review" selected>' in page
    page = client.get("/runs/", {"q": "nothing-like-this"}).content.decode()
    assert "No runs match these filters." in page
    response = client.get("/runs/", {"created_from": "2026-11-24", "created_to": "2026-11-01"})
    assert response.status_code == 400
    assert "created_to: The last day comes before the first." in response.content.decode()
    response = client.get("/runs/", {"created_from": "yesterday"})
    assert response.status_code == 400 and "created_from: Enter a valid date." in response.content.decode()


def test_an_operator_archives_and_deletes_from_the_page(team_a, make_member):
    run, busy = make_run(team_a, input="old run"), make_run(team_a, input="busy run", status="running")
    client = browser(make_member(team_a, role="operator"))
    page = client.get("/runs/").content.decode()
    assert f'action="/runs/{run.id}/delete"' in page and f'action="/runs/{busy.id}/delete"' not in page
    assert 'data-confirm="Delete this run with its events and files? This cannot be undone."' in page
    response = client.post(f"/runs/{run.id}/archive", {"next": "/runs/?q=old"})
    assert response.headers["Location"] == "/runs/?q=old"
    assert Run.objects.get(pk=run.pk).archived_at is not None
    assert f'data-run="{run.id}"' not in client.get("/runs/").content.decode()
    archived = client.get("/runs/?archived=only").content.decode()
    assert f'data-run="{run.id}"' in archived and "Unarchive" in archived
    # An address elsewhere is not followed.
    assert client.post(f"/runs/{run.id}/archive", {"archived": "0", "next": "https://evil.example/"}).headers[
        "Location"] == f"/runs/?team={team_a.slug}"
    assert Run.objects.get(pk=run.pk).archived_at is None
    page = client.post(f"/runs/{busy.id}/delete", follow=True).content.decode()
    assert "the run is still running: cancel it before deleting it" in page
    assert Run.objects.filter(pk=busy.pk).exists()
    response = client.post(f"/runs/{run.id}/delete", {"next": f"/runs/{run.id}/"})
    assert response.headers["Location"] == f"/runs/?team={team_a.slug}"  # its own page is gone
    assert not Run.objects.filter(pk=run.pk).exists()


def test_viewers_see_no_buttons_and_their_posts_change_nothing(team_a, make_member):
    run = make_run(team_a)
    client = browser(make_member(team_a, role="viewer"))
    page = client.get("/runs/").content.decode()
    assert "/archive" not in page and "/delete" not in page
    assert client.post(f"/runs/{run.id}/archive").status_code == 404
    assert client.post(f"/runs/{run.id}/delete").status_code == 404
    assert client.get(f"/runs/{run.id}/delete").status_code == 405
    run.refresh_from_db()
    assert run.archived_at is None


def test_a_runs_files_are_listed_and_served_as_plain_text(team_a, team_b, make_member):
    run = make_run(team_a)
    WorkspaceFile.objects.create(run=run, path="out/report.md", content="# Report\n<script>alert(1)</script>",
                                 author="writer")
    WorkspaceFile.objects.create(run=run, path="notes.md", content="é", author="lead")
    theirs = make_run(team_b)
    WorkspaceFile.objects.create(run=theirs, path="notes.md", content="secret", author="lead")
    client = browser(make_member(team_a, role="viewer"))
    page = client.get(f"/runs/{run.id}/").content.decode()
    assert '<li data-path="notes.md">' in page and '<li data-path="out/report.md">' in page
    assert '<span class="muted size">2 B</span>' in page  # bytes, not characters
    assert f'href="/runs/{run.id}/files/out/report.md?download=1"' in page
    view = client.get(f"/runs/{run.id}/files/out/report.md")
    assert view.status_code == 200
    assert view.content == b"# Report\n<script>alert(1)</script>"
    assert view.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert view.headers["X-Content-Type-Options"] == "nosniff"
    assert view.headers["Content-Security-Policy"] == "default-src 'none'; sandbox"
    assert view.headers["Content-Disposition"] == 'inline; filename="report.md"'
    download = client.get(f"/runs/{run.id}/files/out/report.md?download=1")
    assert download.headers["Content-Disposition"] == 'attachment; filename="report.md"'
    assert client.get(f"/runs/{run.id}/files/missing.md").status_code == 404
    assert client.get(f"/runs/{theirs.id}/files/notes.md").status_code == 404
    assert client.post(f"/runs/{run.id}/files/notes.md").status_code == 405


def test_the_run_page_carries_its_clock_result_and_confirmations(team_a, make_member):
    started = timezone.now() - timedelta(seconds=42)
    running = make_run(team_a, status="running", started_at=started)
    done = make_run(team_a, result="# Title\n<script>alert('x')</script>", started_at=started,
                    finished_at=started + timedelta(seconds=3.5))
    client = browser(make_member(team_a, role="operator"))
    from tests.agents_app.test_monitor_pages import json_script

    page = client.get(f"/runs/{running.id}/").content.decode()
    clock = json_script(page, "clock")
    assert clock["started_at"] == started.isoformat() and clock["finished_at"] is None
    assert 41.5 < clock["duration_s"] < 60
    assert 'data-confirm="Cancel this run? Its agents stop at their next step; this cannot be undone."' in page
    page = client.get(f"/runs/{done.id}/").content.decode()
    assert json_script(page, "clock") == {"started_at": started.isoformat(),
                                          "finished_at": (started + timedelta(seconds=3.5)).isoformat(),
                                          "duration_s": 3.5}
    assert json_script(page, "run-result") == "# Title\n<script>alert('x')</script>"
    assert "<script>alert(" not in page  # escaped in the page, rendered as text by the script
    assert 'id="delete-form"' in page and 'id="cancel-form"' not in page


def test_the_landing_page_leads_to_the_monitor_and_the_latest_runs(team_a, team_b, make_member):
    ours = [make_run(team_a, input=f"ours {n}") for n in range(7)]
    theirs = make_run(team_b, input="theirs")
    anonymous = Client().get("/").content.decode()
    assert '<a href="/runs/" id="monitor-link">Live monitor</a>' in anonymous
    assert "ours" not in anonymous and '<a href="/accounts/login/?next=/runs/">Sign in</a>' in anonymous
    page = browser(make_member(team_a, role="viewer")).get("/").content.decode()
    assert [r for r in ids(reversed(ours)) if f'href="/runs/{r}/"' in page] == ids(list(reversed(ours))[:5])
    assert str(theirs.id) not in page and f'href="/runs/?team={team_a.slug}"' in page


def test_the_admins_run_page_links_to_the_monitor(team_a, make_member):
    run = make_run(team_a)
    page = browser(make_member(team_a, role="admin")).get(f"/admin/agents_app/run/{run.id}/change/").content.decode()
    assert f"<a class='mas-monitor-link' href='/runs/{run.id}/'>Live monitor ↗</a>" in page


def test_new_runs_are_added_live_only_to_the_first_unfiltered_page(team_a, make_member):
    from tests.agents_app.test_monitor_pages import json_script

    client = browser(make_member(team_a, role="viewer"))
    assert json_script(client.get("/runs/").content.decode(), "live-new") is True  # even with no runs yet
    for n in range(26):
        make_run(team_a, input=f"t{n}")
    assert json_script(client.get("/runs/").content.decode(), "live-new") is True
    assert json_script(client.get("/runs/?page=2").content.decode(), "live-new") is False
    assert json_script(client.get("/runs/?status=failed").content.decode(), "live-new") is False
    assert json_script(client.get("/runs/?archived=include").content.decode(), "live-new") is False
    assert json_script(client.get(f"/runs/?team={team_a.slug}&archived=exclude").content.decode(), "live-new") is True
