"""A web process's places: how many requests it works on at once (``MAS_WEB_CONCURRENCY``), the others waiting
in its event loop — taken by Django's requests (``mas_project.request_gate``, which says why) and by the doors
beside Django (``agents_app.doors``) for their database work.

Waiting requests are let in lane by lane, a lane per caller (``caller_lane``): a client that sends a hundred
requests at once waits behind its own, and another's request waits for at most one of them per lane. A
request that waits for something outside the server (an MCP server being tested) gives its place up
meanwhile (``away``), so a few such waits cannot hold up everyone else's requests.
"""

from __future__ import annotations

import hashlib

from django.conf import settings

from mas_core.lanes import FairSemaphore, Places
from mas_core.loops import loop_local
from mas_core.ws_security import client_address

_gates: dict[int, FairSemaphore] = {}


def _places() -> FairSemaphore:
    return loop_local(_gates, lambda loop: FairSemaphore(settings.MAS_WEB_CONCURRENCY, loop=loop))


_places_held = Places("mas_web_place", _places)

# Hold one of the running loop's places for the block: ``async with place():`` around work a request does.
place = _places_held.held

# Give the request's place up while it waits for something outside; take it again (in turn) after.
away = _places_held.away


def caller_lane(scope) -> str:
    """The lane of a request's caller: its bearer token or session cookie, else its address.

    Only a digest is kept (the lane key lives as long as requests wait in it); a caller who changes its
    credentials gets another lane, as another caller would.
    """
    for name, value in scope["headers"]:
        if name == b"authorization" or (name == b"cookie" and b"sessionid=" in value):
            return hashlib.blake2b(value, digest_size=8).hexdigest()
    return client_address(scope)
