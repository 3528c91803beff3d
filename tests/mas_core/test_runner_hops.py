"""mas_core.runner.db: a module's function is wrapped once; what is made per call is not kept."""

from __future__ import annotations

import asyncio
import functools

from mas_core import runner
from mas_core.runner import db


def added(a: int, b: int = 0) -> int:
    return a + b


def test_a_modules_function_is_wrapped_once_and_each_call_still_runs_it():
    first, again = db(added), db(added)
    assert first is again
    assert asyncio.run(first(2, b=3)) == 5
    assert asyncio.run(again(4)) == 4


def test_lambdas_closures_and_partials_are_wrapped_per_call_and_not_kept():
    kept = len(runner._hops)

    def closure(n: int):
        def inner() -> int:
            return n
        return inner

    results = []
    for n in range(50):
        made = [lambda n=n: n, closure(n), functools.partial(added, n)]
        wrappers = [db(func) for func in made]
        assert [db(func) is wrapper for func, wrapper in zip(made, wrappers)] == [False, False, False]
        results.append([asyncio.run(wrapper()) for wrapper in wrappers])
    assert results == [[n, n, n] for n in range(50)]
    assert len(runner._hops) == kept  # a wrapper holds its function: kept, each would be kept for good
