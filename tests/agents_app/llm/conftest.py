from __future__ import annotations

import pytest

from .fake_servers import FakeServer


@pytest.fixture
def server():
    """A started fake model server; stopped (and any hang released) after the test."""
    fake = FakeServer().start()
    yield fake
    fake.stop()
