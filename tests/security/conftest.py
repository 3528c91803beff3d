"""Outside-world stand-ins the security tests share: a model provider and a listener that records requests."""

import pytest

from tests.agents_app.llm.fake_servers import FakeServer
from tests.security.listener import Listener


@pytest.fixture
def model_server():
    server = FakeServer().start()
    yield server
    server.stop()


@pytest.fixture
def listener():
    receiver = Listener()
    yield receiver
    receiver.close()
