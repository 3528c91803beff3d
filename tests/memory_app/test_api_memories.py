"""/api/memories: search, create, share, delete — team-scoped, roles, clear errors."""

import pytest

from memory_app.models import Memory
from memory_app.services import memory_store

pytestmark = pytest.mark.django_db


def test_search_create_share_delete(team_a, api_for):
    editor = api_for(team_a, "editor")
    created = editor.post("/api/memories", {"content": "Invoices are due on the 5th.", "type": "fact",
                                            "tags": ["billing"], "agent": "clerk"})
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["agent"], body["shared"], body["tags"], body["source_agent"]) == ("clerk", False, ["billing"], "clerk")
    team_note = editor.post("/api/memories", {"content": "The office closes at 6 pm."}).json()
    assert (team_note["agent"], team_note["shared"]) == ("", True)

    found = editor.get("/api/memories", {"q": "when are invoices due", "k": 1}).json()
    assert [m["content"] for m in found] == ["Invoices are due on the 5th."] and found[0]["similarity"] > 0.3
    as_other = editor.get("/api/memories", {"q": "invoices", "agent": "porter"}).json()
    assert [m["content"] for m in as_other] == ["The office closes at 6 pm."]  # the clerk's memory is private
    shared = editor.post(f"/api/memories/{body['id']}/share", {"shared": True})
    assert shared.status_code == 200 and shared.json()["shared"] is True
    as_other = editor.get("/api/memories", {"q": "invoices", "agent": "porter", "k": 1}).json()
    assert [m["content"] for m in as_other] == ["Invoices are due on the 5th."]
    assert [m["content"] for m in editor.get("/api/memories", {"type": "fact", "k": 5}).json()] == [
        "The office closes at 6 pm.", "Invoices are due on the 5th."]
    assert editor.delete(f"/api/memories/{body['id']}").status_code == 204
    assert list(Memory.objects.values_list("content", flat=True)) == ["The office closes at 6 pm."]


def test_other_teams_memories_are_invisible_and_untouchable(team_a, team_b, api_for):
    theirs = memory_store(team_id=team_b.id, content="Team B's secret plan.", shared=True)
    client = api_for(team_a, "editor")
    assert client.get("/api/memories", {"q": "secret plan"}).json() == []
    assert client.post(f"/api/memories/{theirs.id}/share", {"shared": False}).status_code == 404
    assert client.delete(f"/api/memories/{theirs.id}").status_code == 404
    assert Memory.objects.get(pk=theirs.pk).shared is True


def test_viewers_read_only_and_bad_input_is_a_422(team_a, api_for):
    viewer, editor = api_for(team_a, "viewer"), api_for(team_a, "editor")
    assert viewer.post("/api/memories", {"content": "x"}).status_code == 403
    assert viewer.get("/api/memories").status_code == 200
    bad = editor.post("/api/memories", {"content": "   "})
    assert bad.status_code == 422
    assert bad.json()["detail"] == [{"loc": ["body", "content"], "msg": "a memory needs some text",
                                     "type": "invalid_memory"}]
    assert editor.post("/api/memories", {"content": "x", "type": "rumour"}).status_code == 422
    assert editor.post("/api/memories", {"content": "x", "colour": "red"}).status_code == 422
    assert editor.get("/api/memories", {"k": 0}).status_code == 422
    assert Memory.objects.count() == 0
