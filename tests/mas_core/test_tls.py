"""The process's TLS context: built once, and, from an event loop, built on a thread the first time."""

from __future__ import annotations

import asyncio
import ssl
import threading

from mas_core import tls as tls_module


def test_a_loops_first_tls_context_is_built_on_a_thread_then_shared(monkeypatch):
    built_on: list[str] = []
    real = ssl.create_default_context

    def recorded(*args, **kwargs):
        built_on.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", recorded)
    tls_module.tls.cache_clear()
    try:
        async def twice():
            loop_thread = threading.current_thread().name
            return loop_thread, await tls_module.tls_off_loop(), await tls_module.tls_off_loop()

        loop_thread, first, second = asyncio.run(twice())
        assert first is second is tls_module.tls()
        assert len(built_on) == 1 and built_on[0] != loop_thread  # once, and not on the loop
    finally:
        tls_module.tls.cache_clear()
