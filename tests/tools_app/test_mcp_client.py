"""The MCP client against real servers written with the SDK's MCPServer (stdio and streamable HTTP)."""

import asyncio
import socket
import sys
import time

import pytest

from tests.processes import in_a_fresh_process
from tests.tools_app.mcp_servers.launch import SERVER, serve
from tools_app.mcp.client import (
    BREAKER_FAILURES,
    Connection,
    MCPError,
    ServerConfig,
    _failures,
    breaker_check,
    breaker_record,
    bridged_name,
    discover,
)
from tools_app.specs import MCPServerSpec

TOOLS = ["add", "env_value", "hang", "crash", "fail", "flood"]


def stdio(**overrides) -> ServerConfig:
    # 10 s to connect: the server is a Python process importing the MCP SDK in the sandbox, which took over 2 s
    # with `make test`'s processes on both cores.
    spec = {"name": "demo", "transport": "stdio", "command": sys.executable, "args": [SERVER, "stdio"],
            "timeout_s": 10, **overrides}
    return ServerConfig(slug="demo", spec=MCPServerSpec.model_validate(spec), stdio_allowed=True)


@pytest.fixture(scope="module")
def http_server():
    process, port = serve("http")
    yield f"http://127.0.0.1:{port}/mcp"
    process.terminate()
    process.wait(10)


def test_sse_lists_and_calls():
    process, port = serve("sse")
    try:
        config = ServerConfig(slug="old", spec=MCPServerSpec(name="old", transport="sse",
                                                             url=f"http://127.0.0.1:{port}/sse", timeout_s=3))
        tools, results = session(config, [("add", {"a": 5, "b": 6})])
        assert (tools, results) == (TOOLS, [("ok", "11")])
    finally:
        process.terminate()
        process.wait(10)


def session(config: ServerConfig, calls):
    async def run():
        connection = Connection(config)
        await connection.open()
        try:
            results = []
            for name, arguments in calls:
                try:
                    results.append(("ok", await connection.call(name, arguments)))
                except MCPError as error:
                    results.append(("error", str(error)))
            return [tool.name for tool in connection.tools], results
        finally:
            await connection.close()

    return asyncio.run(run())


def test_stdio_lists_and_calls_with_only_the_rows_environment(monkeypatch):
    monkeypatch.setenv("MAS_SECRET_CANARY", "canary-41")
    monkeypatch.setenv("GREETING_SOURCE", "from-the-server-env")
    config = stdio(env={"GREETING": "${GREETING_SOURCE}"})
    config.secret_env = {"TOKEN": "s3cret"}
    tools, results = session(config, [("add", {"a": 2, "b": 3}), ("env_value", {"name": "GREETING"}),
                                      ("env_value", {"name": "TOKEN"}), ("env_value", {"name": "MAS_SECRET_CANARY"})])
    assert tools == TOOLS
    assert results == [("ok", "5"), ("ok", "from-the-server-env"), ("ok", "s3cret"), ("ok", "<unset>")]


def test_streamable_http_lists_and_calls(http_server):
    config = ServerConfig(slug="web", spec=MCPServerSpec(name="web", transport="streamable-http", url=http_server,
                                                         timeout_s=8))
    tools, results = session(config, [("add", {"a": 20, "b": 22}), ("fail", {"reason": "x"})])
    assert tools == TOOLS
    assert results[0] == ("ok", "42")
    assert results[1][0] == "error" and results[1][1].startswith("MCP server web: fail returned an error: ")


def test_misbehaving_servers_give_clear_errors_and_never_hang(settings):
    settings.MAS_MCP_MAX_OUTPUT_CHARS = 1000
    started = time.monotonic()
    # A 5 MB answer within an 8 s call timeout: wide enough for a loaded 2-core machine.
    _, results = session(stdio(timeout_s=8), [("fail", {"reason": "bad"}), ("flood", {"megabytes": 5}),
                                              ("hang", {"seconds": 9}),
                                              ("crash", {}), ("add", {"a": 1, "b": 1})])
    assert time.monotonic() - started < 25
    # The SDK's server reports a failing tool without its exception text.
    assert results[0] == ("error", "MCP server demo: fail returned an error: Error executing tool fail")
    assert results[1] == ("ok", "z" * 1000 + "\n[truncated: 5,242,880 characters, the first 1,000 shown]")
    assert results[2] == ("error", "MCP server demo: hang did not answer within 8 s")
    assert results[3] == ("error", "MCP server demo: crash failed: MCPError: Connection closed")
    assert results[4] == ("error", "MCP server demo: add failed: MCPError: Connection closed")


def test_unreachable_servers_fail_to_connect_with_a_reason():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    closed = ServerConfig(slug="gone", spec=MCPServerSpec(name="gone", transport="streamable-http",
                                                          url=f"http://127.0.0.1:{port}/mcp", timeout_s=2))
    with pytest.raises(MCPError, match=r"^MCP server gone could not be reached: .*(onnect|refused)"):
        asyncio.run(discover(closed))
    with pytest.raises(MCPError, match=r"^MCP server demo could not be reached: "):
        asyncio.run(discover(stdio(command="/nonexistent/mcp-server", args=[])))
    with pytest.raises(MCPError, match=r"^MCP server demo: env KEY refers to NOT_SET_ANYWHERE, which is not set on "
                                       r"the server$"):
        asyncio.run(discover(stdio(env={"KEY": "${NOT_SET_ANYWHERE}"})))


def test_a_server_that_never_answers_the_handshake_times_out(settings):
    settings.MAS_MCP_CONNECT_TIMEOUT_S = 1
    silent = stdio(command=sys.executable, args=["-c", "import time; time.sleep(60)"])
    started = time.monotonic()
    with pytest.raises(MCPError, match=r"^MCP server demo did not answer within 1 s \(connect\)$"):
        asyncio.run(discover(silent))
    assert time.monotonic() - started < 8


def test_bridged_names_are_valid_for_every_provider():
    assert bridged_name("github", "search_code") == "mcp__github__search_code"
    assert bridged_name("my server", "do.thing/now") == "mcp__my_server__do_thing_now"
    long = bridged_name("s" * 40, "t" * 40)
    assert len(long) == 64 and long.startswith("mcp__" + "s" * 40) and long != bridged_name("s" * 40, "t" * 41)


def test_the_circuit_breaker_opens_after_repeated_failures():
    config = stdio()
    config.slug = "flaky"
    _failures.clear()
    for _ in range(BREAKER_FAILURES - 1):
        breaker_record(config, ok=False)
    breaker_check(config)  # still closed
    breaker_record(config, ok=False)
    with pytest.raises(MCPError, match=r"^MCP server flaky failed 3 times in a row; not tried again for 30 s$"):
        breaker_check(config)
    breaker_record(config, ok=True)
    breaker_check(config)


def test_a_workers_first_connections_import_nothing_inside_their_timeouts_and_build_no_tls_context(http_server):
    """The SDK's client side (~330 modules, ~0.9 s of CPU here) is not imported when a worker starts (its scheduler
    imports the session module, which imports this client): a process's first connection imports it, in a thread,
    before its connect timeout starts. Under the test suite's load, an import inside the timeout made a worker's
    first HTTP connection miss its 3 s. Every HTTP client shares the process's TLS context (mas_core.tls), built at
    its first use, in that thread too: no CA bundle is read inside a timeout."""
    script = (
        "import asyncio, ssl, sys, django; django.setup()\n"
        "import agents_app.execution.session\n"
        "from tests.tools_app.mcp_servers.launch import SERVER\n"
        "from tools_app.mcp.client import Connection, ServerConfig\n"
        "from tools_app.specs import MCPServerSpec\n"
        "print('mcp' in sys.modules, 'httpx2' in sys.modules)\n"
        "contexts, inside, contexts_inside = [], [], []\n"
        "built = ssl.SSLContext.load_verify_locations\n"
        "ssl.SSLContext.load_verify_locations = lambda *a, **k: (contexts.append(1), built(*a, **k))[1]\n"
        "wait_for = asyncio.wait_for\n"
        "async def timed(awaitable, timeout):\n"
        "    before, read = set(sys.modules), len(contexts)\n"
        "    try:\n"
        "        return await wait_for(awaitable, timeout)\n"
        "    finally:\n"
        "        inside.extend(sorted(set(sys.modules) - before))\n"
        "        contexts_inside.extend(contexts[read:])\n"
        "asyncio.wait_for = timed\n"
        "for spec in [dict(transport='streamable-http', url=sys.argv[1]),\n"
        "             dict(transport='stdio', command=sys.executable, args=[SERVER, 'stdio'])]:\n"
        "    config = ServerConfig(slug='demo', spec=MCPServerSpec(name='demo', timeout_s=10, **spec),\n"
        "                          stdio_allowed=True)\n"
        "    async def first():\n"
        "        connection = Connection(config)\n"
        "        await connection.open()\n"
        "        await connection.close()\n"
        "        return len(connection.tools)\n"
        "    print(spec['transport'], asyncio.run(first()), inside, len(contexts_inside))\n"
    )
    result = in_a_fresh_process(script, http_server)
    assert (result.returncode, result.stdout) == (0, "False False\nstreamable-http 6 [] 0\nstdio 6 [] 0\n"), (
        result.stderr)
