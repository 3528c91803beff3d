"""Where a step's time goes: wall and CPU time per phase of the worker's hot path, for the benchmarks.

Off unless the environment variable ``MAS_PHASES`` names a file when the
process starts (``bench/kernel_overhead.py`` sets it for its worker). Off,
:func:`timed` returns one shared do-nothing context manager: a phase costs a
function call and an empty ``with``, no clock read. On, each phase adds its
count, wall time (``perf_counter``) and CPU time of the calling thread
(``thread_time``) to this process's totals, and :func:`dump` writes them to
that file as JSON (the worker does after each session).

Phases are inclusive: a phase timed inside another (a file write inside a
tool call) counts in both; the reader subtracts (see ``NESTED``).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from typing import Any

PATH = os.environ.get("MAS_PHASES", "")
ON = bool(PATH)

# name -> [count, wall seconds, CPU seconds of the thread that ran it]
totals: dict[str, list[float]] = {}
_lock = threading.Lock()

# A phase timed inside another: the outer one's own time is its total less the inner ones'.
NESTED = {"tool": ("file write",), "session loop": ()}


class _Timer:
    __slots__ = ("name", "wall", "cpu")

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.thread_time()

    def __exit__(self, *exc: Any) -> None:
        add(self.name, time.perf_counter() - self.wall, time.thread_time() - self.cpu)


_OFF = contextlib.nullcontext()


def timed(name: str):
    """A context manager timing the phase ``name`` (nothing when phases are off)."""
    return _Timer(name) if ON else _OFF


def add(name: str, wall: float, cpu: float, count: int = 1) -> None:
    with _lock:
        found = totals.get(name)
        if found is None:
            totals[name] = [count, wall, cpu]
        else:
            found[0] += count
            found[1] += wall
            found[2] += cpu


def count(name: str, n: int = 1) -> None:
    """Count something without timing it (a statement sent, a step)."""
    if ON:
        add(name, 0.0, 0.0, n)


def dump() -> None:
    """Write this process's totals to ``MAS_PHASES`` (replacing the file; a no-op when off)."""
    if not ON or not PATH:
        return
    with _lock:
        data = {"pid": os.getpid(), "process_cpu": time.process_time(), "totals": totals}
        text = json.dumps(data)
    temporary = f"{PATH}.{os.getpid()}.tmp"
    with open(temporary, "w") as out:
        out.write(text)
    os.replace(temporary, PATH)
