"""Teams alpha and beta with the operator's stdio grant, for the suites whose checks come on top of it.

A suite imports both names (``from tests.tools_app.stdio_teams import team_a, team_b``); they replace the
ungranted ``team_a`` and ``team_b`` of ``tests/conftest.py`` in that module only.
"""

import pytest


@pytest.fixture
def team_a(make_team):
    """Team alpha, granted stdio MCP servers by the operator."""
    return make_team("alpha", stdio_mcp_allowed=True)


@pytest.fixture
def team_b(make_team):
    return make_team("beta", stdio_mcp_allowed=True)
