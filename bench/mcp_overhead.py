#!/usr/bin/env python3
"""What the MCP bridge adds to a tool call: bridged call vs a direct SDK call, same server, same session.

The test server (tests/tools_app/mcp_servers/demo.py, the SDK's MCPServer over
stdio) answers ``add``. Three ways to call it, N times each, interleaved in
rounds so machine noise hits all alike:

- direct: ``ClientSession.call_tool`` on a session opened with the SDK alone;
- connection: ``tools_app.mcp.client.Connection.call`` (timeout, error mapping, output cap);
- bridged: the registry's ``mcp__demo__add`` as a session calls it (argument
  validation against the tool's JSON schema, breaker, the ``mcp_tool_call`` event to a no-op sink).

    .venv/bin/python bench/mcp_overhead.py [--calls 300]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mas_project.settings")

SERVER = str(ROOT / "tests" / "tools_app" / "mcp_servers" / "demo.py")
# The bridged server runs in the stdio sandbox: it sees this interpreter and the test server's folder.
os.environ.setdefault("MAS_MCP_STDIO_READ_ONLY", ",".join([sys.prefix, sys.base_prefix, str(Path(SERVER).parent)]))


async def main(calls: int) -> None:
    import django

    django.setup()
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from tools_app.mcp.bridge import bridged_tool
    from tools_app.mcp.client import Connection, ServerConfig
    from tools_app.plugin import ToolContext
    from tools_app.registry import ToolRegistry
    from tools_app.specs import MCPServerSpec

    async def sink(type, data):
        return None

    spec = MCPServerSpec(name="demo", transport="stdio", command=sys.executable, args=[SERVER, "stdio"], timeout_s=30)
    connection = Connection(ServerConfig(slug="demo", spec=spec, stdio_allowed=True))
    await connection.open()
    registry = ToolRegistry()
    registry.register(bridged_tool(connection, next(t for t in connection.tools if t.name == "add"), sink))
    ctx = ToolContext(run_id="bench", agent="bench", session_id="bench", workspace=None)
    params = StdioServerParameters(command=sys.executable, args=[SERVER, "stdio"])
    times: dict[str, list[float]] = {"direct": [], "connection": [], "bridged": []}
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as direct:
            await direct.initialize()

            async def one_direct():
                await direct.call_tool("add", {"a": 1, "b": 2})

            async def one_connection():
                await connection.call("add", {"a": 1, "b": 2})

            async def one_bridged():
                outcome = await registry.call("mcp__demo__add", {"a": 1, "b": 2}, ctx)
                assert outcome.ok and outcome.content == "3", outcome

            ways = {"direct": one_direct, "connection": one_connection, "bridged": one_bridged}
            for way in ways.values():  # warm up
                for _ in range(20):
                    await way()
            for _ in range(calls):
                for name, way in ways.items():
                    started = time.perf_counter()
                    await way()
                    times[name].append(time.perf_counter() - started)
    await connection.close()
    base = statistics.median(times["direct"])
    print(f"mcp_overhead: {calls} calls of add per way over stdio, interleaved; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"load average {os.getloadavg()[0]:.2f}")
    print("| way | median | p95 | ratio to direct |")
    print("|---|---|---|---|")
    for name, values in times.items():
        values.sort()
        print(f"| {name} | {statistics.median(values) * 1000:.3f} ms | {values[int(len(values) * 0.95)] * 1000:.3f} ms | "
              f"{statistics.median(values) / base:.2f} |")
    print(f"\nbridge overhead per call: {(statistics.median(times['bridged']) - base) * 1000:+.3f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    asyncio.run(main(parser.parse_args().calls))
