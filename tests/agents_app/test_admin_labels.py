"""Every model the admin shows has a proper name and plural: no "Memorys", "Mcp servers" or "Api tokens"."""

from __future__ import annotations

import re

import pytest
from django.apps import apps
from django.contrib import admin
from django.urls import reverse
from django.utils.text import capfirst

from tests.agents_app.test_admin_definitions import client_for

pytestmark = pytest.mark.django_db

ACRONYMS = ("API", "MCP", "URL", "LLM", "ID")
MAS_APPS = ("agents_app", "tools_app", "memory_app", "workflows_app", "evals_app")


def label_problems(text: str) -> list[str]:
    problems = []
    for word in re.findall(r"[A-Za-z]+", text):
        if re.search(r"[^aeiou]ys$", word.lower()) and word.lower() not in {"days", "keys", "always"}:
            problems.append(f"{word!r}: a plural made by adding s to a y")
        if word.upper() in ACRONYMS and word != word.upper():
            problems.append(f"{word!r}: an acronym in the wrong case")
    return problems


def test_every_model_has_a_proper_name_and_plural():
    models = [*admin.site._registry, *(m for app in MAS_APPS for m in apps.get_app_config(app).get_models())]
    found = {}
    for model in models:
        for text in (model._meta.verbose_name, model._meta.verbose_name_plural):
            problems = label_problems(capfirst(str(text)))
            if problems:
                found[model._meta.label] = problems
    assert found == {}
    names = {m._meta.label: capfirst(m._meta.verbose_name_plural) for m in admin.site._registry}
    assert {k: names[k] for k in ("memory_app.Memory", "memory_app.BlackboardEntry", "tools_app.MCPServer",
                                  "agents_app.ApiToken", "memory_app.CachedResponse")} == {
        "memory_app.Memory": "Memories", "memory_app.BlackboardEntry": "Blackboard entries",
        "tools_app.MCPServer": "MCP servers", "agents_app.ApiToken": "API tokens",
        "memory_app.CachedResponse": "Cached responses"}


def test_the_check_itself_catches_the_old_labels():
    assert label_problems("Memorys") and label_problems("Blackboard entrys") and label_problems("Mcp servers")
    assert label_problems("Api tokens") and not label_problems("API tokens") and not label_problems("Memories")


def test_the_admin_index_shows_the_names(team_a, make_member):
    html = client_for(make_member(team_a, "admin")).get(reverse("admin:index")).content.decode()
    for name in ("Memories", "Blackboard entries", "MCP servers", "API tokens"):
        assert f">{name}</a>" in html, name
    for wrong in ("Memorys", "entrys", "Mcp servers", "Api tokens"):
        assert wrong not in html
