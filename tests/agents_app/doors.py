"""What the doors' tests share: a real daphne (``web``, one per test module), the team's model as a local server
speaking OpenAI's wire format (``provider``, replies queued by each test), and a token of a new member."""

from __future__ import annotations

import pytest

from agents_app.kinds import PROVIDER
from tests.agents_app.llm.fake_servers import FakeServer
from tests.runs import define
from tests.web import WebServer


@pytest.fixture(scope="module")
def web(request, django_db_setup, django_db_blocker):
    server = WebServer(label=f"doors-{request.module.__name__.rsplit('.', 1)[-1]}")
    server.start()
    yield f"http://127.0.0.1:{server.port}"
    server.stop()


@pytest.fixture
def provider(team_a):
    server = FakeServer().start()
    define(team_a, PROVIDER, f"---\nname: Fake\ntype: openai\nbase_url: {server.url}/v1\nmodels:\n"
                             "- name: m-medium\n  tier: medium\n---\n")
    yield server
    server.stop()


def token_of(team, role, make_member, make_token) -> str:
    """A token of a new member of ``team`` with ``role``."""
    return make_token(team, make_member(team, role))


def run_example(tmp_path, page: str, containing: str, *args: str):
    """Run the one Python example of the manual's ``page`` holding ``containing`` as a program of its own, with
    ``args`` (the server's address, a token, …): its finished process."""
    import subprocess
    import sys

    from tests.manual import example

    program = tmp_path / "example.py"
    program.write_text(example(page, language="python", containing=containing).text)
    return subprocess.run([sys.executable, str(program), *args], capture_output=True, text=True, timeout=60,
                          check=False)
