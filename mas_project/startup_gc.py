"""A server process's start-up objects are left out of the garbage collector's full collections.

A worker or a web process imports Django, every app, and Celery or daphne: some 200,000 objects that live as long as
the process. A full (generation 2) collection scans every object the collector tracks: 0.15 s of CPU here, on the
thread whose allocation set it off — a worker's session loop (every session waits) or daphne's reactor (every request
and socket waits). Once the process serves, :func:`startup_objects_frozen` moves them to the permanent generation
that no collection scans (``gc.freeze``); what the process makes afterwards is collected as before.
"""

from __future__ import annotations

import gc
import sys


def startup_objects_frozen() -> None:
    """Collect what start-up left as garbage (frozen, it would stay for good), then freeze the rest."""
    gc.collect()
    gc.freeze()


def frozen_once_daphne_serves() -> None:
    """Under daphne, freeze the start-up objects when its reactor starts. Elsewhere (a test process importing the
    application) nothing is installed, and its collector stays as it is."""
    reactor = sys.modules.get("twisted.internet.reactor")  # the reactor itself, once one is installed
    if reactor is not None:
        reactor.callWhenRunning(startup_objects_frozen)
