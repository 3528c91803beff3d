"""The memory admin: team-scoped, semantic search box, shared-knowledge filter, edits re-embed."""

import pytest
from django.test import Client

from memory_app.models import Memory
from memory_app.services import memory_store

pytestmark = pytest.mark.django_db


def staff(make_member, team, role):
    user = make_member(team, role=role)
    user.is_staff = True
    user.save()
    client = Client()
    client.force_login(user)
    return client


def test_the_search_box_finds_by_meaning_within_the_team(team_a, team_b, make_member):
    memory_store(team_id=team_a.id, agent="a", content="Our cat is called Whiskers.")
    memory_store(team_id=team_a.id, content="The server room is on the third floor.", shared=True)
    memory_store(team_id=team_b.id, content="Team B keeps a parrot.", shared=True)
    client = staff(make_member, team_a, "viewer")
    page = client.get("/admin/memory_app/memory/", {"q": "which pet do we have"}).content.decode()
    assert page.index("Our cat is called Whiskers.") < page.index("The server room is on the third floor.")
    assert "parrot" not in page
    shared = client.get("/admin/memory_app/memory/", {"shared__exact": "1"}).content.decode()
    assert "The server room is on the third floor." in shared and "Whiskers" not in shared


def test_an_editor_corrects_a_memory_and_it_is_embedded_again(team_a, team_b, make_member):
    memory = memory_store(team_id=team_a.id, agent="a", content="The meeting is on Monday.")
    theirs = memory_store(team_id=team_b.id, content="B's note.", shared=True)
    before = list(memory.embedding)
    client = staff(make_member, team_a, "editor")
    response = client.post(f"/admin/memory_app/memory/{memory.pk}/change/", {
        "type": "fact", "content": "The meeting is on Tuesday.", "tags": '["calendar"]', "shared": "on"})
    assert response.status_code == 302, response.content.decode()[:2000]
    memory.refresh_from_db()
    assert (memory.content, memory.shared, memory.tags) == ("The meeting is on Tuesday.", True, ["calendar"])
    assert list(memory.embedding) != before
    assert client.get(f"/admin/memory_app/memory/{theirs.pk}/change/").status_code == 404
    assert client.get("/admin/memory_app/memory/add/").status_code == 403
    assert Memory.objects.count() == 2


def test_a_runs_channels_and_blackboard_show_read_only_in_its_teams_admin(team_a, team_b, make_member):
    from agents_app.models import Run
    from memory_app.board import blackboard_write, channel_publish

    ours, theirs = Run.objects.create(team=team_a, agent="lead"), Run.objects.create(team=team_b, agent="lead")
    channel_publish(run_id=ours.id, channel="news", sender="writer", content="hello team")
    blackboard_write(run_id=ours.id, key="plan", value="north first", author="lead")
    blackboard_write(run_id=theirs.id, key="secret", value="b only", author="lead")
    client = staff(make_member, team_a, "viewer")
    boards = client.get("/admin/memory_app/blackboardentry/").content.decode()
    assert "plan" in boards and "secret" not in boards
    from memory_app.models import Channel

    page = client.get(f"/admin/memory_app/channel/{Channel.objects.get().pk}/change/").content.decode()
    assert "hello team" in page and "writer" in page
    assert client.post("/admin/memory_app/blackboardentry/add/").status_code == 403


def test_the_semantic_cache_shows_per_team_and_editors_clear_entries(team_a, team_b, make_member):
    from memory_app.models import CachedResponse

    def entry(team, prompt, model="scripted:m"):
        return CachedResponse.objects.create(team=team, agent="geo", model=model, context_digest="d",
                                             prompt=prompt, embedding=[0.0] * 383 + [1.0],
                                             response={"text": "Paris."}, hits=2)

    ours, theirs = entry(team_a, "What is the capital of France?"), entry(team_b, "B's question", "secret-b:model")
    viewer = staff(make_member, team_a, "viewer")
    page = viewer.get("/admin/memory_app/cachedresponse/").content.decode()
    assert "What is the capital of France?" in page and "B&#x27;s question" not in page
    assert "secret-b:model" not in page  # nor in the filters
    assert viewer.get(f"/admin/memory_app/cachedresponse/{theirs.pk}/change/").status_code == 404
    assert viewer.post(f"/admin/memory_app/cachedresponse/{ours.pk}/delete/", {"post": "yes"}).status_code == 403
    editor = staff(make_member, team_a, "editor")
    assert editor.get("/admin/memory_app/cachedresponse/add/").status_code == 403
    assert editor.post(f"/admin/memory_app/cachedresponse/{theirs.pk}/delete/", {"post": "yes"}).status_code == 404
    assert editor.post(f"/admin/memory_app/cachedresponse/{ours.pk}/delete/", {"post": "yes"}).status_code == 302
    assert list(CachedResponse.objects.values_list("prompt", flat=True)) == ["B's question"]
