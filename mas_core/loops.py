"""One object per running event loop (its publisher, its subscriber, its turns), found by the loop's id."""

from __future__ import annotations

import asyncio
from typing import Callable, Protocol, TypeVar


class _OfALoop(Protocol):
    loop: asyncio.AbstractEventLoop | None


T = TypeVar("T", bound=_OfALoop)


def loop_local(registry: dict[int, T], make: Callable[[asyncio.AbstractEventLoop], T]) -> T:
    """The running loop's object in ``registry``, made by ``make(loop)`` on first use.

    A closed loop's id may come again (tests make loop after loop): an object is the running loop's only if
    its ``loop`` is, and the objects of closed loops go when a new one is made.
    """
    loop = asyncio.get_running_loop()
    found = registry.get(id(loop))
    if found is None or found.loop is not loop:
        for key in [key for key, old in registry.items() if old.loop is not None and old.loop.is_closed()]:
            del registry[key]
        found = registry[id(loop)] = make(loop)
    return found
