"""What tests of real runs share: defining agents, waiting for a run to end, reading its events."""

from __future__ import annotations

import time
from typing import Any, Callable

from agents_app.kinds import AGENT
from mas_core.definitions.services import definition_parse, definition_save
from agents_app.models import Event, Run

ENDED = {"succeeded", "failed", "cancelled"}


def define(team, kind, text: str):
    """Save a definition of ``kind`` from its markdown, as the admin and the API do."""
    return definition_save(kind=kind, team=team, parsed=definition_parse(kind=kind, team=team, text=text))


def agent(team, name: str, frontmatter: str = "", body: str = "You work."):
    """A team agent ``name`` (slug: lower case) with extra frontmatter lines."""
    return define(team, AGENT, f"---\nname: {name}\n{frontmatter}---\n\n{body}\n")


def finish(run, timeout: float = 90) -> Run:
    """The run, re-read once it has ended; fails the test (listing its events) if it has not in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run.pk)
        if run.status in ENDED:
            return run
        time.sleep(0.1)
    raise AssertionError(f"run still {run.status} after {timeout} s: {[e.type for e in events(run)]}")


def events(run, type: str | None = None) -> list[Event]:
    """The run's events in order, or only those of ``type``."""
    rows = Event.objects.filter(run=run).order_by("seq")
    return list(rows.filter(type=type) if type else rows)


def call(name: str, **arguments) -> dict[str, Any]:
    """A scripted model turn that calls one tool."""
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def wait_until(predicate: Callable[[], Any], timeout: float, what: str):
    """Poll ``predicate`` until it returns something true (returned), or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
